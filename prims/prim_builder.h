// Appends prims to a PrimGraph with typed calls, inferring each result's
// metadata with the prim's meta rule and storing dims in canonical form
// (wrapped to [0, ndim)). What decompositions and derivative rules write.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "prims/layout.h"
#include "prims/prim_graph.h"

namespace kiln::prims {

// Every call throws PrimError (naming the prim and the problem) for input
// the prim rejects, before anything is appended.
class PrimBuilder {
 public:
  // `default_float` is torch.get_default_dtype() at trace time (the dtype
  // Python floats and int-to-float results take).
  explicit PrimBuilder(PrimGraph& graph, DType default_float = DType::Float32)
      : graph_(graph), default_float_(default_float) {}

  PrimGraph& graph() { return graph_; }
  // The metadata of a value.
  const graph::TensorMeta& meta(int value) const { return graph_.value(value).meta; }
  DType default_float() const { return default_float_; }

  // Elementwise prims (unary, binary, where) over values and scalars.
  int pointwise(Prim prim, std::vector<PrimArg> args);
  // Shorthands for pointwise.
  int unary(Prim prim, int a) { return pointwise(prim, {PrimArg::of_value(a)}); }
  int binary(Prim prim, PrimArg a, PrimArg b) { return pointwise(prim, {a, b}); }
  int where(int cond, PrimArg a, PrimArg b) { return pointwise(Prim::Where, {PrimArg::of_value(cond), a, b}); }

  // convert_element_type(a, dtype), keeping a's layout.
  int convert(int a, DType dtype);
  // clone(a) in `format`.
  int clone(int a, MemoryFormat format = MemoryFormat::Preserve);

  // sum, prod, amax, amin, argmax, argmin over `dims` (empty: all dims).
  int reduce(Prim prim, int a, std::vector<int64_t> dims, bool keepdim,
             std::optional<DType> dtype = std::nullopt);
  // var_mean(a, dims, correction, keepdim) -> (var, mean).
  std::pair<int, int> var_mean(int a, std::vector<int64_t> dims, double correction, bool keepdim);

  // Views. reshape may copy (then its result is no view, as in torch).
  int view(int a, std::vector<int64_t> sizes);
  int reshape(int a, std::vector<int64_t> sizes);
  int expand(int a, std::vector<int64_t> sizes);
  int permute(int a, std::vector<int64_t> dims);
  int slice(int a, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
            int64_t step = 1);
  int squeeze(int a, std::vector<int64_t> dims = {});
  int unsqueeze(int a, int64_t dim);
  int as_strided(int a, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                 int64_t offset = 0);

 private:
  PrimGraph& graph_;
  DType default_float_;
};

}  // namespace kiln::prims
