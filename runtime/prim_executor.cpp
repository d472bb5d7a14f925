#include "runtime/prim_executor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "prims/layout.h"
#include "prims/type_promotion.h"
#include "runtime/aten_bridge.h"
#include "runtime/aten_calls.h"
#include "runtime/graph_arg_values.h"
#include "base/log.h"
#include "base/py_ref.h"
#include "base/small_buffer.h"
#include "base/stopwatch.h"

namespace kiln::runtime {

using base::PyRef;
using base::SmallBuffer;
using base::Stopwatch;
using base::log_enabled;
using base::LogChannel;

using graph::Arg;
using prims::Family;
using prims::Prim;
using prims::PrimArg;
using prims::PrimAttrs;
using prims::PrimNode;
using prims::Scalar;
using prims::ScalarKind;

// Note [Prim steps]
// Every prim becomes one call `callable(*args, **kwargs)` whose arguments are
// graph::Args: Node refs name value ids, constants (dims, dtypes, scalars)
// are built once here. A few prims need a second call on the result
// (`then(result, *then_args)`: uniform_ on a fresh tensor, a reshape after
// prod). The run loop is the same for every prim.
namespace {
// The ATen call a step makes from C++ when its operands are plain tensors
// (Note [Native views]).
enum class Native : uint8_t { None, View, Matmul, Linear, Fill, Cat, IndexSelect, Index, Attention };
}  // namespace

struct PrimExecutor::Step {
  std::string label;         // what KILN_LOGS=perf's run profile calls it
  PyRef callable;
  std::vector<Arg> args;     // positional, then keyword values
  size_t positional = 0;
  PyRef kwnames;             // tuple of keyword names, or null
  PyRef then;                // optional second call on the result
  std::vector<Arg> then_args;
  std::vector<int> outputs;  // 1: the result; > 1: its items; 0: discarded
  std::vector<int> release_after;
  // Note [Native views]: a step of plain tensors that runs through ATen
  // from C++; `callable` stays for any other operand.
  Native native = Native::None;
  std::optional<ViewCall> view;
  // An extern call of operator.setitem(x, slices, number): the slices and
  // the number (Note [Native views]).
  std::optional<std::vector<ViewCall>> fill;
  PyRef fill_value;
  AttentionCall attention;  // Native::Attention
  int64_t dim = 0;          // Native::Cat, Native::IndexSelect
  std::vector<int> native_inputs;  // value ids of the native call's operands (Attention: mask -1 for None)
  // Note [Strides of size-1 dims]: the output's strides, where it has a
  // size-1 dim whose stride torch's op may set otherwise.
  std::optional<std::vector<int64_t>> unit_dim_strides;
  // Note [Kernels of parameters]: the tensor values the step reads, when
  // its result is kept between runs.
  std::vector<int> memo_inputs;
};

// Note [Kernels of parameters]
// Under autocast every inference call converts each weight to bfloat16
// again: GPT-2's forward launched about 100 such kernels (of 186), each
// 8-15 us of host time on the H100 and a pass over the float32 weights,
// where its step was bound by host time. A kernel that reads only
// parameters computes the same result until a parameter changes, so an
// inference graph on the GPU keeps those results between calls: a call
// whose inputs are the very Parameter objects of the last run, each with
// the same data pointer and version counter (an in-place update, an
// optimizer step, `p.data = ...` all change one), takes the kept result
// instead of launching. The cost is the memory of the kept results (a
// 16-bit copy of the weights under autocast), released with the compiled
// graph; kiln.config.parameter_kernel_cache turns it off. Only kiln's own
// kernels (pure, fresh results), none a graph output and in graphs with no
// writing extern, are kept (interpreter/backends.cpp).
struct PrimExecutor::Memo {
  std::vector<PyRef> inputs;
  std::vector<char*> data;
  std::vector<int64_t> versions;
  PyRef result;
};

// Note [Strides of size-1 dims]
// A size-1 dim's stride addresses nothing, but Tensor.stride() shows it, and
// decompositions take torch's (prims/decompose.cpp: a clone of a [1] tensor
// with stride 2, and an in-place op on it, keep 2). The torch op a prim
// runs here may choose another (div of that clone is contiguous), so such
// outputs are given the graph's strides (runtime/aten_bridge.h
// aten_unit_dim_strides): a view keeps being a view of its base; a fresh
// result becomes a tensor of the same storage that is no view, since a view
// made inside kiln's autograd Function may not be written in place by the
// caller (fuzz seed 48613).

namespace {

// Note [Native views]
// A compiled GPT training step runs about 300 view prims (permute, reshape,
// slice, expand) and 110 matmuls through the executor. Through Python each
// view cost 4-6 us of host time on the H100 machine (argument parsing, a
// prebuilt slice through operator.getitem), more than ATen's op itself;
// the step is bound by host time. So a view or matmul step whose operands
// are plain tensors (plain_tensor: no __torch_function__ to honour) calls
// ATen's op of the same name from C++: the same op, the same autograd
// record, no Python. Any other operand takes the prepared Python call.
// The same holds for the F.linear(x, w, b) externs of CUDA graphs' bias
// epilogues (Note [Bias epilogues]): Python's argument parsing took a few
// of each linear's microseconds; and for writes of a number into slices,
// x[a:b, c:d] = n (operator.setitem externs: Swin fills its shifted
// windows' masks with 45 of them a call), as slice views and fill_.

// Note [Executor run profile]
// With KILN_LOGS=perf each run logs where its host time went, by step
// label (the prim, a kernel's name, or an extern's callable type), so
// a host-bound compiled step shows which calls to make cheaper. Off, the
// run pays one flag test a step.
class RunProfile {
 public:
  explicit RunProfile(size_t steps) : steps_(steps) {}

