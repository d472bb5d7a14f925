#include "prims/decompose_call.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "prims/common_meta.h"
#include "prims/layout.h"

namespace kiln::prims {

using graph::Arg;

DecomposeCall::DecomposeCall(PrimBuilder& builder, const graph::Graph& graph,
                             const graph::Node& node, const prims::OpSpelling& spelling, const prims::BoundArgs& bound,
                             const std::vector<std::vector<int>>& node_values)
    : b(builder), node(node), graph_(graph), spelling_(spelling), bound_(bound), node_values_(node_values) {}

void DecomposeCall::unsupported(const std::string& why) const {
  throw NotDecomposed(spelling_.text + ": " + why);
}

DecomposeCall::Bound DecomposeCall::lookup(const char* name) const {
  for (size_t i = 0; i < spelling_.params.size(); ++i) {
    const prims::Param& p = spelling_.params[i];
    if (p.name != name) continue;
    if (p.varargs) unsupported(std::string("varargs ") + name + " read as one value");
    return Bound{bound_.given[i], p.default_value};
  }
  // A decomposition asking for a parameter its spelling lacks: the
  // spelling's signature and the decomposition disagree.
  unsupported(std::string("no parameter ") + name);
}

int DecomposeCall::node_value(int node_id) const {
  const std::vector<int>& values = node_values_.at(node_id);
  if (values.size() != 1 || graph_.node(node_id).returns_tuple) unsupported("an argument is not a single tensor");
  return values[0];
}

bool DecomposeCall::has_param(const char* name) const {
  for (const prims::Param& p : spelling_.params) {
    if (p.name == name) return true;
  }
  return false;
}

PyObject* DecomposeCall::constant(const char* name) const {
  Bound bound = lookup(name);
  if (!bound.arg) return bound.default_value;
  return bound.arg->kind == Arg::Kind::Constant ? bound.arg->constant : nullptr;
}

bool DecomposeCall::given(const char* name) const {
  Bound bound = lookup(name);
  if (bound.arg) return !(bound.arg->kind == Arg::Kind::Constant && bound.arg->constant == Py_None);
  return bound.default_value && bound.default_value != Py_None;
}

bool DecomposeCall::is_tensor(const char* name) const {
  Bound bound = lookup(name);
  return bound.arg && bound.arg->kind == Arg::Kind::Node;
}

int DecomposeCall::tensor(const char* name) const {
  Bound bound = lookup(name);
  if (!bound.arg || bound.arg->kind != Arg::Kind::Node) unsupported(std::string(name) + " is not a tensor");
  return node_value(bound.arg->node);
}

PrimArg DecomposeCall::operand(const char* name) const {
  if (is_tensor(name)) return PrimArg::of_value(tensor(name));
  PyObject* obj = constant(name);
  if (!obj) unsupported(std::string(name) + " is neither a tensor nor a number");
  if (PyBool_Check(obj)) return PrimArg::of_scalar(Scalar::of_bool(obj == Py_True));
  if (PyLong_Check(obj)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) unsupported(std::string(name) + " does not fit in int64");
    return PrimArg::of_scalar(Scalar::of_int(v));
  }
  if (PyFloat_Check(obj)) return PrimArg::of_scalar(Scalar::of_float(PyFloat_AS_DOUBLE(obj)));
  if (PyComplex_Check(obj)) {
    Scalar s;
    s.kind = ScalarKind::Complex;
    s.real = PyComplex_RealAsDouble(obj);
    s.imag = PyComplex_ImagAsDouble(obj);
    return PrimArg::of_scalar(s);
  }
  unsupported(std::string(name) + " is a " + Py_TYPE(obj)->tp_name + ", not a number");
}

int64_t DecomposeCall::int_of(PyObject* obj, const char* name) const {
  if (!obj || PyBool_Check(obj) || !PyLong_Check(obj)) unsupported(std::string(name) + " is not an int");
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow) unsupported(std::string(name) + " does not fit in int64");
  return v;
}

int64_t DecomposeCall::integer(const char* name) const { return int_of(constant(name), name); }

