// Decompositions of shape ops: views and reshapes, transposes, basic
// indexing (ints, slices, None, Ellipsis), cat/stack, split/chunk/unbind,
// dtype conversions.
#include <algorithm>
#include <cmath>

#include "prims/common_meta.h"
#include "prims/decompositions.h"
#include "prims/layout.h"

namespace kiln::prims {
namespace {

// A fresh alias of `x` with the same shape, where torch returns a new view
// object rather than the tensor itself.
int alias(PrimBuilder& b, int x) { return b.view(x, b.meta(x).sizes); }

int swap_dims(PrimBuilder& b, int x, int64_t d0, int64_t d1) {
  const int64_t rank = static_cast<int64_t>(b.meta(x).sizes.size());
  d0 = wrap_dim("transpose", d0, rank);
  d1 = wrap_dim("transpose", d1, rank);
  if (rank == 0 || d0 == d1) return alias(b, x);
  std::vector<int64_t> perm = all_dims(rank);
  std::swap(perm[d0], perm[d1]);
  return b.permute(x, perm);
}

std::optional<int64_t> optional_index(PyObject* obj, DecomposeCall& c) {
  if (obj == Py_None) return std::nullopt;
  if (!PyLong_Check(obj) || PyBool_Check(obj)) c.unsupported("a slice bound is not an int");
  return PyLong_AsLongLong(obj);
}

// The sizes a view or reshape asks for. An entry the graph computes (a
// 0-dim tensor of a size: Longformer's torch.div(seq_len, window,
// rounding_mode="trunc")) is read off the traced result, whose sizes are
// the ones asked for (static here: symbolic graphs are not decomposed).
std::vector<int64_t> asked_sizes(DecomposeCall& c, const char* name) {
  try {
    return c.ints(name);
  } catch (const NotDecomposed&) {
    return c.traced().sizes;
  }
}

}  // namespace

std::vector<int> decompose_View(DecomposeCall& c) { return {c.b.view(c.tensor("input"), asked_sizes(c, "size"))}; }

std::vector<int> decompose_Reshape(DecomposeCall& c) {
  return {c.b.reshape(c.tensor("input"), asked_sizes(c, "shape"))};
}

std::vector<int> decompose_Permute(DecomposeCall& c) {
  return {c.b.permute(c.tensor("input"), c.ints("dims"))};
}

std::vector<int> decompose_Transpose(DecomposeCall& c) {
  return {swap_dims(c.b, c.tensor("input"), c.integer("dim0"), c.integer("dim1"))};
}

std::vector<int> decompose_SwapAxes(DecomposeCall& c) {
  const bool numpy_names = c.has_param("axis0");
  return {swap_dims(c.b, c.tensor("input"), c.integer(numpy_names ? "axis0" : "dim0"),
                    c.integer(numpy_names ? "axis1" : "dim1"))};
}

// Tensor.repeat: each dim tiled r times (output index j * size + i reads
// i), as the input viewed with a unit dim before each dim, expanded to r
// there and merged; repeats beyond the rank add leading dims.
std::vector<int> decompose_Repeat(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  const std::vector<int64_t> repeats = c.ints("repeats");
  const std::vector<int64_t> sizes = b.meta(x).sizes;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t dims = static_cast<int64_t>(repeats.size());
  if (dims < rank) c.unsupported("fewer repeats than dims");
  std::vector<int64_t> spread, expanded, merged;
  for (int64_t d = 0; d < dims; ++d) {
    if (repeats[d] < 0) c.unsupported("a negative repeat");
    const int64_t size = d < dims - rank ? 1 : sizes[d - (dims - rank)];
    spread.insert(spread.end(), {1, size});
    expanded.insert(expanded.end(), {repeats[d], size});
    merged.push_back(repeats[d] * size);
  }
  const int tiled = b.expand(b.reshape(x, spread), expanded);
  return {b.reshape(b.clone(tiled, MemoryFormat::Contiguous), merged)};
}

// repeat_interleave by an int: each element repeated r times in place
// along dim (the flattened input without one), as a unit dim after it
// expanded to r and merged. Repeats given as a tensor stay torch's call.
std::vector<int> decompose_RepeatInterleave(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  if (c.is_tensor("repeats")) c.unsupported("repeats given as a tensor");
  const int64_t repeats = c.integer("repeats");
  if (repeats < 0) c.unsupported("a negative repeat");
  int x = c.tensor("input");
  int64_t dim = 0;
  if (c.given("dim")) {
    dim = wrap_dim("repeat_interleave", c.integer("dim"), c.rank(x));
  } else {
    x = b.reshape(x, {numel(b.meta(x).sizes)});
  }
  std::vector<int64_t> sizes = b.meta(x).sizes;
  if (sizes.empty()) {
    x = b.reshape(x, {1});
    sizes = {1};
  }
  std::vector<int64_t> expanded = sizes;
  expanded.insert(expanded.begin() + dim + 1, repeats);
  std::vector<int64_t> merged = sizes;
  merged[dim] *= repeats;
  const int spread = b.expand(b.unsqueeze(x, dim + 1), expanded);
  return {b.reshape(b.clone(spread, MemoryFormat::Contiguous), merged)};
}

std::vector<int> decompose_T(DecomposeCall& c) {
  const int x = c.tensor("input");
  return {c.rank(x) < 2 ? alias(c.b, x) : c.b.permute(x, {1, 0})};
}

// x.T reverses every dim; x.mT swaps the last two.
std::vector<int> decompose_GetAttr(DecomposeCall& c) {
  const int x = c.tensor("input");
  const std::string name = c.text("name");
  if (name == "T") {
    std::vector<int64_t> perm = all_dims(c.rank(x));
    std::reverse(perm.begin(), perm.end());
    return {c.b.permute(x, perm)};
  }
  if (name == "mT" && c.rank(x) >= 2) return {swap_dims(c.b, x, -2, -1)};
  c.unsupported("attribute " + name);
}

std::vector<int> decompose_Flatten(DecomposeCall& c) {
  const int x = c.tensor("input");
  const auto& sizes = c.b.meta(x).sizes;
  const int64_t rank = c.rank(x);
  if (rank == 0) return {c.b.reshape(x, {1})};
  const int64_t start = wrap_dim("flatten", c.integer("start_dim"), rank);
  const int64_t end = wrap_dim("flatten", c.integer("end_dim"), rank);
  if (start > end) c.unsupported("start_dim after end_dim");
  std::vector<int64_t> out(sizes.begin(), sizes.begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= sizes[d];
  out.push_back(merged);
  out.insert(out.end(), sizes.begin() + end + 1, sizes.end());
  if (start == end) return {x};  // torch returns the tensor itself
  return {c.b.reshape(x, out)};
}

// unflatten(x, dim, sizes): a view splitting dim into sizes (one may be -1).
std::vector<int> decompose_Unflatten(DecomposeCall& c) {
  const int x = c.tensor("input");
  const std::vector<int64_t>& sizes = c.b.meta(x).sizes;
  const int64_t dim = wrap_dim("unflatten", c.integer("dim"), c.rank(x));
  std::vector<int64_t> out(sizes.begin(), sizes.begin() + dim);
  for (int64_t size : c.ints("sizes")) out.push_back(size);
  out.insert(out.end(), sizes.begin() + dim + 1, sizes.end());
  return {c.b.view(x, out)};
}

std::vector<int> decompose_Unsqueeze(DecomposeCall& c) {
  return {c.b.unsqueeze(c.tensor("input"), c.integer("dim"))};
}

std::vector<int> decompose_Squeeze(DecomposeCall& c) {
  const int x = c.tensor("input");
  std::vector<int64_t> dims = c.given("dim") ? c.ints("dim") : std::vector<int64_t>{};
  if (c.given("dim") && dims.empty()) return {alias(c.b, x)};
  if (c.rank(x) == 0) return {alias(c.b, x)};
  return {c.b.squeeze(x, dims)};
}

std::vector<int> decompose_Expand(DecomposeCall& c) { return {c.b.expand(c.tensor("input"), c.ints("size"))}; }

std::vector<int> decompose_ExpandAs(DecomposeCall& c) {
  return {c.b.expand(c.tensor("input"), c.b.meta(c.tensor("other")).sizes)};
}

// `other` gives only its sizes: no gradient reaches it (fuzz seed 11936).
std::vector<int> decompose_ReshapeAs(DecomposeCall& c) {
  return {c.b.reshape(c.tensor("input"), c.b.meta(c.tensor("other")).sizes)};
}

std::vector<int> decompose_ViewAs(DecomposeCall& c) {
  return {c.b.view(c.tensor("input"), c.b.meta(c.tensor("other")).sizes)};
}

// contiguous() returns the tensor itself when it already is contiguous.
std::vector<int> decompose_Contiguous(DecomposeCall& c) {
  const int x = c.tensor("input");
  const graph::TensorMeta& m = c.b.meta(x);
  if (is_contiguous(m.sizes, m.strides)) return {x};
  return {c.b.clone(x, MemoryFormat::Contiguous)};
}

std::vector<int> decompose_Clone(DecomposeCall& c) { return {c.b.clone(c.tensor("input"))}; }

namespace {

// x[..., index, ...] for one integer tensor index at `dim`: index_select
// along it (negative indices count from the end, as torch's indexing reads
// them), the index's shape in place of the dim. Relative position biases
// take this form (Swin's table[index], LeViT's biases[:, idxs]); as an
// extern its gradient reran the indexing in Python.
int index_dim(DecomposeCall& c, int x, int64_t dim, int index) {
  PrimBuilder& b = c.b;
  const graph::TensorMeta im = b.meta(index);  // copies: new nodes move the metas
  const graph::TensorMeta xm = b.meta(x);
  if (im.dtype != DType::Int64 && im.dtype != DType::Int32) c.unsupported("a tensor index that is not integer");
  if (dim >= static_cast<int64_t>(xm.sizes.size())) c.unsupported("a tensor index past the last dim");
  const int negative = b.binary(Prim::Lt, PrimArg::of_value(index), PrimArg::of_scalar(Scalar::of_int(0)));
  const int wrapped = b.where(negative,
                              PrimArg::of_value(b.binary(Prim::Add, PrimArg::of_value(index),
                                                         PrimArg::of_scalar(Scalar::of_int(xm.sizes[dim])))),
                              PrimArg::of_value(index));
  std::vector<int64_t> sizes(xm.sizes.begin(), xm.sizes.begin() + dim);
  sizes.insert(sizes.end(), im.sizes.begin(), im.sizes.end());
  sizes.insert(sizes.end(), xm.sizes.begin() + dim + 1, xm.sizes.end());
  return b.reshape(b.index_select(x, dim, b.reshape(wrapped, {numel(im.sizes)})), sizes);
}

}  // namespace

// A list of ints indexing one dim (advanced indexing, alone in the index):
// the run of consecutive positions it names, as a copy (advanced indexing
// never returns a view). Falcon splits its fused qkv with
// fused_qkv[..., [-2], :]; as an extern its gradient reran the indexing in
// Python. Other lists stay externs.
namespace {

std::optional<std::pair<int64_t, int64_t>> consecutive_positions(PyObject* list, int64_t size) {
  const Py_ssize_t n = PyList_GET_SIZE(list);
  if (n == 0) return std::nullopt;
  int64_t first = 0;
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* item = PyList_GET_ITEM(list, k);
    if (!PyLong_CheckExact(item)) return std::nullopt;
    int64_t i = PyLong_AsLongLong(item);
    if (i < 0) i += size;
    if (i < 0 || i >= size) return std::nullopt;
    if (k == 0) first = i;
    if (i != first + k) return std::nullopt;
  }
  return std::make_pair(first, first + n);
}

}  // namespace

// Basic indexing: ints select, slices slice, None adds a dim, Ellipsis
// skips dims; one integer tensor or one list of consecutive ints indexes
// one dim (the only advanced index, so its dims stay in place). Other
// tensor, bool and list indices (several advanced indices, ints beside
// one) stay externs.
std::vector<int> decompose_GetItem(DecomposeCall& c) {
  const int x = c.tensor("input");
  if (c.is_tensor("index")) return {index_dim(c, x, 0, c.tensor("index"))};
  std::vector<base::PyRef> held;
  std::vector<int> tensor_values;
  c.index_or_item("index", &held, &tensor_values);
  std::vector<PyObject*> items;
  for (const base::PyRef& item : held) items.push_back(item.get());
  int64_t consumed = 0;
  bool ellipsis = false;
  int advanced = 0;
  for (size_t k = 0; k < items.size(); ++k) advanced += tensor_values[k] >= 0 || PyList_CheckExact(items[k]) ? 1 : 0;
  if (advanced > 1) c.unsupported("two list or tensor indices");
  if (advanced == 1) {
    // An int beside a list or tensor is an advanced index too: separated
    // from it by a slice, their dims move to the front (x[0, :, [1, 2]]).
    for (PyObject* item : items) {
      if (item && PyLong_Check(item)) c.unsupported("an int index beside a list or tensor index");
    }
  }
  for (PyObject* item : items) {
    if (item == Py_Ellipsis) {
      if (ellipsis) c.unsupported("two Ellipses");
      ellipsis = true;
    } else if (item != Py_None) {
      ++consumed;
    }
  }
  int value = x;
  int64_t dim = 0;
  const int64_t rank = c.rank(x);
  if (consumed > rank) c.unsupported("too many indices");
  for (size_t k = 0; k < items.size(); ++k) {
    PyObject* item = items[k];
    if (tensor_values[k] >= 0) {
      const int64_t index_rank = c.rank(tensor_values[k]);
      value = index_dim(c, value, dim, tensor_values[k]);
      dim += index_rank;
    } else if (item == Py_None) {
      value = c.b.unsqueeze(value, dim++);
    } else if (item == Py_Ellipsis) {
      dim += rank - consumed;
    } else if (PySlice_Check(item)) {
      auto* slice = reinterpret_cast<PySliceObject*>(item);
      const std::optional<int64_t> step = optional_index(slice->step, c);
      if (step && *step <= 0) c.unsupported("a slice step that is not positive");
      value = c.b.slice(value, dim++, optional_index(slice->start, c), optional_index(slice->stop, c),
                        step.value_or(1));
    } else if (PyLong_Check(item) && !PyBool_Check(item)) {
      int64_t i = PyLong_AsLongLong(item);
      const int64_t size = c.b.meta(value).sizes.at(dim);
      if (i < 0) i += size;
      if (i < 0 || i >= size) c.unsupported("index out of range");
      value = c.b.squeeze(c.b.slice(value, dim, i, i + 1), {dim});
    } else if (PyList_CheckExact(item)) {
      const auto run = consecutive_positions(item, c.b.meta(value).sizes.at(dim));
      if (!run) c.unsupported("a list index that is not a run of consecutive ints in range");
      value = c.b.clone(c.b.slice(value, dim++, run->first, run->second, 1));
    } else {
      c.unsupported(std::string("an index of type ") + Py_TYPE(item)->tp_name);
    }
  }
  return {value == x ? alias(c.b, x) : value};
}

std::vector<int> decompose_Cat(DecomposeCall& c) { return {c.b.cat(c.tensors("tensors"), c.integer("dim"))}; }

// F.pad in constant mode: each dim's negative amounts slice, positive ones
// concatenate blocks of the fill value; no padding at all is a copy, as
// torch's constant_pad_nd returns.
std::vector<int> decompose_Pad(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  if (c.text("mode") != "constant") c.unsupported("mode " + c.text("mode"));
  const int x = c.tensor("input");
  const std::vector<int64_t> pad = c.ints("pad");
  const int64_t rank = c.rank(x);
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size()) > 2 * rank) c.unsupported("pad of odd length or too long");
  Scalar fill = Scalar::of_int(0);
  if (c.given("value")) {
    const PrimArg value = c.operand("value");
    if (value.is_value()) c.unsupported("a tensor fill value");
    fill = value.scalar;
  }
  const graph::TensorMeta xm = b.meta(x);  // a copy: new nodes move the metas
  const Placement where{xm.device_type, xm.device_index, false};
  int value = x;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t dim = rank - 1 - static_cast<int64_t>(i);
    int64_t before = pad[2 * i], after = pad[2 * i + 1];
    const int64_t size = b.meta(value).sizes[dim];
    if (before < 0 || after < 0) {
      const int64_t start = before < 0 ? -before : 0, end = after < 0 ? size + after : size;
      if (end < start) c.unsupported("pads that remove more than the dim holds");
      value = b.slice(value, dim, start, end);
      before = std::max<int64_t>(before, 0);
      after = std::max<int64_t>(after, 0);
    }
    if (before == 0 && after == 0) continue;
    std::vector<int> parts;
    auto block = [&](int64_t length) {
      std::vector<int64_t> sizes = b.meta(value).sizes;
      sizes[dim] = length;
      return b.full(sizes, fill, xm.dtype, where);
    };
    if (before > 0) parts.push_back(block(before));
    parts.push_back(value);
    if (after > 0) parts.push_back(block(after));
    value = b.cat(parts, dim);
  }
  return {value == x ? b.clone(x) : value};
}

