// Strides as torch lays tensors out: contiguity tests, memory formats, the
// layout a copy preserves, and the layout TensorIterator gives an
// elementwise op's output. See Note [Elementwise output layout].
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::prims {

using Sizes = std::vector<int64_t>;

// torch.memory_format values that decide a new tensor's strides.
enum class MemoryFormat : int8_t { Contiguous, ChannelsLast, ChannelsLast3d, Preserve };

// Tensor.is_contiguous(): row-major, size-1 dims ignored, size-0 tensors always.
bool is_contiguous(const Sizes& sizes, const Sizes& strides);

// Tensor.is_contiguous(memory_format=torch.channels_last) for 4-dim tensors
// (false for other ranks).
bool is_channels_last_contiguous(const Sizes& sizes, const Sizes& strides);

// True when the elements fill a dense block without overlap, in any dim order.
bool is_non_overlapping_and_dense(const Sizes& sizes, const Sizes& strides);

// The memory format torch suggests for a tensor (channels_last when 4-dim
// strides look like NHWC, channels_last_3d for 5-dim NDHWC, else contiguous).
MemoryFormat suggest_memory_format(const Sizes& sizes, const Sizes& strides);

// True when strides `a` and `b` agree on every dim of `sizes` with more than
// one element (a size-1 dim's stride addresses nothing).
bool strides_agree(const Sizes& sizes, const Sizes& a, const Sizes& b);

// The strides of a fresh tensor of `sizes` in `format` (not Preserve).
Sizes strides_for(const Sizes& sizes, MemoryFormat format);

// The strides empty_like(memory_format=torch.preserve_format) gives (and so
// clone() and to(dtype)): the same strides for a dense tensor, otherwise
// dense strides in the input's dim order.
Sizes preserved_strides(const Sizes& sizes, const Sizes& strides);

// The dims of a dense layout, outermost first: permuting a tensor with
// `strides` by them gives contiguous strides (identity for a contiguous one).
std::vector<int64_t> dense_dim_order(const Sizes& sizes, const Sizes& strides);

// The strides TensorIterator gives the output of an elementwise op whose
// inputs (in torch's operand order) broadcast to `shape`.
Sizes elementwise_output_strides(const Sizes& shape,
                                 const std::vector<const graph::TensorMeta*>& inputs);

}  // namespace kiln::prims