  // Adds `ms` spent in a step labelled `label`.
  void add(const std::string& label, double ms) {
    for (Entry& e : entries_) {
      if (e.label == &label || *e.label == label) {
        e.ms += ms;
        ++e.count;
        return;
      }
    }
    entries_.push_back(Entry{&label, ms, 1});
  }

  // One line: the run's total, then the labels by time spent.
  std::string summary(double total_ms) {
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
    std::ostringstream out;
    out.precision(1);
    out << std::fixed << "prim executor run: " << steps_ << " steps, " << total_ms * 1e3 << " us";
    for (const Entry& e : entries_) out << "; " << *e.label << " " << e.ms * 1e3 << " us x" << e.count;
    return out.str();
  }

 private:
  struct Entry {
    const std::string* label;
    double ms;
    int count;
  };
  size_t steps_;
  std::vector<Entry> entries_;
};

[[noreturn]] void unsupported(int node, const PrimNode& n, const std::string& why) {
  throw PrimExecutorError("prim executor: node " + std::to_string(node) + " (" +
                          prims::prim_name(n.prim) + "): " + why);
}

// Throws PrimExecutorError with the pending Python error's text.
[[noreturn]] void python_failed(const std::string& what) {
  std::string text = "<no Python error>";
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  if (value) {
    PyObject* str = PyObject_Str(value);
    if (str && PyUnicode_Check(str)) text = PyUnicode_AsUTF8(str);
    Py_XDECREF(str);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  throw PrimExecutorError("prim executor: " + what + ": " + text);
}

PyRef checked(PyObject* obj, const std::string& what) {
  if (!obj) python_failed(what);
  return PyRef::steal(obj);
}

PyObject* torch_module() {
  static PyObject* torch = PyImport_ImportModule("torch");  // kept for the process
  return torch;
}

// torch.<path>, e.g. "add", "Tensor.view", "ops.aten.index_put.default".
PyRef torch_attr(const std::string& path) {
  PyObject* torch = torch_module();
  if (!torch) python_failed("import torch");
  PyRef current = PyRef::borrow(torch);
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    current = checked(PyObject_GetAttrString(current.get(), path.substr(start, dot - start).c_str()),
                      "torch." + path);
    start = dot + 1;
  }
  return current;
}

// operator.<name> (a new reference), or null with no error set.
PyObject* operator_function(const char* name) {
  PyObject* module = PyImport_ImportModule("operator");
  PyObject* fn = module ? PyObject_GetAttrString(module, name) : nullptr;
  Py_XDECREF(module);
  PyErr_Clear();
  return fn;
}

// operator.setitem, kept for the process.
PyObject* operator_setitem() {
  static PyObject* setitem = operator_function("setitem");
  return setitem;
}

// The slices of a setitem key (a slice, or a tuple of slices, one per
// leading dim of a rank-`rank` tensor: int or None bounds, a positive step)
// written with a Python number; nullopt for any other key or value.
std::optional<std::vector<ViewCall>> slice_key(const Arg& key, const Arg& value, int64_t rank) {
  if (value.kind != Arg::Kind::Constant) return std::nullopt;
  PyObject* number = value.constant;
  if (!number || !(PyBool_Check(number) || PyLong_CheckExact(number) || PyFloat_CheckExact(number))) {
    return std::nullopt;
  }
  // A tuple key arrives as a Tuple arg of constants, or as one constant.
  std::vector<PyObject*> items;
  if (key.kind == Arg::Kind::Tuple) {
    for (const Arg& item : key.items) {
      if (item.kind != Arg::Kind::Constant || !item.constant) return std::nullopt;
      items.push_back(item.constant);
    }
  } else if (key.kind == Arg::Kind::Constant && key.constant && PyTuple_Check(key.constant)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key.constant); ++i) items.push_back(PyTuple_GET_ITEM(key.constant, i));
  } else if (key.kind == Arg::Kind::Constant && key.constant) {
    items.push_back(key.constant);
  } else {
    return std::nullopt;
  }
  const auto count = static_cast<int64_t>(items.size());
  if (count > rank) return std::nullopt;
  auto bound = [](PyObject* obj, std::optional<int64_t>* out) {
    if (obj == Py_None) return true;
    if (!PyLong_CheckExact(obj)) return false;
    *out = PyLong_AsLongLong(obj);
    return !PyErr_Occurred();
  };
  std::vector<ViewCall> slices;
  for (int64_t i = 0; i < count; ++i) {
    if (!PySlice_Check(items[i])) return std::nullopt;
    auto* slice = reinterpret_cast<PySliceObject*>(items[i]);
    ViewCall call;
    call.op = ViewCall::Op::Slice;
    call.dim = i;
    std::optional<int64_t> step;
    if (!bound(slice->start, &call.start) || !bound(slice->stop, &call.end) || !bound(slice->step, &step) ||
        (step && *step <= 0)) {
      PyErr_Clear();
      return std::nullopt;
    }
    call.step = step.value_or(1);
    slices.push_back(call);
  }
  return slices;
}

// The tensor and index tensors of an extern x[key] whose key is a tensor
// or a tuple of tensors, each of rank >= 1 and an integer or bool dtype:
// Python's indexing is then at::index (advanced indexing; a 0-dim index
// would select a view instead). Nullopt for any other call.
std::optional<std::vector<int>> index_key(const prims::PrimGraph& g, const PrimAttrs& a) {
  static PyObject* getitem = operator_function("getitem");  // kept for the process
  if (!getitem || a.target != getitem || !a.extern_kwargs.empty() || a.extern_args.size() != 2 ||
      a.extern_args[0].kind != Arg::Kind::Node) {
    return std::nullopt;
  }
  const Arg& key = a.extern_args[1];
  std::vector<const Arg*> items;
  if (key.kind == Arg::Kind::Tuple) {
    for (const Arg& item : key.items) items.push_back(&item);
  } else {
    items.push_back(&key);
  }
  std::vector<int> operands = {a.extern_args[0].node};
  for (const Arg* item : items) {
    if (item->kind != Arg::Kind::Node) return std::nullopt;
    const graph::TensorMeta& meta = g.value(item->node).meta;
    const bool integral = meta.dtype == graph::DType::Int64 || meta.dtype == graph::DType::Int32 ||
                          meta.dtype == graph::DType::Bool;
    if (!integral || meta.sizes.empty()) return std::nullopt;
    operands.push_back(item->node);
  }
  if (items.empty()) return std::nullopt;
  return operands;
}