std::optional<int64_t> DecomposeCall::opt_integer(const char* name) const {
  if (!given(name)) return std::nullopt;
  return integer(name);
}

double DecomposeCall::number(const char* name) const {
  PyObject* obj = constant(name);
  if (obj && PyFloat_Check(obj)) return PyFloat_AS_DOUBLE(obj);
  return static_cast<double>(integer(name));
}

bool DecomposeCall::flag(const char* name) const {
  PyObject* obj = constant(name);
  if (!obj || !PyBool_Check(obj)) unsupported(std::string(name) + " is not a bool");
  return obj == Py_True;
}

std::string DecomposeCall::text(const char* name) const {
  PyObject* obj = constant(name);
  if (!obj || !PyUnicode_Check(obj)) unsupported(std::string(name) + " is not a str");
  return PyUnicode_AsUTF8(obj);
}

std::optional<DType> DecomposeCall::dtype(const char* name) const {
  PyObject* obj = constant(name);
  if (!obj) unsupported(std::string(name) + " is not a dtype");
  if (obj == Py_None) return std::nullopt;
  PyObject* text = PyObject_Str(obj);
  if (!text) {
    PyErr_Clear();
    unsupported(std::string(name) + " is not a dtype");
  }
  const std::string s = PyUnicode_AsUTF8(text);
  Py_DECREF(text);
  if (s.rfind("torch.", 0) != 0) unsupported(std::string(name) + " is not a dtype");
  const DType d = graph::dtype_from_name(s);
  if (d == DType::Other) unsupported(std::string(name) + " is a dtype kiln does not model");
  return d;
}

std::vector<int64_t> DecomposeCall::ints_of(const Arg& arg, const char* name) const {
  std::vector<int64_t> out;
  if (arg.kind == Arg::Kind::Tuple || arg.kind == Arg::Kind::List) {
    for (const Arg& item : arg.items) {
      if (item.kind != Arg::Kind::Constant) unsupported(std::string(name) + " holds a non-constant");
      out.push_back(int_of(item.constant, name));
    }
    return out;
  }
  if (arg.kind != Arg::Kind::Constant) unsupported(std::string(name) + " is not a constant");
  PyObject* obj = arg.constant;
  if (PyTuple_Check(obj) || PyList_Check(obj)) {
    const Py_ssize_t n = PySequence_Size(obj);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(obj, i);  // tuples and lists only
      out.push_back(int_of(item, name));
    }
    return out;
  }
  out.push_back(int_of(obj, name));
  return out;
}

std::vector<int64_t> DecomposeCall::ints(const char* name) const {
  for (size_t i = 0; i < spelling_.params.size(); ++i) {
    const prims::Param& p = spelling_.params[i];
    if (p.name != name || !p.varargs) continue;
    if (bound_.rest.size() == 1) return ints_of(*bound_.rest[0], name);
    std::vector<int64_t> out;
    for (const Arg* arg : bound_.rest) {
      if (arg->kind != Arg::Kind::Constant) unsupported(std::string(name) + " holds a non-constant");
      out.push_back(int_of(arg->constant, name));
    }
    return out;
  }
  Bound bound = lookup(name);
  if (bound.arg) return ints_of(*bound.arg, name);
  Arg fallback = Arg::of_constant(bound.default_value);
  return ints_of(fallback, name);
}

std::vector<int> DecomposeCall::tensors(const char* name) const {
  for (const prims::Param& p : spelling_.params) {
    if (p.name != name || !p.varargs) continue;
    if (bound_.rest.size() == 1 && bound_.rest[0]->kind != Arg::Kind::Node) {
      const Arg& seq = *bound_.rest[0];
      if (seq.kind != Arg::Kind::Tuple && seq.kind != Arg::Kind::List) {
        unsupported(std::string(name) + " is not a sequence of tensors");
      }
      std::vector<int> out;
      for (const Arg& item : seq.items) {
        if (item.kind != Arg::Kind::Node) unsupported(std::string(name) + " holds a non-tensor");
        out.push_back(node_value(item.node));
      }
      return out;
    }
    std::vector<int> out;
    for (const Arg* arg : bound_.rest) {
      if (arg->kind != Arg::Kind::Node) unsupported(std::string(name) + " holds a non-tensor");
      out.push_back(node_value(arg->node));
    }
    return out;
  }
  Bound bound = lookup(name);
  if (!bound.arg || (bound.arg->kind != Arg::Kind::Tuple && bound.arg->kind != Arg::Kind::List)) {
    unsupported(std::string(name) + " is not a sequence of tensors");
  }
  std::vector<int> out;
  for (const Arg& item : bound.arg->items) {
    if (item.kind != Arg::Kind::Node) unsupported(std::string(name) + " holds a non-tensor");
    out.push_back(node_value(item.node));
  }
  return out;
}