// Note [Nearest upsampling as a broadcast]
// F.interpolate in mode "nearest" or "nearest-exact" whose every spatial
// output size is an integer multiple k of the input's reads input element
// dst / k for output element dst, if torch's own index arithmetic gives
// that: it computes floor(dst * s) (nearest) or floor((dst + 0.5) * s)
// (nearest-exact) with s the float 1 / scale_factor or in / out, which
// for some k (41 over 64 inputs) lands one below at a multiple of k.
// So every output index of every dim is checked against that arithmetic
// as the CPU and CUDA kernels do it; where all agree, the call is each
// spatial dim unsqueezed, expanded k times and merged: a copy that fuses
// into its reader's kernel, whose gradient is a sum over the k copies (a
// reduction kernel), where the extern ran the upsampling again under
// autograd in the backward (UNet decoders, FPNs). The result takes the
// memory format torch's kernel gives (channels-last for an NHWC input).
namespace {

// Whether torch's nearest index for every output position of a dim of
// `in` -> `in * k` elements is dst / k. `scale`: the scale_factor given
// for the dim (used by torch unless recompute_scale_factor), or 0.
bool nearest_is_broadcast(int64_t in, int64_t k, double scale, bool exact) {
  const int64_t out = in * k;
  const float s = scale > 0 ? static_cast<float>(1.0 / scale) : static_cast<float>(in) / static_cast<float>(out);
  for (int64_t dst = 0; dst < out; ++dst) {
    // The CUDA kernels and the CPU's nearest compute in float; the CPU's
    // nearest-exact computes (dst + 0.5) * s in double, rounded to float.
    const float at = exact ? (static_cast<float>(dst) + 0.5f) * s : static_cast<float>(dst) * s;
    const float at_cpu = exact ? static_cast<float>((static_cast<double>(dst) + 0.5) * s) : at;
    const int64_t want = dst / k;
    if (std::min(static_cast<int64_t>(std::floor(at)), in - 1) != want) return false;
    if (std::min(static_cast<int64_t>(std::floor(at_cpu)), in - 1) != want) return false;
  }
  return true;
}

}  // namespace