// The call of an extern of kiln._attention.attention (query, key, value,
// mask or None, backend, is_causal, scale or None, with_lse), read from its
// constants; nullopt for any other extern or argument shape.
std::optional<AttentionCall> attention_call(const PrimAttrs& a) {
  if (a.target_name != prims::kAttentionExtern || !a.extern_kwargs.empty() || a.extern_args.size() != 8) {
    return std::nullopt;
  }
  const std::vector<Arg>& args = a.extern_args;
  for (int i = 0; i < 3; ++i) {
    if (args[i].kind != Arg::Kind::Node) return std::nullopt;
  }
  for (int i = 4; i < 8; ++i) {
    if (args[i].kind != Arg::Kind::Constant || !args[i].constant) return std::nullopt;
  }
  if (args[3].kind != Arg::Kind::Node && !(args[3].kind == Arg::Kind::Constant && args[3].constant == Py_None)) {
    return std::nullopt;
  }
  PyObject* backend = args[4].constant;
  PyObject* scale = args[6].constant;
  if (!PyLong_CheckExact(backend) || !PyBool_Check(args[5].constant) || !PyBool_Check(args[7].constant) ||
      !(scale == Py_None || PyFloat_CheckExact(scale) || PyLong_CheckExact(scale))) {
    return std::nullopt;
  }
  AttentionCall call;
  call.backend = static_cast<int>(PyLong_AsLong(backend));
  call.causal = args[5].constant == Py_True;
  if (scale != Py_None) call.scale = PyFloat_AsDouble(scale);
  call.with_lse = args[7].constant == Py_True;
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return call;
}

Arg constant(PyRef value) {
  Arg arg = Arg::of_constant(value.get());
  return arg;
}

Arg int_constant(int64_t value) { return constant(checked(PyLong_FromLongLong(value), "int")); }

Arg ints_constant(const std::vector<int64_t>& values) {
  PyRef tuple = checked(PyTuple_New(static_cast<Py_ssize_t>(values.size())), "tuple");
  for (size_t i = 0; i < values.size(); ++i) {
    PyTuple_SET_ITEM(tuple.get(), i, checked(PyLong_FromLongLong(values[i]), "int").release());
  }
  return constant(tuple);
}

Arg bool_constant(bool value) { return constant(PyRef::borrow(value ? Py_True : Py_False)); }

Arg none_constant() { return constant(PyRef::borrow(Py_None)); }

PyRef scalar_object(const Scalar& s) {
  switch (s.kind) {
    case ScalarKind::Bool: return PyRef::borrow(s.integer ? Py_True : Py_False);
    case ScalarKind::Int: return checked(PyLong_FromLongLong(s.integer), "int");
    case ScalarKind::Float: return checked(PyFloat_FromDouble(s.real), "float");
    case ScalarKind::Complex: return checked(PyComplex_FromDoubles(s.real, s.imag), "complex");
  }
  return PyRef::borrow(Py_None);
}

Arg scalar_constant(const Scalar& s) { return constant(scalar_object(s)); }

// A number that is integral passes as a Python int (torch 1.13's var_mean
// takes an int correction).
Arg number_constant(double value) {
  if (std::floor(value) == value && std::abs(value) < 1e15) {
    return int_constant(static_cast<int64_t>(value));
  }
  return constant(checked(PyFloat_FromDouble(value), "float"));
}

Arg dtype_constant(graph::DType dtype) { return constant(torch_attr(graph::dtype_name(dtype))); }

Arg device_constant(graph::DeviceType type, int index) {
  PyRef device_type = torch_attr("device");
  PyRef name = checked(PyUnicode_FromString(graph::device_name(type, index).c_str()), "str");
  return constant(checked(PyObject_CallOneArg(device_type.get(), name.get()), "torch.device"));
}

// A 0-dim CPU tensor holding a scalar operand, for torch functions that take
// no Python scalar in that position. Its dtype is what torch would convert
// the scalar to (Note [Scalar operands]).
Arg scalar_tensor_constant(const Scalar& s, graph::DType dtype) {
  PyRef fn = torch_attr("tensor");
  PyRef args = checked(PyTuple_Pack(1, scalar_object(s).get()), "tuple");
  PyRef kwargs = checked(PyDict_New(), "dict");
  PyDict_SetItemString(kwargs.get(), "dtype", dtype_constant(dtype).constant);
  return constant(checked(PyObject_Call(fn.get(), args.get(), kwargs.get()), "torch.tensor"));
}

Arg value_arg(int id) { return Arg::of_node(id); }

Arg list_of(std::vector<Arg> items, bool tuple = false) {
  Arg arg;
  arg.kind = tuple ? Arg::Kind::Tuple : Arg::Kind::List;
  arg.items = std::move(items);
  return arg;
}

int category(ScalarKind kind) { return static_cast<int>(kind); }

int category(graph::DType d) {
  if (prims::is_bool(d)) return category(ScalarKind::Bool);
  if (prims::is_integer(d)) return category(ScalarKind::Int);
  if (prims::is_complex(d)) return category(ScalarKind::Complex);
  return category(ScalarKind::Float);
}