bool DecomposeCall::constant_items(const char* name, std::vector<base::PyRef>* out) const {
  std::vector<int> tensor_values;
  if (!index_items(name, out, &tensor_values)) return false;
  for (int value : tensor_values) {
    if (value >= 0) {
      out->clear();
      return false;
    }
  }
  return true;
}

void DecomposeCall::index_or_item(const char* name, std::vector<base::PyRef>* out,
                                  std::vector<int>* tensor_values) const {
  if (index_items(name, out, tensor_values)) return;
  PyObject* index = constant(name);
  if (!index) unsupported("the index holds a computed value");
  out->push_back(base::PyRef::borrow(index));
  tensor_values->push_back(-1);
}

bool DecomposeCall::index_items(const char* name, std::vector<base::PyRef>* out,
                                std::vector<int>* tensor_values) const {
  out->clear();
  tensor_values->clear();
  Bound bound = lookup(name);
  if (!bound.arg) return false;
  if (bound.arg->kind == Arg::Kind::Tuple) {
    for (const Arg& item : bound.arg->items) {
      if (item.kind == Arg::Kind::List) {
        base::PyRef list = base::PyRef::steal(PyList_New(static_cast<Py_ssize_t>(item.items.size())));
        for (size_t k = 0; k < item.items.size(); ++k) {
          if (item.items[k].kind != Arg::Kind::Constant) return false;
          Py_INCREF(item.items[k].constant);
          PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(k), item.items[k].constant);
        }
        out->push_back(std::move(list));
        tensor_values->push_back(-1);
        continue;
      }
      if (item.kind == Arg::Kind::Node) {
        out->push_back(base::PyRef());
        tensor_values->push_back(node_value(item.node));
        continue;
      }
      if (item.kind != Arg::Kind::Constant) return false;
      out->push_back(base::PyRef::borrow(item.constant));
      tensor_values->push_back(-1);
    }
    return true;
  }
  if (bound.arg->kind == Arg::Kind::Constant && PyTuple_Check(bound.arg->constant)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bound.arg->constant); ++i) {
      out->push_back(base::PyRef::borrow(PyTuple_GET_ITEM(bound.arg->constant, i)));
      tensor_values->push_back(-1);
    }
    return true;
  }
  return false;
}

const graph::TensorMeta& DecomposeCall::traced(size_t i) const {
  if (i >= node.metas.size()) unsupported("the call has no traced result " + std::to_string(i));
  return node.metas[i];
}

int to_dtype(PrimBuilder& b, int value, DType dtype) {
  return b.meta(value).dtype == dtype ? value : b.convert(value, dtype);
}

int in_traced_layout(PrimBuilder& b, int value, const graph::TensorMeta& traced) {
  const graph::TensorMeta made = b.meta(value);
  if (strides_agree(made.sizes, made.strides, traced.strides)) return value;
  if (is_contiguous(traced.sizes, traced.strides)) return b.clone(value, MemoryFormat::Contiguous);
  if (is_channels_last_contiguous(traced.sizes, traced.strides)) return b.clone(value, MemoryFormat::ChannelsLast);
  // Dims from the outermost in memory to the innermost, as traced.
  const int64_t rank = static_cast<int64_t>(traced.sizes.size());
  std::vector<int64_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return traced.strides[x] > traced.strides[y]; });
  std::vector<int64_t> inverse(rank);
  for (int64_t k = 0; k < rank; ++k) inverse[order[k]] = k;
  return b.permute(b.clone(b.permute(value, order), MemoryFormat::Contiguous), inverse);
}