std::vector<int> decompose_Interpolate(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const std::string mode = c.text("mode");
  if (mode != "nearest" && mode != "nearest-exact") c.unsupported("mode " + mode);
  if (c.given("antialias") && c.flag("antialias")) c.unsupported("antialias");
  const int x = c.tensor("input");
  const graph::TensorMeta xm = b.meta(x);  // a copy: new nodes move the metas
  const graph::TensorMeta& traced = c.traced(0);
  const int64_t rank = static_cast<int64_t>(xm.sizes.size());
  if (rank < 3 || traced.sizes.size() != xm.sizes.size()) c.unsupported("an input of rank below 3");
  // The scale factors torch uses: given ones, unless recomputed from sizes.
  std::vector<double> scales(static_cast<size_t>(rank - 2), 0.0);
  const bool recompute = c.given("recompute_scale_factor") && c.flag("recompute_scale_factor");
  if (c.given("scale_factor") && !recompute) {
    PyObject* given = c.constant("scale_factor");
    std::vector<base::PyRef> items;
    if (given && (PyFloat_Check(given) || PyLong_Check(given))) {
      items.assign(scales.size(), base::PyRef::borrow(given));
    } else if (!c.constant_items("scale_factor", &items) || items.size() != scales.size()) {
      c.unsupported("scale_factor is neither a number nor one per spatial dim");
    }
    for (size_t i = 0; i < scales.size(); ++i) {
      scales[i] = PyFloat_AsDouble(items[i].get());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        c.unsupported("a scale factor that is not a number");
      }
    }
  }
  std::vector<int64_t> expanded = {xm.sizes[0], xm.sizes[1]};
  bool any = false;
  for (int64_t d = 2; d < rank; ++d) {
    const int64_t in = xm.sizes[d], out = traced.sizes[d];
    if (in == 0 || out % in != 0) c.unsupported("an output size that is no multiple of the input's");
    const int64_t k = out / in;
    if (!nearest_is_broadcast(in, k, scales[d - 2], mode == "nearest-exact")) {
      c.unsupported("torch's index arithmetic does not repeat each element k times");
    }
    expanded.insert(expanded.end(), {in, k});
    any = any || k != 1;
  }
  if (!any) return {in_traced_layout(b, b.clone(x), traced)};
  int spread = x;
  for (int64_t d = rank - 1; d >= 2; --d) spread = b.unsqueeze(spread, d + 1);
  spread = b.expand(spread, expanded);
  return {in_traced_layout(b, b.reshape(b.clone(spread, MemoryFormat::Contiguous), traced.sizes), traced)};
}