// Note [Scalar operands]
// torch's functions take a Python scalar as the second operand of most
// binary ops but not as the first (nor for maximum, atan2, logical_*). There
// the scalar becomes a 0-dim tensor, which type promotion treats as it treats
// a scalar when its dtype is the one torch would convert the scalar to: the
// other operand's dtype when the scalar's category is not higher, else the
// common dtype, which for these prims is the node's result dtype (logical
// ops, whose result is bool, take the scalar's own default dtype).
bool takes_scalar_second(Prim prim) {
  switch (prim) {
    case Prim::Add: case Prim::Sub: case Prim::Mul: case Prim::Div: case Prim::FloorDivide:
    case Prim::TruncDivide: case Prim::Pow: case Prim::Fmod: case Prim::Remainder:
    case Prim::Eq: case Prim::Ne: case Prim::Lt: case Prim::Le: case Prim::Gt: case Prim::Ge:
    case Prim::BitwiseAnd: case Prim::BitwiseOr: case Prim::BitwiseXor:
      return true;
    default:
      return false;
  }
}

// The comparison with swapped operands (a < b is b > a); nullopt when the
// prim is not a comparison.
std::optional<Prim> swapped_comparison(Prim prim) {
  switch (prim) {
    case Prim::Eq: return Prim::Eq;
    case Prim::Ne: return Prim::Ne;
    case Prim::Lt: return Prim::Gt;
    case Prim::Le: return Prim::Ge;
    case Prim::Gt: return Prim::Lt;
    case Prim::Ge: return Prim::Le;
    default: return std::nullopt;
  }
}

}  // namespace

PrimExecutor::PrimExecutor(std::shared_ptr<const prims::PrimGraph> graph)
    : PrimExecutor(graph, [&] {
        std::vector<Arg> items;
        for (int id : graph->outputs()) items.push_back(Arg::of_node(id));
        return list_of(std::move(items), /*tuple=*/true);
      }()) {}