DType opmath_dtype(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 ? DType::Float32 : dtype;
}

std::vector<int64_t> all_dims(int64_t rank) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  return dims;
}

int64_t count_of(PrimBuilder& b, int value, const std::vector<int64_t>& dims) {
  const auto& sizes = b.meta(value).sizes;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  if (dims.empty()) return numel(sizes);
  int64_t count = 1;
  for (int64_t d : wrap_dims("mean", dims, rank)) count *= rank == 0 ? 1 : sizes[d];
  return count;
}

int mean(PrimBuilder& b, int value, std::vector<int64_t> dims, bool keepdim) {
  const int64_t count = count_of(b, value, dims);
  const int sum = b.reduce(Prim::Sum, value, std::move(dims), keepdim);
  return b.binary(Prim::Div, PrimArg::of_value(sum), PrimArg::of_scalar(Scalar::of_int(count)));
}

int softmax(PrimBuilder& b, int value, int64_t dim, bool log) {
  const DType dtype = b.meta(value).dtype;
  const int x = to_dtype(b, value, opmath_dtype(dtype));
  const int max = b.reduce(Prim::Amax, x, {dim}, true);
  // The shift cancels in the result, so its gradient is zero: without this,
  // the backward would count the row's ties for amax's gradient and spread
  // a sum over them (a reduction more each way), as torch's decomposition
  // avoids by detaching it too.
  b.graph().stop_grad(max);
  const int shifted = b.binary(Prim::Sub, PrimArg::of_value(x), PrimArg::of_value(max));
  const int exp = b.unary(Prim::Exp, shifted);
  const int total = b.reduce(Prim::Sum, exp, {dim}, true);
  const int out = log ? b.binary(Prim::Sub, PrimArg::of_value(shifted), PrimArg::of_value(b.unary(Prim::Log, total)))
                      : b.binary(Prim::Div, PrimArg::of_value(exp), PrimArg::of_value(total));
  return to_dtype(b, out, dtype);
}

int scale(PrimBuilder& b, int value, double factor) {
  if (factor == 1) return value;
  return b.binary(Prim::Mul, PrimArg::of_value(value), PrimArg::of_scalar(Scalar::of_float(factor)));
}

std::optional<double> norm_order(DecomposeCall& c, const char* name, size_t dims) {
  PyObject* ord = c.constant(name);
  if (ord == nullptr) c.unsupported(std::string(name) + " is not a constant");
  if (ord == Py_None) return 2.0;
  if (PyUnicode_Check(ord)) {
    if (c.text(name) == "fro" && dims <= 2) return 2.0;
    return std::nullopt;
  }
  const double value = c.number(name);
  if (value == 1.0 || value == 2.0) return value;
  return std::nullopt;
}

int vector_norm(PrimBuilder& b, int value, double ord, std::vector<int64_t> dims, bool keepdim) {
  const int x = to_dtype(b, value, opmath_dtype(b.meta(value).dtype));
  const PrimArg xv = PrimArg::of_value(x);
  if (ord == 1.0) return b.reduce(Prim::Sum, b.unary(Prim::Abs, x), std::move(dims), keepdim);
  const int squares = b.reduce(Prim::Sum, b.binary(Prim::Mul, xv, xv), std::move(dims), keepdim);
  // sqrt's derivative at 0 is inf (0 * inf = NaN in the backward): both
  // wheres keep it finite, the gradient 0 there as torch's norm_backward.
  const int zero = b.binary(Prim::Eq, PrimArg::of_value(squares), PrimArg::of_scalar(Scalar::of_float(0)));
  const int safe = b.where(zero, PrimArg::of_scalar(Scalar::of_float(1)), PrimArg::of_value(squares));
  return b.where(zero, PrimArg::of_scalar(Scalar::of_float(0)), PrimArg::of_value(b.unary(Prim::Sqrt, safe)));
}

}  // namespace kiln::prims
