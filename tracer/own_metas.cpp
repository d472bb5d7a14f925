#include "tracer/own_metas.h"

#include <set>

namespace kiln::tracer {
namespace {

using graph::DType;
using graph::TensorMeta;

bool floating(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

bool tensor(const ValuePtr& value) { return value->is(ValueKind::Tensor) && value->fake; }

bool constant(const ValuePtr& value, PyObject* expected) {
  return value->is(ValueKind::Constant) && value->obj.get() == expected;
}

bool same_device(const TensorMeta& a, const TensorMeta& b) {
  return a.device_type == b.device_type && a.device_index == b.device_index;
}

// F.linear(input, weight, bias=None): [..., in] x [out, in] -> [..., out].
std::optional<OwnMeta> linear(const std::vector<ValuePtr>& args, const KwArgs& kwargs, bool grad_mode) {
  if (!kwargs.empty() || args.size() < 2 || args.size() > 3) return std::nullopt;
  const bool has_bias = args.size() == 3 && !constant(args[2], Py_None);
  if (!tensor(args[0]) || !tensor(args[1]) || (has_bias && !tensor(args[2]))) return std::nullopt;
  const TensorMeta& input = args[0]->meta;
  const TensorMeta& weight = args[1]->meta;
  if (!floating(input.dtype) || weight.dtype != input.dtype || weight.sizes.size() != 2 || input.sizes.empty() ||
      input.sizes.back() != weight.sizes[1] || input.strides != graph::contiguous_strides(input.sizes) ||
      !same_device(input, weight)) {
    return std::nullopt;
  }
  bool grad = input.requires_grad || weight.requires_grad;
  if (has_bias) {
    const TensorMeta& bias = args[2]->meta;
    if (bias.dtype != input.dtype || bias.sizes != std::vector<int64_t>{weight.sizes[0]} ||
        !same_device(input, bias)) {
      return std::nullopt;
    }
    grad = grad || bias.requires_grad;
  }
  OwnMeta out;
  out.sizes.assign(input.sizes.begin(), input.sizes.end() - 1);
  out.sizes.push_back(weight.sizes[0]);
  out.strides = graph::contiguous_strides(out.sizes);
  out.dtype = input.dtype;
  out.requires_grad = grad_mode && grad;
  out.like = args[0].get();
  return out;
}

}  // namespace

// Their only accepted keyword arguments for own_meta are the ones
// harmless_kwarg lists, at the values that leave the result's metadata alone.
const std::set<std::string>& unary_float_ops() {
  static const std::set<std::string> names = {
      "F.relu", "torch.relu", "Tensor.relu", "torch.sigmoid", "Tensor.sigmoid", "F.sigmoid",
      "torch.tanh", "Tensor.tanh", "F.tanh", "F.gelu", "F.silu", "F.mish", "F.elu", "F.leaky_relu",
      "torch.exp", "Tensor.exp", "torch.neg", "Tensor.neg", "torch.abs", "Tensor.abs", "torch.sqrt",
      "Tensor.sqrt", "torch.rsqrt", "Tensor.rsqrt", "torch.log", "Tensor.log", "torch.sin", "Tensor.sin",
      "torch.cos", "Tensor.cos", "torch.erf", "Tensor.erf"};
  return names;
}

namespace {

// A keyword argument that does not change a unary op's result metadata.
bool harmless_kwarg(const std::string& key, const ValuePtr& value) {
  if (key == "inplace") return constant(value, Py_False);
  if (key == "approximate") {
    if (!value->is(ValueKind::Constant) || !PyUnicode_Check(value->obj.get())) return false;
    const std::string mode = PyUnicode_AsUTF8(value->obj.get());
    return mode == "none" || mode == "tanh";
  }
  return false;
}

// One contiguous float tensor in, the same metadata out.
std::optional<OwnMeta> unary(const std::vector<ValuePtr>& args, const KwArgs& kwargs, bool grad_mode) {
  if (args.size() != 1 || !tensor(args[0])) return std::nullopt;
  for (const auto& [key, value] : kwargs) {
    if (!harmless_kwarg(key, value)) return std::nullopt;
  }
  const TensorMeta& input = args[0]->meta;
  if (!floating(input.dtype) || input.strides != graph::contiguous_strides(input.sizes)) return std::nullopt;
  OwnMeta out;
  out.sizes = input.sizes;
  out.strides = input.strides;
  out.dtype = input.dtype;
  out.requires_grad = grad_mode && input.requires_grad;
  out.like = args[0].get();
  return out;
}

// x.norm(p, dim, keepdim) of a float tensor over given dims. Also a
// correction, not only a shortcut: torch 2.11's meta kernel keeps a reduced
// dim of size 1 ([6, 1].norm(dim=-1) is [6, 1] on meta, [6] eagerly).
std::optional<OwnMeta> norm(const std::vector<ValuePtr>& args, const KwArgs& kwargs, bool grad_mode) {
  if (args.empty() || args.size() > 4 || !tensor(args[0])) return std::nullopt;
  static const char* const kNames[] = {"input", "p", "dim", "keepdim"};
  ValuePtr bound[4] = {args[0], nullptr, nullptr, nullptr};
  for (size_t i = 1; i < args.size(); ++i) bound[i] = args[i];
  for (const auto& [key, value] : kwargs) {
    int slot = -1;
    for (int i = 1; i < 4; ++i) {
      if (key == kNames[i]) slot = i;
    }
    if (slot < 0 || bound[slot]) return std::nullopt;
    bound[slot] = value;
  }
  const TensorMeta& input = args[0]->meta;
  if (!floating(input.dtype)) return std::nullopt;
  auto is_constant = [](const ValuePtr& v) { return v && v->is(ValueKind::Constant); };
  if (bound[1] && !(is_constant(bound[1]) && (bound[1]->obj.get() == Py_None || PyFloat_Check(bound[1]->obj.get()) ||
                                              PyLong_Check(bound[1]->obj.get())))) {
    return std::nullopt;
  }
  if (!is_constant(bound[2])) return std::nullopt;  // dim=None: torch's path
  bool keepdim = false;
  if (bound[3]) {
    if (!is_constant(bound[3]) || !PyBool_Check(bound[3]->obj.get())) return std::nullopt;
    keepdim = bound[3]->obj.get() == Py_True;
  }
  const int64_t rank = static_cast<int64_t>(input.sizes.size());
  std::vector<bool> reduced(rank, false);
  auto take = [&](PyObject* item) {
    if (!PyLong_Check(item)) return false;
    int64_t d = PyLong_AsLongLong(item);
    if (d < 0) d += rank;
    if (d < 0 || d >= rank || reduced[d]) return false;
    reduced[d] = true;
    return true;
  };
  PyObject* dim = bound[2]->obj.get();
  if (PyLong_Check(dim)) {
    if (!take(dim)) return std::nullopt;
  } else if (PyTuple_Check(dim) || PyList_Check(dim)) {
    if (PySequence_Fast_GET_SIZE(dim) == 0) return std::nullopt;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(dim); ++i) {
      if (!take(PySequence_Fast_GET_ITEM(dim, i))) return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  OwnMeta out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      out.sizes.push_back(input.sizes[d]);
    } else if (keepdim) {
      out.sizes.push_back(1);
    }
  }
  out.strides = graph::contiguous_strides(out.sizes);
  out.dtype = input.dtype;
  out.requires_grad = grad_mode && input.requires_grad;
  out.like = args[0].get();
  return out;
}

}  // namespace

std::optional<OwnMeta> own_meta(const std::string& name, const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                                bool grad_mode) {
  if (name == "F.linear") return linear(args, kwargs, grad_mode);
  if (unary_float_ops().contains(name)) return unary(args, kwargs, grad_mode);
  if (name == "Tensor.norm" || name == "torch.norm") return norm(args, kwargs, grad_mode);
  return std::nullopt;
}

}  // namespace kiln::tracer