// torch.flip: per dim, an index_select at the reversed positions (an iota
// counting down), which kernels read at the computed index; its gradient
// is the same reversal of the gradient (Longformer flips its attention
// mask's corners, eight a layer).
std::vector<int> decompose_Flip(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  const graph::TensorMeta xm = b.meta(x);  // a copy: new nodes move the metas
  if (!is_contiguous(xm.sizes, xm.strides)) c.unsupported("flip of a non-contiguous tensor");
  const Placement where{xm.device_type, xm.device_index, false};
  std::vector<int64_t> dims = c.ints("dims");
  for (int64_t& d : dims) d = wrap_dim("flip", d, c.rank(x));
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end()) c.unsupported("a dim flipped twice");
  int value = x;
  for (int64_t d : dims) {
    const int64_t n = xm.sizes[d];
    if (n <= 1) continue;
    value = b.index_select(value, d, b.iota(n, n - 1, -1, DType::Int64, where));
  }
  return {value == x ? b.clone(x) : value};
}

// torch.roll: per dim, the last `shift` entries moved to the front (a cat
// of two slices); without dims, over the flattened tensor.
std::vector<int> decompose_Roll(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  const std::vector<int64_t> shifts = c.ints("shifts");
  const bool flat = !c.given("dims");
  const std::vector<int64_t> sizes = b.meta(x).sizes;
  const std::vector<int64_t> dims = flat ? std::vector<int64_t>{0} : c.ints("dims");
  if (shifts.size() != dims.size()) c.unsupported("shifts and dims of different lengths");
  int value = flat ? b.reshape(x, {numel(sizes)}) : x;
  bool moved = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t dim = wrap_dim("roll", dims[i], c.rank(value));
    const int64_t n = b.meta(value).sizes[dim];
    if (n == 0) continue;
    const int64_t shift = ((shifts[i] % n) + n) % n;
    if (shift == 0) continue;
    value = b.cat({b.slice(value, dim, n - shift, n), b.slice(value, dim, 0, n - shift)}, dim);
    moved = true;
  }
  if (!moved) return {b.clone(x)};  // torch.roll returns a new tensor
  return {flat ? b.reshape(value, sizes) : value};
}

