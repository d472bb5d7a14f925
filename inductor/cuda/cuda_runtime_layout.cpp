// Which sizes and strides a CUDA kernel written with a run-time layout
// takes as arguments, the words a launch passes for them, and its grid
// (Note [CUDA run-time layout]).

#include <algorithm>

#include "inductor/cuda/cuda_launch.h"
#include "inductor/cuda/cuda_source.h"

namespace kiln::inductor::cuda {

// Note [CUDA run-time layout]
// A graph with symbolic sizes is compiled once per size (Note [Size
// instances]); with constants for every size and stride, each instance's
// CUDA kernels were new sources, and NVRTC compiled them again (20-70 ms a
// kernel, seconds a new length of a transformer). So kernels of a size
// instance (KernelTargets::cuda_runtime_layout, set for them by the
// compile pipeline) are written with their outer layout as arguments, as
// CPU kernels read theirs (Note [Run-time outer layout]):
//   - pointwise kernels: every size, and every dim's stride but the
//     innermost (1 or 0 decides the vector entry; a zero stride, a
//     broadcast, stays a constant everywhere: it decides which loads move);
//   - row reductions (no tile dim): the sizes and strides of the kept dims,
//     which all come before the reduced ones. The reduced dims stay
//     constants: the launch configuration (threads per row, persistent
//     items) is chosen from their points;
//   - reductions with a tile dim keep every constant (their configuration
//     follows the number of rows too).
// The entries take the words as `long long` scalars after the pointers
// (sizes of dims [0, layout_sizes), then each operand's strides along
// [0, layout_strides)) and copy them into locals of the index type at
// their start; then the size constants of the kernel's expressions
// (Expr::size_value: a cat's bounds, such as the attention bias padded to
// a multiple of 16 keys, whose mask piece ends at the key length), numbered
// as the writer first prints them, so kernels of one text number them
// alike. Their values are per kernel: a launch passes the words computed
// from its own kernel's source (CudaKernelResult::words), not the shared one's. The loop bounds (rows), the row decomposition (divisions
// by the sizes) and the operands' offsets read those; the grid is computed
// at launch from the launched kernel's rows (grid_for_rows), not the
// source's. Everything the writer decides from sizes is in the text, so
// the source text stays the cache key: 32- or 64-bit indices, a vector
// entry (strides multiples of its width), dims of size 1 left out. Kernels
// that differ only in what became arguments share one source, one NVRTC
// compile and one cubin, whichever was compiled first serving all (its
// CudaSource's grid is that kernel's: launches never read it).
// Static graphs keep constants: a division by a run-time size costs more
// than one by a constant, and a static graph compiles its sizes once.

RuntimeLayoutDims runtime_layout_dims(const Kernel& kernel) {
  RuntimeLayoutDims dims;
  const int rank = static_cast<int>(kernel.sizes.size());
  if (rank == 0) return dims;
  if (kernel.reduced.empty()) {
    dims.sizes = rank;
    dims.strides = rank - 1;
    return dims;
  }
  if (tile_dim(kernel) >= 0) return dims;
  dims.sizes = dims.strides = kernel.reduced.front();
  return dims;
}

std::vector<int64_t> layout_words(const Kernel& kernel, const CudaSource& source) {
  std::vector<int64_t> words;
  if (source.layout_sizes == 0 && source.layout_strides == 0) return words;
  words.reserve(source.layout_sizes + (kernel.inputs.size() + kernel.outputs.size()) * source.layout_strides);
  for (int d = 0; d < source.layout_sizes; ++d) words.push_back(kernel.sizes[d]);
  for (const KernelInput& in : kernel.inputs) {
    for (int d = 0; d < source.layout_strides; ++d) words.push_back(in.strides[d]);
  }
  for (const KernelOutput& out : kernel.outputs) {
    for (int d = 0; d < source.layout_strides; ++d) words.push_back(out.strides[d]);
  }
  for (int id : source.runtime_constants) words.push_back(kernel.exprs.at(id).integer);
  return words;
}

size_t layout_word_count(const CudaSource& source, const Kernel& kernel) {
  if (source.layout_sizes == 0 && source.layout_strides == 0) return 0;
  return source.layout_sizes + (kernel.inputs.size() + kernel.outputs.size()) * source.layout_strides +
         source.runtime_constants.size();
}

int64_t kernel_rows(const Kernel& kernel) { return detail::row_shape(kernel).rows; }

int64_t grid_for_rows(const CudaEntry& entry, int64_t rows) {
  return std::min(detail::kMaxGrid, (rows + entry.rows_per_block - 1) / entry.rows_per_block);
}

}  // namespace kiln::inductor::cuda