PrimExecutor::PrimExecutor(std::shared_ptr<const prims::PrimGraph> graph, Arg output)
    : graph_(std::move(graph)), output_(std::move(output)) {
  const prims::PrimGraph& g = *graph_;
  if (std::string problem = g.verify(); !problem.empty()) {
    throw PrimExecutorError("prim executor: invalid prim graph: " + problem);
  }
  const int node_count = static_cast<int>(g.nodes().size());
  steps_.resize(node_count);
  for (int n = 0; n < node_count; ++n) {
    const PrimNode& node = g.node(n);
    const PrimAttrs& a = node.attrs;
    Step& step = steps_[n];
    step.outputs = node.outputs;
    if (node.outputs.size() == 1 && prims::prim_info(node.prim).family != prims::Family::View) {
      const graph::TensorMeta& m = g.value(node.outputs[0]).meta;
      if (std::find(m.sizes.begin(), m.sizes.end(), 1) != m.sizes.end()) step.unit_dim_strides = m.strides;
    }
    // Externs by the callable's type, kiln's kernels by their names, and
    // Python-level callables (builtins, functions) by the name the graph
    // gives them (F.linear, aten.addmm), which says which torch call costs.
    step.label = prims::prim_name(node.prim);
    if (node.prim == Prim::Extern && a.target) {
      const bool named = (PyCFunction_Check(a.target) || PyFunction_Check(a.target)) && !a.target_name.empty();
      step.label = named ? a.target_name : Py_TYPE(a.target)->tp_name;
      // A kiln kernel by its name ("kernel sum"): which kernels cost, not
      // only that kernels do (a pow() in RMSNorm's backward kernel showed
      // up so).
      if (a.target_name.rfind("kernel ", 0) == 0) step.label = a.target_name;
    }
    std::vector<std::pair<const char*, Arg>> kwargs;
    auto in = [&](size_t i) -> int {
      if (i >= node.args.size() || !node.args[i].is_value()) unsupported(n, node, "expected a tensor operand");
      return node.args[i].value;
    };
    const graph::TensorMeta& out = g.value(node.outputs.empty() ? 0 : node.outputs[0]).meta;
    const int64_t in_rank =
        node.args.empty() || !node.args[0].is_value() ? 0
                                                      : static_cast<int64_t>(g.value(node.args[0].value).meta.sizes.size());
    auto all_dims = [&](const std::vector<int64_t>& dims) {
      if (!dims.empty()) return dims;
      std::vector<int64_t> every;
      for (int64_t d = 0; d < in_rank; ++d) every.push_back(d);
      return every;
    };
    switch (prims::prim_info(node.prim).family) {
      case Family::Unary:
        step.callable = torch_attr(prims::prim_name(node.prim));
        step.args = {value_arg(in(0))};
        break;
      case Family::Binary: {
        Prim prim = node.prim;
        PrimArg lhs = node.args.at(0), rhs = node.args.at(1);
        if (!lhs.is_value() && !rhs.is_value()) unsupported(n, node, "both operands are scalars");
        if (!lhs.is_value()) {
          if (auto swapped = swapped_comparison(prim)) {
            prim = *swapped;
            std::swap(lhs, rhs);
          }
        }
        auto operand = [&](const PrimArg& arg, const PrimArg& other, bool second) {
          if (arg.is_value()) return value_arg(arg.value);
          if (second && takes_scalar_second(prim)) return scalar_constant(arg.scalar);
          const graph::DType other_dtype = g.value(other.value).meta.dtype;
          graph::DType dtype = other_dtype;
          if (category(arg.scalar.kind) > category(other_dtype)) {
            dtype = prims::prim_info(prim).promotion == prims::PromotionKind::AlwaysBool
                        ? prims::scalar_dtype(arg.scalar.kind)
                        : out.dtype;
          }
          return scalar_tensor_constant(arg.scalar, dtype);
        };
        step.args = {operand(lhs, rhs, false), operand(rhs, lhs, true)};
        if (prim == Prim::FloorDivide || prim == Prim::TruncDivide) {
          step.callable = torch_attr("div");
          kwargs.emplace_back("rounding_mode", constant(checked(
              PyUnicode_FromString(prim == Prim::FloorDivide ? "floor" : "trunc"), "str")));
        } else {
          step.callable = torch_attr(prims::prim_name(prim));
        }
        break;
      }
      case Family::Ternary: {
        // torch.where takes Python scalars for either branch.
        step.callable = torch_attr("where");
        for (const PrimArg& arg : node.args) {
          step.args.push_back(arg.is_value() ? value_arg(arg.value) : scalar_constant(arg.scalar));
        }
        break;
      }
      case Family::Convert:
        if (node.prim == Prim::ConvertElementType) {
          step.callable = torch_attr("Tensor.to");
          step.args = {value_arg(in(0)), dtype_constant(*a.dtype)};
          kwargs.emplace_back("copy", bool_constant(true));
        } else {
          // The builder recorded the layout in the output's strides.
          const char* format = prims::is_contiguous(out.sizes, out.strides) ? "contiguous_format"
                               : prims::is_channels_last_contiguous(out.sizes, out.strides)
                                   ? "channels_last"
                                   : "preserve_format";
          step.callable = torch_attr("clone");
          step.args = {value_arg(in(0))};
          kwargs.emplace_back("memory_format", constant(torch_attr(format)));
        }
        break;
      case Family::Reduction: {
        const int x = in(0);
        switch (node.prim) {
          case Prim::Sum:
          case Prim::Amax:
          case Prim::Amin:
            step.callable = torch_attr(prims::prim_name(node.prim));
            step.args = {value_arg(x), ints_constant(all_dims(a.dims)), bool_constant(a.keepdim)};
            if (a.dtype) kwargs.emplace_back("dtype", dtype_constant(*a.dtype));
            break;
          case Prim::Prod: {
            step.callable = torch_attr("prod");
            const bool every = a.dims.empty() || static_cast<int64_t>(a.dims.size()) == in_rank;
            if (every) {
              step.args = {value_arg(x)};
              if (a.keepdim && in_rank > 0) {
                step.then = torch_attr("Tensor.reshape");
                step.then_args = {ints_constant(out.sizes)};
              }
            } else if (a.dims.size() == 1) {
              step.args = {value_arg(x), int_constant(a.dims[0]), bool_constant(a.keepdim)};
            } else {
              unsupported(n, node, "prod over several (but not all) dims");
            }
            if (a.dtype) kwargs.emplace_back("dtype", dtype_constant(*a.dtype));
            break;
          }
          case Prim::Argmax:
          case Prim::Argmin:
            step.callable = torch_attr(prims::prim_name(node.prim));
            step.args = {value_arg(x), a.dims.empty() ? none_constant() : int_constant(a.dims[0]),
                         bool_constant(a.keepdim)};
            break;
          case Prim::VarMean:
            step.callable = torch_attr("var_mean");
            step.args = {value_arg(x)};
            kwargs.emplace_back("dim", a.dims.empty() ? none_constant() : ints_constant(a.dims));
            kwargs.emplace_back("correction", number_constant(a.correction));
            kwargs.emplace_back("keepdim", bool_constant(a.keepdim));
            break;
          default:
            unsupported(n, node, "unknown reduction");
        }
        break;
      }
      case Family::View: {
        const int x = in(0);
        ViewCall view;
        switch (node.prim) {
          case Prim::Reshape:
          case Prim::View:
          case Prim::Expand:
            step.callable = torch_attr(std::string("Tensor.") + prims::prim_name(node.prim));
            step.args = {value_arg(x), ints_constant(a.sizes)};
            view.op = node.prim == Prim::Reshape ? ViewCall::Op::Reshape
                      : node.prim == Prim::View  ? ViewCall::Op::View
                                                 : ViewCall::Op::Expand;
            view.ints = a.sizes;
            break;
          case Prim::Permute:
            step.callable = torch_attr("Tensor.permute");
            step.args = {value_arg(x), ints_constant(a.dims)};
            view.op = ViewCall::Op::Permute;
            view.ints = a.dims;
            break;
          case Prim::Slice: {
            PyRef builtins = checked(PyImport_ImportModule("operator"), "import operator");
            step.callable = checked(PyObject_GetAttrString(builtins.get(), "getitem"), "operator.getitem");
            PyRef index = checked(PyTuple_New(a.dim + 1), "tuple");
            for (int64_t d = 0; d < a.dim; ++d) {
              PyTuple_SET_ITEM(index.get(), d, checked(PySlice_New(nullptr, nullptr, nullptr), "slice").release());
            }
            PyRef start = a.start ? checked(PyLong_FromLongLong(*a.start), "int") : PyRef::borrow(Py_None);
            PyRef end = a.end ? checked(PyLong_FromLongLong(*a.end), "int") : PyRef::borrow(Py_None);
            PyRef stride = checked(PyLong_FromLongLong(a.step), "int");
            PyTuple_SET_ITEM(index.get(), a.dim,
                             checked(PySlice_New(start.get(), end.get(), stride.get()), "slice").release());
            step.args = {value_arg(x), constant(index)};
            view.op = ViewCall::Op::Slice;
            view.dim = a.dim;
            view.start = a.start;
            view.end = a.end;
            view.step = a.step;
            break;
          }
          case Prim::Squeeze:
            // torch 1.13's squeeze takes one dim; dropping several size-1
            // dims is always a valid view.
            if (a.dims.size() > 1) {
              step.callable = torch_attr("Tensor.view");
              step.args = {value_arg(x), ints_constant(out.sizes)};
              view.op = ViewCall::Op::View;
              view.ints = out.sizes;
            } else {
              step.callable = torch_attr("squeeze");
              step.args = {value_arg(x)};
              if (!a.dims.empty()) step.args.push_back(int_constant(a.dims[0]));
              view.op = ViewCall::Op::Squeeze;
              view.ints = a.dims;
            }
            break;
          case Prim::Unsqueeze:
            step.callable = torch_attr("unsqueeze");
            step.args = {value_arg(x), int_constant(a.dim)};
            view.op = ViewCall::Op::Unsqueeze;
            view.dim = a.dim;
            break;
          case Prim::AsStrided:
            step.callable = torch_attr("as_strided");
            step.args = {value_arg(x), ints_constant(a.sizes), ints_constant(a.strides),
                         int_constant(a.offset)};
            view.op = ViewCall::Op::AsStrided;
            view.ints = a.sizes;
            view.strides = a.strides;
            view.offset = a.offset;
            break;
          default:
            unsupported(n, node, "unknown view");
        }
        step.view = std::move(view);
        step.native = Native::View;
        step.native_inputs = {x};
        break;
      }
      case Family::Cat: {
        std::vector<Arg> tensors;
        for (size_t i = 0; i < node.args.size(); ++i) tensors.push_back(value_arg(in(i)));
        step.callable = torch_attr("cat");
        step.args = {list_of(std::move(tensors)), int_constant(a.dim)};
        step.native = Native::Cat;
        step.dim = a.dim;
        for (size_t i = 0; i < node.args.size(); ++i) step.native_inputs.push_back(in(i));
        break;
      }
      case Family::Matmul:
        step.callable = torch_attr("matmul");
        step.args = {value_arg(in(0)), value_arg(in(1))};
        step.native = Native::Matmul;
        step.native_inputs = {in(0), in(1)};
        break;
      case Family::Index:
        switch (node.prim) {
          case Prim::Gather:
            step.callable = torch_attr("gather");
            step.args = {value_arg(in(0)), int_constant(a.dim), value_arg(in(1))};
            break;
          case Prim::Scatter: {
            const PrimArg& src = node.args.at(2);
            step.callable = torch_attr(a.accumulate ? "scatter_add" : "scatter");
            step.args = {value_arg(in(0)), int_constant(a.dim), value_arg(in(1)),
                         src.is_value() ? value_arg(src.value) : scalar_constant(src.scalar)};
            break;
          }
          case Prim::IndexSelect:
            step.callable = torch_attr("index_select");
            step.args = {value_arg(in(0)), int_constant(a.dim), value_arg(in(1))};
            step.native = Native::IndexSelect;
            step.dim = a.dim;
            step.native_inputs = {in(0), in(1)};
            break;
          case Prim::IndexPut: {
            // torch.index_put's binding takes no None entries (1.13); the
            // aten op does.
            std::vector<Arg> indices;
            bool leading = true;
            for (size_t k = 0; k < a.dims.size(); ++k) {
              while (static_cast<int64_t>(indices.size()) < a.dims[k]) {
                indices.push_back(none_constant());
                leading = false;
              }
              indices.push_back(value_arg(in(2 + k)));
            }
            step.callable = torch_attr(leading ? "index_put" : "ops.aten.index_put.default");
            step.args = {value_arg(in(0)), list_of(std::move(indices), leading),
                         value_arg(in(1)), bool_constant(a.accumulate)};
            break;
          }
          default:
            unsupported(n, node, "unknown index prim");
        }
        break;
      case Family::Factory:
        if (node.prim == Prim::Full) {
          step.callable = torch_attr("full");
          step.args = {ints_constant(a.sizes), scalar_constant(a.value)};
        } else {
          const int64_t start = a.start.value_or(0);
          const int64_t length = a.sizes.empty() ? 0 : a.sizes[0];
          step.callable = torch_attr("arange");
          step.args = {int_constant(start), int_constant(start + length * a.step), int_constant(a.step)};
        }
        kwargs.emplace_back("dtype", dtype_constant(out.dtype));
        kwargs.emplace_back("device", device_constant(a.device_type, a.device_index));
        break;
      case Family::Random:
        if (node.prim == Prim::Bernoulli) {
          step.callable = torch_attr("bernoulli");
          step.args = {value_arg(in(0))};
        } else {
          // torch.rand and torch.randn are empty().uniform_() and
          // empty().normal_(), so seeded results match theirs.
          step.callable = torch_attr("empty");
          step.args = {ints_constant(a.sizes)};
          kwargs.emplace_back("dtype", dtype_constant(out.dtype));
          kwargs.emplace_back("device", device_constant(a.device_type, a.device_index));
          step.then = torch_attr(node.prim == Prim::Uniform ? "Tensor.uniform_" : "Tensor.normal_");
          step.then_args = {number_constant(a.value.as_double()), number_constant(a.value2.as_double())};
        }
        break;
      case Family::Extern:
        if (!a.target) unsupported(n, node, "extern without a callable");
        step.callable = PyRef::borrow(a.target);
        step.args = a.extern_args;
        if (a.extern_kwargs.empty() && (a.extern_args.size() == 2 || a.extern_args.size() == 3) &&
            std::all_of(a.extern_args.begin(), a.extern_args.end(),
                        [](const Arg& arg) { return arg.kind == Arg::Kind::Node; }) &&
            a.target == torch_attr("nn.functional.linear").get()) {
          step.native = Native::Linear;  // Note [Native views]
          for (const Arg& arg : a.extern_args) step.native_inputs.push_back(arg.node);
        }
        if (std::optional<std::vector<int>> operands = index_key(g, a)) {
          step.native = Native::Index;  // Note [Native views]
          step.native_inputs = std::move(*operands);
        }
        if (std::optional<AttentionCall> call = attention_call(a)) {
          step.native = Native::Attention;  // Note [Native views]
          step.attention = *call;
          for (int i = 0; i < 4; ++i) {
            const Arg& arg = a.extern_args[i];
            step.native_inputs.push_back(arg.kind == Arg::Kind::Node ? arg.node : -1);
          }
        }
        if (a.extern_kwargs.empty() && (a.extern_args.size() == 2 || a.extern_args.size() == 3) && a.extern_args[0].kind == Arg::Kind::Node &&
            a.target == operator_setitem()) {
          step.fill = slice_key(a.extern_args[1], a.extern_args[2],
                                static_cast<int64_t>(g.value(a.extern_args[0].node).meta.sizes.size()));
          if (step.fill) {
            step.native = Native::Fill;
            step.fill_value = PyRef::borrow(a.extern_args[2].constant);
            step.native_inputs = {a.extern_args[0].node};
          }
        }
        for (const auto& [name, arg] : a.extern_kwargs) {
          step.args.push_back(arg);
        }
        step.positional = a.extern_args.size();
        if (!a.extern_kwargs.empty()) {
          step.kwnames = checked(PyTuple_New(static_cast<Py_ssize_t>(a.extern_kwargs.size())), "tuple");
          for (size_t i = 0; i < a.extern_kwargs.size(); ++i) {
            PyTuple_SET_ITEM(step.kwnames.get(), i,
                             checked(PyUnicode_InternFromString(a.extern_kwargs[i].first.c_str()), "str").release());
          }
        }
        continue;  // arguments and keywords are complete
    }
    step.positional = step.args.size();
    if (!kwargs.empty()) {
      step.kwnames = checked(PyTuple_New(static_cast<Py_ssize_t>(kwargs.size())), "tuple");
      for (size_t i = 0; i < kwargs.size(); ++i) {
        PyTuple_SET_ITEM(step.kwnames.get(), i, checked(PyUnicode_InternFromString(kwargs[i].first), "str").release());
        step.args.push_back(std::move(kwargs[i].second));
      }
    }
  }

  // Release each value after its last use; the output's values live to the end.
  const int value_count = static_cast<int>(g.values().size());
  std::vector<int> last_use(value_count, -1);
  auto note = [&](const Arg& arg, int user, auto&& self) -> void {
    if (arg.kind == Arg::Kind::Node) last_use.at(arg.node) = user;
    for (const Arg& item : arg.items) self(item, user, self);
  };
  for (int n = 0; n < node_count; ++n) {
    for (const Arg& arg : steps_[n].args) note(arg, n, note);
  }
  note(output_, node_count, note);
  for (int id : g.outputs()) last_use.at(id) = node_count;
  for (int id = 0; id < value_count; ++id) {
    const prims::PrimValue& v = g.value(id);
    if (last_use[id] == node_count) continue;
    if (last_use[id] < 0) {
      if (v.node < 0) {
        input_release_.push_back(id);
      } else {
        steps_[v.node].release_after.push_back(id);
      }
    } else {
      steps_[last_use[id]].release_after.push_back(id);
    }
  }
}

