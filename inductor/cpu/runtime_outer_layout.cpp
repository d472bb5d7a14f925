// Which sizes and strides of a CPU kernel its code reads at run time, the
// words a call passes for them, and the text that keys the machine code
// (Note [Run-time outer layout]).

#include "inductor/cpu/cpu_kernel.h"

#include <algorithm>

namespace kiln::inductor::cpu {

// Note [Run-time outer layout]
// A graph with symbolic sizes is compiled once per size (Note [Size
// instances]), and most of its kernels differ between sizes only in their
// outer loops: the rows of a [batch * length, hidden] layer norm, the
// [batch, length, heads] loops of a head-splitting copy whose input strides
// are multiples of the length. So the code generator compiles in only what
// shapes the inner loops and reads the rest from the ABI's sizes array:
//   - strides along the outer dims: every kept dim before the reduced ones,
//     or for a pointwise kernel every dim but the last, is a loop whose
//     operands advance by a stride read at run time (a zero stride, a
//     broadcast, stays a constant: it decides which loads move);
//   - sizes of those dims, and of dim 0 whenever it is kept (a pointwise
//     kernel of rank 1 too): bounds of those loops, the parallel dim's
//     range a call gets as [begin, end) anyway.
// The last dim (the vectorized loop of a pointwise kernel), the reduced
// dims, the tile dim, offsets, constants and computed-index strides stay
// constants, as does everything of a split reduction, whose chunks are
// planned from its sizes. The outer loops did their arithmetic in
// registers already, so the code is as fast as with constants (loads of a
// few words per call). The cache key writes the run-time sizes and nonzero
// strides as -1 and leaves out the outputs' tensor shapes (the runner's,
// for allocating), so every kernel that differs from another only there
// shares its compiled function: a new size instance of a transformer layer
// compiles only the kernels whose inner loops changed (attention's scores,
// whose rows are the length).
//
// ABI: sizes[0 .. rank) as always, then for each operand k (inputs, then
// outputs) its strides along dims 0 .. strides: word rank + k * strides + d.

RuntimeOuterDims runtime_outer_dims(const Kernel& kernel, const ReductionSplit& split) {
  RuntimeOuterDims dims;
  const int rank = static_cast<int>(kernel.sizes.size());
  if (rank == 0 || split.chunks > 0 || is_reduced(kernel, 0)) return dims;
  dims.strides = kernel.reduced.empty() ? rank - 1 : kernel.reduced.front();
  dims.sizes = std::max(1, dims.strides);
  return dims;
}

RuntimeOuterDims runtime_outer_dims(const Kernel& kernel) { return runtime_outer_dims(kernel, split_reduction(kernel)); }

size_t abi_size_words(const Kernel& kernel, const RuntimeOuterDims& dims) {
  return kernel.sizes.size() + (kernel.inputs.size() + kernel.outputs.size()) * static_cast<size_t>(dims.strides);
}

void fill_abi_sizes(const Kernel& kernel, const RuntimeOuterDims& dims, int64_t* words) {
  for (int64_t size : kernel.sizes) *words++ = size;
  for (const KernelInput& in : kernel.inputs) {
    for (int d = 0; d < dims.strides; ++d) *words++ = in.strides[d];
  }
  for (const KernelOutput& out : kernel.outputs) {
    for (int d = 0; d < dims.strides; ++d) *words++ = out.strides[d];
  }
}

std::string kernel_code_text(const Kernel& kernel) {
  Kernel code = kernel;
  code.name = "";
  const RuntimeOuterDims dims = runtime_outer_dims(kernel);
  if (dims.sizes > 0) {
    for (int d = 0; d < dims.sizes; ++d) code.sizes[d] = -1;
    auto hide = [&](std::vector<int64_t>& strides) {
      for (int d = 0; d < dims.strides; ++d) {
        if (strides[d] != 0) strides[d] = -1;
      }
    };
    for (KernelInput& in : code.inputs) hide(in.strides);
    for (KernelOutput& out : code.outputs) {
      hide(out.strides);
      out.has_tensor_shape = false;
      out.tensor_sizes.clear();
      out.tensor_strides.clear();
    }
  }
  return format_kernel(code);
}

}  // namespace kiln::inductor::cpu
