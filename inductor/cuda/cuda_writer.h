// The CUDA C source writer of one kernel under one launch configuration
// (Note [CUDA kernels] in cuda_source.cpp): its scopes, contexts and the
// Writer, whose parts live in cuda_source.cpp (values, pointwise kernels,
// the whole source), cuda_rows.cpp (row reductions) and cuda_tiles.cpp
// (outer reductions with vector tiles).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_source.h"

namespace kiln::inductor::cuda::detail {

// Lanes of a warp along the tile of a vector tile kernel (Note [Vector
// tiles] in cuda_tiles.cpp).
constexpr int kTileLanes = 8;

// Where an expression's value is defined: the statements written so far,
// their indentation, and per expression the C name of its value there.
struct Scope {
  std::string code;
  std::string indent;
  std::vector<std::string> names;
  char prefix = 'v';  // names: v<id> per row, w<id> per point
};

// How values are read in the code being written.
struct Context {
  Scope* row = nullptr;    // values constant along the inner loop
  Scope* point = nullptr;  // values that vary (null: everything per row)
  const std::vector<bool>* varies = nullptr;
  // The C expression reading input `i` (stored type) per row or per point,
  // `extra` (" + ...", or empty) added to its element offset: a LoadAt's
  // computed part (Note [Loads at computed indices]; vector reads take none).
  std::function<std::string(int input, bool at_point, const std::string& extra)> load;
  // Persistent rows: per expression, "p<id>[k]" once computed by an earlier
  // phase, and whether this phase must keep what it computes.
  std::vector<std::string>* persisted = nullptr;
  const std::vector<bool>* keep = nullptr;
  std::string slot = "k";  // the point's index in the persistent arrays
};

class Writer {
 public:
  Writer(const Kernel& kernel, const LaunchConfig& config) : k_(kernel), config_(config) {}

  CudaSource write();
  std::string entry_name(int tile) const;

 private:
  // Kernel geometry.
  int rank() const { return static_cast<int>(k_.sizes.size()); }
  size_t operands() const { return k_.inputs.size() + k_.outputs.size(); }
  const std::vector<int64_t>& strides(size_t op) const {
    return op < k_.inputs.size() ? k_.inputs[op].strides : k_.outputs[op - k_.inputs.size()].strides;
  }
  DType dtype(size_t op) const {
    return op < k_.inputs.size() ? k_.inputs[op].dtype : k_.outputs[op - k_.inputs.size()].dtype;
  }
  int64_t offset(size_t op) const { return op < k_.inputs.size() ? k_.inputs[op].offset : 0; }
  std::string pointer(size_t op) const {
    return op < k_.inputs.size() ? "in" + std::to_string(op) : "out" + std::to_string(op - k_.inputs.size());
  }

  // A dim's size as the code reads it: a constant, or its run-time local
  // (Note [CUDA run-time layout]); likewise the kernel's rows.
  std::string size_text(int d) const;
  std::string rows_text() const;
  // The run-time layout's scalar parameters, and the locals read from them.
  std::string layout_parameters() const;
  std::string layout_locals() const;
  // Constant `id` as the code reads it: its literal, or under a run-time
  // layout a size constant's argument (numbered as first printed).
  std::string constant_ref(int id);
  // Every entry and its launch, before the size constants' parameters are
  // written into the signatures (write() does that last).
  CudaSource write_entries();

  std::string value(int id, Context& c);
  std::string compute(int id, Context& c);
  std::string signature(const std::string& name, int block) const;
  // "const IDX i<d> = ...;" for `dims` (innermost last) from `index`.
  std::string decompose(const std::vector<int>& dims, const std::string& index, const std::string& indent,
                        const std::string& prefix) const;
  std::string offset_terms(size_t op, const std::vector<int>& dims, const std::string& prefix) const;
  bool output_is_full(size_t i) const;
  std::string store(size_t i, const std::string& value, const std::string& at) const;
  std::string point_load(int input, Scope& point, std::vector<bool>* declared, const std::string& extra) const;
  std::string write_rows(const std::string& name, int width);
  int row_vector_width() const;
  std::string write_vector(const std::string& name, int width);
  int tile_vector_width() const;
  std::string write_tile_vector(const std::string& name, int width);
  int vector_width() const;
  // True when an expression is a LoadAt (row and tile vector entries refuse the kernel).
  bool has_load_at() const;
  // Per expression: whether it varies along the pointwise vector's lanes.
  std::vector<bool> varies_along_lanes() const;

  const Kernel& k_;
  const LaunchConfig config_;
  std::string idx_ = "int";
  std::vector<int> kept_, reduced_;
  std::vector<bool> varies_;
  std::vector<int> stage_;
  std::vector<std::string> reduce_names_;
  int64_t rows_ = 1, row_points_ = 1;
  int tpr_ = 1, rpb_ = 1;
  bool split_tile_ = false;  // tile rows shared by kSplitThreads threads (Note [CUDA kernels])
  // The block's row loop is uniform (each of its rows a lane or warp
  // group of the block, stepping together for __syncthreads) and a thread
  // whose row is past the last one recomputes the last row and stores
  // nothing (`kiln_valid`): split tile rows, and block rows several a block.
  bool guarded_ = false;
  int items_ = 0;  // persistent rows: points per thread; 0: looped
  RuntimeLayoutDims layout_;  // dims read at run time (Note [CUDA run-time layout])
  std::vector<int> runtime_constants_;  // size constants taken as arguments, in parameter order
  std::vector<int> constant_param_;     // per expression: its parameter, or -1
};

}  // namespace kiln::inductor::cuda::detail