PrimExecutor::~PrimExecutor() = default;

void PrimExecutor::memoize_nodes(const std::vector<bool>& nodes) {
  memos_.resize(steps_.size());
  for (size_t n = 0; n < steps_.size() && n < nodes.size(); ++n) {
    if (!nodes[n]) continue;
    Step& step = steps_[n];
    step.memo_inputs.clear();
    auto collect = [&](const Arg& arg, auto&& self) -> void {
      if (arg.kind == Arg::Kind::Node) step.memo_inputs.push_back(arg.node);
      for (const Arg& item : arg.items) self(item, self);
    };
    for (const Arg& arg : step.args) collect(arg, collect);
    if (!step.memo_inputs.empty()) memos_[n] = std::make_unique<Memo>();
  }
}

PyObject* PrimExecutor::run_native(const Step& step, PyObject* const* values) {
  auto in = [&](size_t i) { return values[step.native_inputs[i]]; };
  switch (step.native) {
    case Native::View: return aten_view(in(0), *step.view);
    case Native::Matmul: return aten_matmul(in(0), in(1));
    case Native::Linear: return aten_linear(in(0), in(1), step.native_inputs.size() == 3 ? in(2) : nullptr);
    case Native::Fill: return aten_fill_slices(in(0), *step.fill, step.fill_value.get());
    case Native::IndexSelect: return aten_index_select(in(0), step.dim, in(1));
    case Native::Cat:
    case Native::Index: {
      const size_t first = step.native == Native::Index ? 1 : 0;  // an index's tensor, then its indices
      const size_t count = step.native_inputs.size() - first;
      SmallBuffer<16> parts(count);
      for (size_t i = 0; i < count; ++i) parts.data()[i] = in(first + i);
      return step.native == Native::Index ? aten_index(in(0), parts.data(), count)
                                          : aten_cat(parts.data(), count, step.dim);
    }
    case Native::Attention: {
      const int mask = step.native_inputs[3];
      return aten_attention(in(0), in(1), in(2), mask < 0 ? Py_None : values[mask], step.attention);
    }
    case Native::None: break;
  }
  PyErr_SetString(PyExc_RuntimeError, "kiln: a step without a native call");
  return nullptr;
}

