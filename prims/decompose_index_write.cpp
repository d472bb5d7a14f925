// The functional form of an index write, `y[index] = value`, on a tensor
// the graph made (Note [Index writes on intermediates]).
#include <Python.h>

#include <functional>

#include "prims/decompositions.h"
#include "prims/factory_meta.h"
#include "prims/layout.h"

namespace kiln::prims {

// Note [Index writes on intermediates]
// `y[i, a:b] = v` on a tensor the graph made that nothing else sees
// (functionalize_inplace in decompose.cpp) is y with the indexed block
// replaced: per dim the index narrows, a cat of y's slices before and after
// the block around the rest, innermost first, with v cast to y's dtype and
// broadcast to the block. The write was an extern, which kiln's autograd
// refuses on a gradient path (RecurrentGemma's linear scan: `out =
// zeros_like(x)`, then `out[:, t] = state` per step, ran its whole training
// graph through torch's autograd); slices and cats it differentiates.
// Ints, slices (stepped ones as below) and one Ellipsis; other indices
// stay the extern.
std::vector<int> decompose_SetItem(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int y = c.tensor("input");
  const graph::TensorMeta meta = b.meta(y);
  const int64_t rank = static_cast<int64_t>(meta.sizes.size());
  std::vector<base::PyRef> held;
  std::vector<int> tensor_values;
  c.index_or_item("index", &held, &tensor_values);
  int64_t consumed = 0;
  for (size_t k = 0; k < held.size(); ++k) {
    if (tensor_values[k] >= 0) c.unsupported("a tensor index");
    if (held[k].get() != Py_Ellipsis) ++consumed;
  }
  if (consumed > rank) c.unsupported("too many indices");
  // Per dim of y: the slice written (start, stop, step), and whether an int
  // removed the dim from the indexed view.
  std::vector<int64_t> start(rank, 0), stop(meta.sizes), step(rank, 1), count(meta.sizes);
  std::vector<bool> dropped(rank, false);
  bool ellipsis = false;
  int64_t dim = 0;
  for (const base::PyRef& held_item : held) {
    PyObject* item = held_item.get();
    if (item == Py_Ellipsis) {
      if (ellipsis) c.unsupported("two Ellipses");
      ellipsis = true;
      dim += rank - consumed;
      continue;
    }
    const int64_t size = meta.sizes[dim];
    if (PySlice_Check(item)) {
      Py_ssize_t first = 0, last = 0, stride = 0;
      if (PySlice_Unpack(item, &first, &last, &stride) < 0) {
        PyErr_Clear();
        c.unsupported("a slice whose bounds are not ints");
      }
      if (stride <= 0) c.unsupported("a slice step that is not positive");
      count[dim] = PySlice_AdjustIndices(static_cast<Py_ssize_t>(size), &first, &last, stride);
      start[dim] = first;
      stop[dim] = first + count[dim] * stride;
      step[dim] = stride;
    } else if (PyLong_Check(item) && !PyBool_Check(item)) {
      int64_t i = PyLong_AsLongLong(item);
      if (i < 0) i += size;
      if (i < 0 || i >= size) c.unsupported("index out of range");
      start[dim] = i;
      stop[dim] = i + 1;
      count[dim] = 1;
      dropped[dim] = true;
    } else {
      c.unsupported(std::string("an index of type ") + Py_TYPE(item)->tp_name);
    }
    ++dim;
  }
  std::vector<int64_t> view_sizes;
  for (int64_t d = 0; d < rank; ++d) {
    if (count[d] == 0) return {b.view(y, meta.sizes)};  // writes nothing
    if (!dropped[d]) view_sizes.push_back(count[d]);
  }
  // A stepped slice that runs to the dim's end, with a step dividing its
  // size, is an int index of the dim split in two: `out[..., 1::2] = v`
  // (Wan's and CogVideoX's interleaved rotary embeddings) writes
  // out.view(..., n // 2, 2)[..., :, 1]. The write happens in the split
  // shape, read back through a reshape.
  std::vector<int64_t> sizes, first, last;
  std::vector<bool> narrow_out;
  for (int64_t d = 0; d < rank; ++d) {
    if (step[d] == 1) {
      sizes.push_back(meta.sizes[d]);
      first.push_back(start[d]);
      last.push_back(stop[d]);
      narrow_out.push_back(dropped[d]);
      continue;
    }
    const int64_t n = meta.sizes[d], k = step[d];
    if (n % k != 0 || start[d] >= k || count[d] != n / k) {
      c.unsupported("a stepped slice other than every k-th element to the end of a dim k divides");
    }
    sizes.insert(sizes.end(), {n / k, k});
    first.insert(first.end(), {0, start[d]});
    last.insert(last.end(), {n / k, start[d] + 1});
    narrow_out.insert(narrow_out.end(), {false, true});
  }
  const int64_t split_rank = static_cast<int64_t>(sizes.size());
  const int split = split_rank == rank ? y : b.reshape(y, sizes);
  const graph::TensorMeta split_meta = b.meta(split);
  std::vector<int64_t> block_sizes(split_rank);
  for (int64_t d = 0; d < split_rank; ++d) block_sizes[d] = last[d] - first[d];
  int block;
  if (c.is_tensor("value")) {
    block = c.tensor("value");
    if (b.meta(block).dtype != meta.dtype) block = b.convert(block, meta.dtype);
    // torch drops leading size-1 dims of a value longer than the view.
    while (c.rank(block) > static_cast<int64_t>(view_sizes.size())) {
      if (b.meta(block).sizes[0] != 1) c.unsupported("a value that does not broadcast to the indexed view");
      block = b.squeeze(block, {0});
    }
    while (c.rank(block) < static_cast<int64_t>(view_sizes.size())) block = b.unsqueeze(block, 0);
    if (b.meta(block).sizes != view_sizes) block = b.expand(block, view_sizes);
    for (int64_t d = 0; d < split_rank; ++d) {
      if (narrow_out[d]) block = b.unsqueeze(block, d);
    }
  } else {
    const PrimArg value = c.operand("value");
    block = b.full(block_sizes, value.scalar, meta.dtype, Placement{meta.device_type, meta.device_index, false});
  }
  // Written in y's dim order, outermost first, so that the cats come out
  // in y's layout (a zeros_like of a transposed tensor keeps its strides).
  std::vector<int64_t> order(split_rank), inverse(split_rank);
  for (int64_t d = 0; d < split_rank; ++d) order[d] = d;
  if (!is_contiguous(split_meta.sizes, split_meta.strides) &&
      is_non_overlapping_and_dense(split_meta.sizes, split_meta.strides)) {
    order = dense_dim_order(split_meta.sizes, split_meta.strides);
  }
  std::vector<int64_t> ordered(split_rank), lo(split_rank), hi(split_rank);
  bool permuted = false;
  for (int64_t k = 0; k < split_rank; ++k) {
    inverse[order[k]] = k;
    ordered[k] = sizes[order[k]];
    lo[k] = first[order[k]];
    hi[k] = last[order[k]];
    permuted = permuted || order[k] != k;
  }
  if (permuted) block = b.permute(block, order);
  // `base` is y narrowed on the dims before `from`; the result is base with
  // the block written in.
  auto next_narrowed = [&](int64_t d) {
    while (d < split_rank && lo[d] == 0 && hi[d] == ordered[d]) ++d;
    return d;
  };
  std::function<int(int, int64_t)> write = [&](int base, int64_t from) -> int {
    const int64_t d = next_narrowed(from);
    if (d == split_rank) return block;
    std::vector<int> pieces;
    if (lo[d] > 0) pieces.push_back(b.slice(base, d, 0, lo[d]));
    // The block itself where no later dim is narrowed (no slice of base).
    pieces.push_back(next_narrowed(d + 1) == split_rank ? block : write(b.slice(base, d, lo[d], hi[d]), d + 1));
    if (hi[d] < ordered[d]) pieces.push_back(b.slice(base, d, hi[d], ordered[d]));
    return pieces.size() == 1 ? pieces[0] : b.cat(pieces, d);
  };
  int written = write(permuted ? b.permute(split, order) : split, 0);
  // A write of all of y is a copy of the value, not a view of it.
  if (written == block && c.is_tensor("value")) written = b.clone(block, MemoryFormat::Contiguous);
  if (permuted) written = b.permute(written, inverse);
  return {split_rank == rank ? written : b.reshape(written, meta.sizes)};
}

}  // namespace kiln::prims
