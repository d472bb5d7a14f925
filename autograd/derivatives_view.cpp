// Derivative rules of the views, clone and cat.
#include <algorithm>
#include <optional>

#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"
#include "prims/common_meta.h"

namespace kiln::autograd {

using prims::Prim;

namespace {

// g written into zeros at the positions the slice read (lo clamped as the
// slice clamped it), as zeros, g, zeros along the dim: a cat kernels
// compute where it is read (Note [Cat in kernels]; a roll's gradient is
// two, summed), not a zero fill and a scatter. A stepped slice's g is
// first interleaved with zeros, [c] -> [c, 1] beside zeros [c, step - 1]
// -> [c * step], trimmed to the input's end (no index_put, iota and full
// per slice: eva02's rotary halves).
int slice_grad(prims::PrimBuilder& b, int g, const graph::TensorMeta& xm,
               const prims::PrimAttrs& attrs) {
  const int64_t d = attrs.dim;
  const int64_t size = xm.sizes[d];
  const int64_t count = b.meta(g).sizes[d];
  if (count == 0) return zeros_like(b, xm);
  int64_t lo = attrs.start.value_or(0);
  if (lo < 0) lo += size;
  lo = std::clamp<int64_t>(lo, 0, size);
  if (lo == 0 && attrs.step == 1 && count == size) return g;
  // Zeros of the input's dtype with `length` along `dim` of `like`'s sizes.
  auto zeros = [&](std::vector<int64_t> sizes, int64_t dim, int64_t length) {
    graph::TensorMeta block = xm;
    sizes[dim] = length;
    block.sizes = std::move(sizes);
    block.strides = graph::contiguous_strides(block.sizes);
    return zeros_like(b, block);
  };
  int spread = cast_to(b, g, xm.dtype);
  int64_t span = count;
  if (attrs.step > 1) {
    const std::vector<int64_t> sizes = b.meta(g).sizes;
    std::vector<int64_t> pair = sizes;
    pair.insert(pair.begin() + d + 1, 1);
    const int lanes = b.cat({b.unsqueeze(spread, d + 1), zeros(pair, d + 1, attrs.step - 1)}, d + 1);
    std::vector<int64_t> flat = sizes;
    flat[d] = count * attrs.step;
    spread = b.reshape(lanes, flat);
    span = std::min(count * attrs.step, size - lo);
    if (span < count * attrs.step) spread = b.slice(spread, d, 0, span, 1);
  }
  std::vector<int> pieces;
  if (lo > 0) pieces.push_back(zeros(xm.sizes, d, lo));
  pieces.push_back(spread);
  if (lo + span < size) pieces.push_back(zeros(xm.sizes, d, size - lo - span));
  return pieces.size() == 1 ? spread : b.cat(pieces, d);
}

// as_strided addresses its input's storage. The gradient is exact when that
// storage is the input's own contiguous elements: a fresh, contiguous result
// of a prim that does not alias (not a view, extern or graph input, whose
// storage offset and extent kiln does not know). Then element k of the
// output read storage position offset + sum_i k_i stride_i; the gradient
// sums g into zeros at those positions (overlapping reads accumulate).
int as_strided_grad(prims::PrimBuilder& b, int g, int x, const prims::PrimAttrs& attrs) {
  const graph::TensorMeta xm = b.meta(x);  // a copy: appending nodes moves the values
  const int made_by = b.graph().value(x).node;
  const bool fresh = made_by >= 0 && !prims::has_flag(b.graph().node(made_by).prim, prims::kView) &&
                     b.graph().node(made_by).prim != Prim::Extern;
  if (!fresh || xm.strides != graph::contiguous_strides(xm.sizes)) {
    throw NoDerivative("as_strided: gradient only for an input with its own contiguous storage");
  }
  const int64_t n = prims::numel(xm.sizes);
  int64_t last = attrs.offset;
  for (size_t i = 0; i < attrs.sizes.size(); ++i) {
    if (attrs.sizes[i] == 0) return zeros_like(b, xm);
    last += (attrs.sizes[i] - 1) * attrs.strides[i];
  }
  if (last >= n) throw NoDerivative("as_strided: reads past its input's elements");
  const prims::Placement where{xm.device_type, xm.device_index, false};
  const int64_t rank = static_cast<int64_t>(attrs.sizes.size());
  int position = b.full({}, prims::Scalar::of_int(attrs.offset), graph::DType::Int64, where);
  for (int64_t i = 0; i < rank; ++i) {
    std::vector<int64_t> shape(rank, 1);
    shape[i] = attrs.sizes[i];
    const int step = b.reshape(b.iota(attrs.sizes[i], 0, attrs.strides[i], graph::DType::Int64, where), shape);
    position = b.binary(Prim::Add, v(position), v(step));
  }
  const int64_t count = prims::numel(attrs.sizes);
  const int flat = b.index_put(zeros_like(b, graph::TensorMeta{{n}, {1}, xm.dtype, xm.device_type, xm.device_index, false}),
                               {b.reshape(position, {count})}, b.reshape(g, {count}), true);
  return b.reshape(flat, xm.sizes);
}

}  // namespace

std::vector<int> vjp_view(prims::PrimBuilder& b, const NodeView& view,
                          const std::vector<int>& grads, const std::vector<bool>& needs) {
  const prims::PrimNode& node = view.node;
  const prims::PrimAttrs& attrs = node.attrs;
  const int g = grads[0];
  std::vector<int> out(view.inputs.size(), -1);
  if (node.prim == Prim::Cat) {
    // Each input's gradient is its slice of g, in its own dtype (cat
    // promotes). A 1-dim empty input, which cat skips whatever the rank of
    // the others, gets an empty gradient.
    const int64_t rank = static_cast<int64_t>(b.meta(g).sizes.size());
    int64_t offset = 0;
    for (size_t i = 0; i < view.inputs.size(); ++i) {
      const graph::TensorMeta m = b.meta(view.inputs[i]);
      if (static_cast<int64_t>(m.sizes.size()) != rank) {
        if (needs[i]) out[i] = zeros_like(b, m);
        continue;
      }
      const int64_t size = m.sizes[attrs.dim];
      if (needs[i]) out[i] = cast_to(b, b.slice(g, attrs.dim, offset, offset + size), m.dtype);
      offset += size;
    }
    return out;
  }
  if (!needs[0]) return out;
  const graph::TensorMeta xm = b.meta(view.inputs[0]);  // a copy: appending nodes moves the values
  switch (node.prim) {
    case Prim::Clone:
      out[0] = g;
      return out;
    case Prim::View:
    case Prim::Reshape:
    case Prim::Squeeze:
    case Prim::Unsqueeze:
      out[0] = b.reshape(g, xm.sizes);
      return out;
    case Prim::Expand:
      out[0] = sum_to(b, g, xm);
      return out;
    case Prim::Permute: {
      std::vector<int64_t> inverse(attrs.dims.size());
      for (size_t i = 0; i < attrs.dims.size(); ++i) inverse[attrs.dims[i]] = static_cast<int64_t>(i);
      out[0] = b.permute(g, inverse);
      return out;
    }
    case Prim::Slice:
      out[0] = slice_grad(b, g, xm, attrs);
      return out;
    case Prim::AsStrided:
      out[0] = as_strided_grad(b, g, view.inputs[0], attrs);
      return out;
    default:
      throw NoDerivative(std::string(prims::prim_name(node.prim)) + " has no derivative rule");
  }
}

}  // namespace kiln::autograd