std::vector<int> decompose_Stack(DecomposeCall& c) {
  std::vector<int> tensors = c.tensors("tensors");
  if (tensors.empty()) c.unsupported("no tensors");
  const int64_t dim = wrap_dim("stack", c.integer("dim"), c.rank(tensors[0]) + 1);
  for (int& t : tensors) t = c.b.unsqueeze(t, dim);
  return {c.b.cat(tensors, dim)};
}

// split, chunk and unbind: consecutive slices along dim, sized as torch's
// results were when traced (unbind also drops the dim).
std::vector<int> decompose_Split(DecomposeCall& c) {
  const int x = c.tensor("input");
  const int64_t rank = c.rank(x);
  const int64_t dim = wrap_dim("split", c.integer("dim"), rank);
  std::vector<int> out;
  int64_t start = 0;
  for (const graph::TensorMeta& piece : c.node.metas) {
    if (static_cast<int64_t>(piece.sizes.size()) == rank) {
      const int64_t length = piece.sizes[dim];
      out.push_back(c.b.slice(x, dim, start, start + length));
      start += length;
    } else {
      out.push_back(c.b.squeeze(c.b.slice(x, dim, start, start + 1), {dim}));
      start += 1;
    }
  }
  return out;
}

// Tensor.to(dtype), to(device), to(device, dtype) and their keywords: a
// conversion to the traced result's dtype, the tensor itself when it
// already has it. Only where the traced result stays on the input's device
// (transformers' masks call `.to(x.device)` on tensors already there); a
// move to another device, copy=True, memory_format= or a tensor argument
// stay torch's call.
std::vector<int> decompose_To(DecomposeCall& c) {
  const int x = c.tensor("input");
  for (const graph::Arg* arg : c.rest()) {
    if (arg->kind != graph::Arg::Kind::Constant || !arg->constant) {
      c.unsupported("to() with a tensor or computed argument");
    }
    const std::string type = Py_TYPE(arg->constant)->tp_name;
    if (type != "torch.dtype" && type != "torch.device" && !PyUnicode_Check(arg->constant)) {
      c.unsupported("to() with an argument of type " + type);
    }
  }
  if (c.given("copy") && c.flag("copy")) c.unsupported("to(copy=True)");
  const graph::TensorMeta traced = c.traced(0);
  const graph::TensorMeta& in = c.b.meta(x);
  if (traced.device_type != in.device_type || traced.device_index != in.device_index) {
    c.unsupported("to() another device");
  }
  if (traced.dtype == DType::Other) c.unsupported("to() without a dtype kiln models");
  return {to_dtype(c.b, x, traced.dtype)};
}

std::vector<int> decompose_Float(DecomposeCall& c) { return {to_dtype(c.b, c.tensor("input"), DType::Float32)}; }
std::vector<int> decompose_Double(DecomposeCall& c) { return {to_dtype(c.b, c.tensor("input"), DType::Float64)}; }
std::vector<int> decompose_Half(DecomposeCall& c) { return {to_dtype(c.b, c.tensor("input"), DType::Float16)}; }
std::vector<int> decompose_Long(DecomposeCall& c) { return {to_dtype(c.b, c.tensor("input"), DType::Int64)}; }
std::vector<int> decompose_Int(DecomposeCall& c) { return {to_dtype(c.b, c.tensor("input"), DType::Int32)}; }
std::vector<int> decompose_Bool(DecomposeCall& c) { return {to_dtype(c.b, c.tensor("input"), DType::Bool)}; }

std::vector<int> decompose_TypeAs(DecomposeCall& c) {
  return {to_dtype(c.b, c.tensor("input"), c.b.meta(c.tensor("other")).dtype)};
}

}  // namespace kiln::prims
