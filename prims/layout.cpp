#include "prims/layout.h"

#include <algorithm>
#include <numeric>

namespace kiln::prims {
namespace {

// Note [Elementwise output layout]
// TensorIterator allocates an elementwise output in one of two ways.
// Fast setup, when all inputs have the output's shape: contiguous if all are
// contiguous, channels_last if all are, else the inputs' own strides if all
// are dense and share them. Otherwise it orders the dims from fastest to
// slowest by an insertion sort that asks the inputs in order: the first
// input whose strides for two dims differ (neither being 0, i.e. broadcast)
// decides; equal strides put the smaller dim first. The output gets dense
// strides in that order (plain contiguous strides when the order is the
// natural one). Broadcast dims of an input count as stride 0, but a size-1
// dim of an input that is also size 1 in the output keeps its stride, which
// can decide the order. Strides in the dense order multiply raw sizes, so a
// size-0 dim gives the dims after it stride 0, as torch does.

// Sorts dims fastest-first as TensorIterator and infer_dense_strides do.
// `strides[k]` are operand k's strides over the output's dims.
std::vector<int64_t> fastest_first(const Sizes& shape, const std::vector<Sizes>& strides) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  std::vector<int64_t> perm(ndim);
  // n-1, ..., 1, 0: the natural order, fastest dim first.
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (ndim <= 1) return perm;
  // 1: dim0 goes after dim1; -1: before; 0: this pair is ambiguous.
  auto should_swap = [&](int64_t dim0, int64_t dim1) {
    for (const Sizes& s : strides) {
      const int64_t stride0 = s[dim0], stride1 = s[dim1];
      if (stride0 == 0 || stride1 == 0) continue;
      if (stride0 < stride1) return -1;
      if (stride0 > stride1) return 1;
      if (shape[dim0] > shape[dim1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < ndim; ++i) {
    int64_t dim1 = i;
    for (int64_t dim0 = i - 1; dim0 >= 0; --dim0) {
      const int comparison = should_swap(perm[dim0], perm[dim1]);
      if (comparison > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (comparison < 0) {
        break;
      }
    }
  }
  return perm;
}

bool is_natural_order(const std::vector<int64_t>& perm) {
  const int64_t ndim = static_cast<int64_t>(perm.size());
  for (int64_t j = 0; j < ndim; ++j) {
    if (perm[j] != ndim - 1 - j) return false;
  }
  return true;
}

// is_channels_last_strides_2d/3d: strides ordered like channels-last, with
// torch's tie-breaks towards contiguous for ambiguous size-1 dims.
bool strides_like_channels_last(const Sizes& sizes, const Sizes& strides,
                                std::initializer_list<int> order) {
  int64_t min = 0;
  if (strides[1] == 0) return false;
  for (int d : order) {
    if (sizes[d] == 0) return false;
    if (strides[d] < min) return false;
    if (d == 0 && min == strides[1]) return false;
    min = strides[d];
    if (sizes[d] > 1) min *= sizes[d];
  }
  return true;
}

Sizes channels_last_strides(const Sizes& sizes, std::initializer_list<int> order) {
  Sizes strides(sizes.size());
  int64_t running = 1;
  for (int d : order) {
    strides[d] = running;
    running *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

}  // namespace

bool is_contiguous(const Sizes& sizes, const Sizes& strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 0) return true;
  }
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

bool is_channels_last_contiguous(const Sizes& sizes, const Sizes& strides) {
  if (sizes.size() != 4) return false;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

bool is_non_overlapping_and_dense(const Sizes& sizes, const Sizes& strides) {
  if (is_contiguous(sizes, strides)) return true;
  const size_t ndim = sizes.size();
  if (ndim == 1) return sizes[0] < 2 || strides[0] == 1;
  std::vector<size_t> perm(ndim);
  std::iota(perm.begin(), perm.end(), 0);
  // By stride, size-0 and size-1 dims last (they do not constrain density).
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t required = 1;
  for (size_t d : perm) {
    if (sizes[d] < 2) return true;
    if (strides[d] != required) return false;
    required *= sizes[d];
  }
  return true;
}

MemoryFormat suggest_memory_format(const Sizes& sizes, const Sizes& strides) {
  if (sizes.size() == 4 && strides_like_channels_last(sizes, strides, {1, 3, 2, 0})) {
    return MemoryFormat::ChannelsLast;
  }
  if (sizes.size() == 5 && strides_like_channels_last(sizes, strides, {1, 4, 3, 2, 0})) {
    return MemoryFormat::ChannelsLast3d;
  }
  return MemoryFormat::Contiguous;
}

bool strides_agree(const Sizes& sizes, const Sizes& a, const Sizes& b) {
  if (a.size() != sizes.size() || b.size() != sizes.size()) return false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] != 1 && a[d] != b[d]) return false;
  }
  return true;
}

Sizes strides_for(const Sizes& sizes, MemoryFormat format) {
  if (format == MemoryFormat::ChannelsLast && sizes.size() == 4) {
    return channels_last_strides(sizes, {1, 3, 2, 0});
  }
  if (format == MemoryFormat::ChannelsLast3d && sizes.size() == 5) {
    return channels_last_strides(sizes, {1, 4, 3, 2, 0});
  }
  return graph::contiguous_strides(sizes);
}

Sizes preserved_strides(const Sizes& sizes, const Sizes& strides) {
  if (is_non_overlapping_and_dense(sizes, strides)) return strides;
  const std::vector<int64_t> perm = fastest_first(sizes, {strides});
  Sizes out(sizes.size());
  int64_t running = 1;
  for (int64_t d : perm) {
    out[d] = running;
    // infer_dense_strides treats size 0 as 1 (unlike TensorIterator).
    if (sizes[d] > 1) running *= sizes[d];
  }
  return out;
}

std::vector<int64_t> dense_dim_order(const Sizes& sizes, const Sizes& strides) {
  std::vector<int64_t> order = fastest_first(sizes, {strides});
  std::reverse(order.begin(), order.end());
  return order;
}

Sizes elementwise_output_strides(const Sizes& shape,
                                 const std::vector<const graph::TensorMeta*>& inputs) {
  // Fast setup: every input already has the output's shape.
  bool same_shape = true;
  for (const graph::TensorMeta* t : inputs) same_shape = same_shape && t->sizes == shape;
  if (same_shape) {
    bool contiguous = true, channels_last = true, dense = true;
    for (const graph::TensorMeta* t : inputs) {
      contiguous = contiguous && is_contiguous(t->sizes, t->strides);
      channels_last = channels_last && is_channels_last_contiguous(t->sizes, t->strides);
      dense = dense && is_non_overlapping_and_dense(t->sizes, t->strides);
    }
    if (contiguous) return graph::contiguous_strides(shape);
    if (channels_last) return strides_for(shape, MemoryFormat::ChannelsLast);
    bool shared = dense;
    for (const graph::TensorMeta* t : inputs) shared = shared && t->strides == inputs.front()->strides;
    if (shared) return inputs.front()->strides;
  }
  // Each input's strides over the output's dims; broadcast dims are 0.
  const size_t ndim = shape.size();
  std::vector<Sizes> strides;
  strides.reserve(inputs.size());
  for (const graph::TensorMeta* t : inputs) {
    Sizes s(ndim, 0);
    const size_t offset = ndim - t->sizes.size();
    for (size_t i = 0; i < t->sizes.size(); ++i) {
      const bool broadcast = t->sizes[i] == 1 && shape[offset + i] != 1;
      s[offset + i] = broadcast ? 0 : t->strides[i];
    }
    strides.push_back(std::move(s));
  }
  const std::vector<int64_t> perm = fastest_first(shape, strides);
  if (is_natural_order(perm)) return graph::contiguous_strides(shape);
  Sizes out(ndim);
  int64_t running = 1;
  for (int64_t d : perm) {
    out[d] = running;
    running *= shape[d];
  }
  return out;
}

}  // namespace kiln::prims
