// Kernel IR -> CUDA C source text (Note [CUDA kernels] in cuda_source.cpp):
// one translation unit per Kernel, needing no CUDA header, compiled by
// NVRTC (nvrtc_compiler.h) and launched by cuda_kernel_runner.h. Pure
// text: no CUDA library is touched here.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "inductor/kernel_ir.h"

namespace kiln::inductor::cuda {

// Thrown when a kernel cannot be written as CUDA C (an invalid kernel, a
// dtype CUDA kernels do not handle) or cannot be compiled or launched.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Note [CUDA launch configurations]
// How a kernel's rows (Note [CUDA kernels] in cuda_source.cpp) are spread
// over threads: the generated code depends on it, so each configuration is
// its own source (and cache entry). default_launch_config is the heuristic
// kiln uses unless told otherwise; launch_candidates lists the few others
// worth timing (mode="max-autotune", cuda_autotune.h). Pointwise kernels
// and reductions with a tile dim have only their default layout (a
// candidate may still turn their vector entry off); row reductions choose:
//   - threads_per_row: 1 (rows of at most 16 points), 32 (a warp, combined
//     by shuffles) or a power of two from 64 to 1024 (several warps,
//     combined by shuffles, then through shared memory);
//   - rows_per_block: rows sharing a block (threads_per_row * rows_per_block
//     threads, at most 1024);
//   - max_items: the most points a thread keeps in registers: a row of at
//     most threads_per_row * max_items points is "persistent" (read from
//     memory once, loops unrolled); longer rows loop over memory;
//   - vector_bytes: 16 or 8 bytes per access of the vector entry (rows or
//     pointwise points contiguous and aligned), 0 for the scalar entry only;
//   - min_blocks_per_sm: __launch_bounds__' second argument (0: none),
//     which caps registers per thread so that many blocks fit an SM;
//   - runtime_layout: the outer sizes and strides are the entry's scalar
//     arguments, not constants (Note [CUDA run-time layout]).
struct LaunchConfig {
  int threads_per_row = 1;
  int rows_per_block = 1;
  int max_items = 0;
  int vector_bytes = 16;
  int min_blocks_per_sm = 0;
  bool runtime_layout = false;

  bool operator==(const LaunchConfig&) const = default;
};

// One __global__ function of the source and how to launch it.
struct CudaEntry {
  std::string name;   // extern "C" symbol; "" when the source has no such variant
  int block = 0;      // threads per block
  int64_t grid = 0;   // blocks (every kernel loops over its work grid-stride)
  int64_t rows_per_block = 1;  // rows a block takes per step of that loop
};

// The blocks `entry` is launched with for a kernel of `rows` rows (kept
// points): one per rows_per_block rows, at most 2^20 (the loop strides).
int64_t grid_for_rows(const CudaEntry& entry, int64_t rows);

// Note [CUDA kernel ABI]
// Every entry takes one pointer per kernel input (its first element; the
// Kernel's input offset is compiled in), then one per output, in order;
// a source written with a run-time layout then takes its layout words as
// `long long` scalars (Note [CUDA run-time layout] in cuda_runtime_layout.cpp).
// `vector` (pointwise kernels, row reductions whose rows are contiguous,
// and split tile reductions whose tile dim is: Note [Vector tiles]) reads and writes 16 (or 8) bytes per access and may be launched
// only when the pointer of every operand whose innermost stride is 1 is
// aligned to `vector_width` elements of its dtype; `scalar` runs everywhere.
struct CudaSource {
  std::string text;       // the translation unit
  CudaEntry scalar;
  CudaEntry vector;       // name "" when the kernel does not allow it
  int vector_width = 0;   // elements per vector access
  bool empty = false;     // no point to compute: nothing is launched
  LaunchConfig config;    // the layout it was written for
  // Run-time layout: the leading dims whose sizes, and whose strides (per
  // operand), the entries take as arguments; 0 and 0 when all are constants.
  int layout_sizes = 0;
  int layout_strides = 0;
  // Run-time layout: the kernel's size constants (Expr::size_value) the
  // entries take after the layout words, as expression ids of the kernel
  // the source was written for, in parameter order.
  std::vector<int> runtime_constants;
};

// The outer dims `kernel`'s CUDA source reads at run time under a
// configuration with runtime_layout: {sizes, strides} as in CudaSource.
struct RuntimeLayoutDims {
  int sizes = 0;
  int strides = 0;
};
RuntimeLayoutDims runtime_layout_dims(const Kernel& kernel);

// The words a launch of `source` passes after the pointers, for `kernel`,
// the kernel `source` was written for: its sizes of dims
// [0, layout_sizes), then per operand (inputs, then outputs) its strides
// along dims [0, layout_strides), then its runtime_constants' values.
// Empty for a source with constant layout. Another kernel of the same text
// launches with its own words, from its own source.
std::vector<int64_t> layout_words(const Kernel& kernel, const CudaSource& source);

// How many words a launch of `source` passes for `kernel`.
size_t layout_word_count(const CudaSource& source, const Kernel& kernel);

// The rows of `kernel` (the product of its kept dims' sizes), which its
// entries' grids are computed from.
int64_t kernel_rows(const Kernel& kernel);

// "tpr=256 rpb=1 items<=16 vec=16B" (and " minblocks=N", " layout=run-time"
// when set): a configuration as logs and benchmarks print it.
std::string format_launch_config(const LaunchConfig& config);

// The configuration kiln picks for `kernel` by its shape alone (the
// heuristic of Note [CUDA kernels]). `kernel` must pass verify().
LaunchConfig default_launch_config(const Kernel& kernel);

// The configurations worth timing for `kernel`, the default first, then
// each other one once: a handful (at most kMaxLaunchCandidates), every one
// accepted by generate_cuda_source. `kernel` must pass verify().
std::vector<LaunchConfig> launch_candidates(const Kernel& kernel);
// The most configurations launch_candidates returns for one kernel.
inline constexpr size_t kMaxLaunchCandidates = 12;

// Writes `kernel` as CUDA C laid out as `config` says. `kernel` must pass
// verify(). Throws CudaError for an invalid kernel or a configuration the
// kernel cannot take.
CudaSource generate_cuda_source(const Kernel& kernel, const LaunchConfig& config);

// generate_cuda_source with default_launch_config(kernel).
CudaSource generate_cuda_source(const Kernel& kernel);

}  // namespace kiln::inductor::cuda