PyObject* PrimExecutor::memoized(size_t step, PyObject* const* values) const {
  const Memo& memo = *memos_[step];
  const std::vector<int>& ids = steps_[step].memo_inputs;
  if (!memo.result || memo.inputs.size() != ids.size()) return nullptr;
  for (size_t i = 0; i < ids.size(); ++i) {
    PyObject* value = values[ids[i]];
    if (value != memo.inputs[i].get() || tensor_data(value) != memo.data[i] ||
        tensor_version(value) != memo.versions[i]) {
      return nullptr;
    }
  }
  Py_INCREF(memo.result.get());
  return memo.result.get();
}

void PrimExecutor::remember(size_t step, PyObject* const* values, PyObject* result) const {
  Memo& memo = *memos_[step];
  memo.result = PyRef();
  memo.inputs.clear();
  memo.data.clear();
  memo.versions.clear();
  for (int id : steps_[step].memo_inputs) {
    PyObject* value = values[id];
    if (!value || !is_parameter(value)) return;  // only parameters are kept
    memo.inputs.push_back(PyRef::borrow(value));
    memo.data.push_back(tensor_data(value));
    memo.versions.push_back(tensor_version(value));
  }
  memo.result = PyRef::borrow(result);
}

bool PrimExecutor::execute(PyObject* const* inputs, PyObject** values) const {
  const prims::PrimGraph& g = *graph_;
  const size_t value_count = g.values().size();
  const auto& input_ids = g.inputs();
  for (size_t i = 0; i < input_ids.size(); ++i) {
    Py_INCREF(inputs[i]);
    values[input_ids[i]] = inputs[i];
  }
  for (int id : input_release_) Py_CLEAR(values[id]);
  // Prim graphs carry autocast's casts as nodes (Note [Explicit autocast
  // casts]); torch ops they call must not cast again.
  const AutocastOff autocast_off;
  // An extern may switch grad mode; an op raising must not leak the switch.
  const bool grad_mode = grad_mode_enabled();
  auto fail = [&] {
    for (size_t i = 0; i < value_count; ++i) Py_CLEAR(values[i]);
    set_grad_mode(grad_mode);
    return false;
  };
  const bool profiled = log_enabled(LogChannel::perf);
  std::optional<RunProfile> profile;
  if (profiled) profile.emplace(steps_.size());
  const Stopwatch run_clock;
  for (size_t index = 0; index < steps_.size(); ++index) {
    const Step& step = steps_[index];
    std::optional<Stopwatch> step_clock;
    if (profiled) step_clock.emplace();
    PyObject* result = nullptr;
    const bool memo = index < memos_.size() && memos_[index];  // Note [Kernels of parameters]
    if (memo) result = memoized(index, values);
    bool handled = result != nullptr;  // a kept result, or a native call below
    if (!handled && step.native != Native::None) {
      bool native = true;  // Note [Native views]
      for (int id : step.native_inputs) native = native && (id < 0 || plain_tensor(values[id]));
      if (native) {
        result = run_native(step, values);
        handled = true;
      }
    }
    if (!handled) {
      const size_t arg_count = step.args.size();
      SmallBuffer<16> arg_buffer(arg_count);
      PyObject** call_args = arg_buffer.data();
      bool built = true;
      for (size_t i = 0; i < arg_count; ++i) {
        if (!(call_args[i] = materialize_arg(step.args[i], values))) built = false;
      }
      // No PY_VECTORCALL_ARGUMENTS_OFFSET: torch 2.11's callables misread
      // keyword arguments passed with it.
      result = built ? PyObject_Vectorcall(step.callable.get(), call_args, step.positional, step.kwnames.get())
                     : nullptr;
      for (size_t i = 0; i < arg_count; ++i) Py_XDECREF(call_args[i]);
      if (result && memo) remember(index, values, result);
    }
    if (result && step.then) {
      const size_t then_count = step.then_args.size() + 1;
      SmallBuffer<8> then_buffer(then_count);
      PyObject** then_args = then_buffer.data();
      then_args[0] = result;
      for (size_t i = 1; i < then_count; ++i) then_args[i] = step.then_args[i - 1].constant;
      PyObject* second = PyObject_Vectorcall(step.then.get(), then_args, then_count, nullptr);
      Py_DECREF(result);
      result = second;
    }
    if (!result) return fail();
    if (step.unit_dim_strides && plain_tensor(result)) {  // Note [Strides of size-1 dims]
      PyObject* viewed = aten_unit_dim_strides(result, *step.unit_dim_strides);
      Py_DECREF(result);
      if (!(result = viewed)) return fail();
    }
    if (step.outputs.size() == 1) {
      values[step.outputs[0]] = result;
    } else if (!step.outputs.empty()) {
      PyObject* items = PySequence_Fast(result, "a multi-output prim must return a sequence");
      Py_DECREF(result);
      if (!items) return fail();
      if (PySequence_Fast_GET_SIZE(items) != static_cast<Py_ssize_t>(step.outputs.size())) {
        PyErr_Format(PyExc_RuntimeError, "kiln prim executor: an op returned %zd values, expected %zu",
                     PySequence_Fast_GET_SIZE(items), step.outputs.size());
        Py_DECREF(items);
        return fail();
      }
      for (size_t i = 0; i < step.outputs.size(); ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(items, i);
        Py_INCREF(item);
        values[step.outputs[i]] = item;
      }
      Py_DECREF(items);
    } else {
      Py_DECREF(result);
    }
    for (int dead : step.release_after) Py_CLEAR(values[dead]);
    if (profiled) profile->add(step.label, step_clock->ms());
  }
  if (profiled) KILN_LOG(perf, profile->summary(run_clock.ms()));
  return true;
}

PyObject* PrimExecutor::run(PyObject* const* inputs) const {
  const size_t value_count = graph_->values().size();
  SmallBuffer<64> buffer(value_count);
  PyObject** values = buffer.data();
  if (!execute(inputs, values)) return nullptr;
  PyObject* output = materialize_arg(output_, values);
  for (size_t i = 0; i < value_count; ++i) Py_CLEAR(values[i]);
  return output;
}

bool PrimExecutor::run_values(PyObject* const* inputs, PyObject** outputs) const {
  const size_t value_count = graph_->values().size();
  SmallBuffer<64> buffer(value_count);
  PyObject** values = buffer.data();
  if (!execute(inputs, values)) return false;
  const auto& ids = graph_->outputs();
  for (size_t i = 0; i < ids.size(); ++i) {
    Py_INCREF(values[ids[i]]);
    outputs[i] = values[ids[i]];
  }
  for (size_t i = 0; i < value_count; ++i) Py_CLEAR(values[i]);
  return true;
}

}  // namespace kiln::runtime
