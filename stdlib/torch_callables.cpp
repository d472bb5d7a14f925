#include "stdlib/torch_callables.h"

#include <cstring>
#include <string_view>
#include <unordered_set>

#include "base/torch_api.h"

namespace kiln::stdlib {

using base::TorchApi;
using base::torch_api;
namespace {

// Torch functions that change global state or talk to the outside world.
const std::unordered_set<std::string_view>& refused_torch_functions() {
  static const std::unordered_set<std::string_view> names = {
      "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state",
      "set_grad_enabled", "set_default_dtype", "set_default_tensor_type",
      "save", "load", "set_printoptions", "use_deterministic_algorithms",
      "compile", "no_grad", "enable_grad", "inference_mode", "autocast",
      "equal", "allclose", "is_nonzero", "set_num_threads", "set_anomaly_enabled",
      "is_inference_mode_enabled"};
  return names;
}

// Torch functions that create tensors from sizes or data alone.
const std::unordered_set<std::string_view>& factory_functions() {
  static const std::unordered_set<std::string_view> names = {
      "zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace",
      "eye", "rand", "randn", "randint", "randperm", "tensor", "as_tensor",
      "empty_strided", "scalar_tensor", "normal", "tril_indices", "triu_indices"};
  return names;
}

// Note [Composites kiln traces through]
// torch.nn.functional functions written in Python over ops kiln decomposes,
// for which kiln has no rule of its own. Kept as one extern call, nothing
// around them fuses and their gradient reruns the whole function in the
// backward (Note [Extern gradients]): multi_head_attention_forward is a
// transformer layer's projections and attention (torchvision's ViT). They
// are inlined as plain Python instead, as torch.compile traces them, and so
// are the private Python helpers of torch and torch.nn.functional they call
// (_in_projection_packed, _canonical_mask, torch._assert): no helper is an
// op of its own.
const std::unordered_set<std::string_view>& traced_composites() {
  static const std::unordered_set<std::string_view> names = {"multi_head_attention_forward"};
  return names;
}

std::string module_of(PyObject* callable) {
  PyObject* module = PyObject_GetAttrString(callable, "__module__");
  if (!module) {
    PyErr_Clear();
    return "";
  }
  std::string out = PyUnicode_Check(module) ? PyUnicode_AsUTF8(module) : "";
  Py_DECREF(module);
  return out;
}

std::string name_of(PyObject* callable) {
  PyObject* name = PyObject_GetAttrString(callable, "__name__");
  if (!name) {
    PyErr_Clear();
    return "";
  }
  std::string out = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : "";
  Py_DECREF(name);
  return out;
}

bool starts_with(const std::string& text, std::string_view prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

bool is_attr_of(PyObject* owner, const std::string& name, PyObject* callable) {
  PyObject* found = PyObject_GetAttrString(owner, name.c_str());
  if (!found) {
    PyErr_Clear();
    return false;
  }
  bool same = found == callable;
  Py_DECREF(found);
  return same;
}

}  // namespace

// Note [Callables allowed in the graph]
// kiln.allow_in_graph(fn) makes a call of fn one graph node, as
// torch.compile's allow_in_graph does: the tracer runs fn on meta fakes
// for the result's metadata (fn must accept meta tensors), the graph
// calls it at run time (an extern: kiln fuses around it), and its gradient
// is torch's through fn (Note [Extern gradients]). The set holds a
// reference to each callable for the process.
static std::unordered_set<PyObject*>& allowed_in_graph() {
  static auto* allowed = new std::unordered_set<PyObject*>();
  return *allowed;
}

void allow_in_graph(PyObject* callable) {
  if (allowed_in_graph().insert(callable).second) Py_INCREF(callable);
}

CallableInfo classify_callable(PyObject* callable) {
  const TorchApi* api = torch_api();
  CallableInfo info;
  if (!api) {
    PyErr_Clear();
    return info;
  }
  const std::string name = name_of(callable);
  if (allowed_in_graph().count(callable)) {
    const std::string module = module_of(callable);
    info.kind = CallableClass::GraphOp;
    info.name = module.empty() ? name : module + "." + name;
    return info;
  }
  // Methods of torch.Tensor used unbound, e.g. torch.Tensor.add.
  if (PyObject_TypeCheck(callable, &PyMethodDescr_Type)) {
    PyObject* owner = reinterpret_cast<PyObject*>(
        reinterpret_cast<PyDescrObject*>(callable)->d_type);
    if (PyObject_IsSubclass(api->tensor_type, owner) == 1) {
      info.kind = CallableClass::GraphOp;
      info.name = "Tensor." + name;
    }
    PyErr_Clear();
    return info;
  }
  const std::string module = module_of(callable);
  if (module != "torch" && !starts_with(module, "torch.")) return info;
  // torch's decorator plumbing (`@torch.no_grad()` wraps a method in
  // torch.utils._contextlib's functions, which make a fresh context and
  // enter it): plain Python to inline, so the grad-mode block is traced.
  if (module == "torch.utils._contextlib") return info;
  if (module == "torch.nn.functional" && traced_composites().count(name)) return info;
  // torch.jit.annotate(List[Tensor], []) returns its value: plain Python to
  // inline (as a graph op its typing argument could not enter the graph).
  if (module == "torch.jit" && name == "annotate" && PyFunction_Check(callable)) return info;
  if ((module == "torch.nn.functional" || module == "torch") && starts_with(name, "_") && PyFunction_Check(callable)) {
    return info;
  }
  // Note [Compiler queries]: "is a compiler tracing this?" is answered yes
  // inside a kiln trace, as torch.compile answers it, so library code takes
  // the path it keeps for graph capture (no ContextVar, no logging, no
  // data-dependent checks). torch.compiler.is_dynamo_compiling() and
  // is_exporting() stay what they are: code under them may use Dynamo's
  // or export's own APIs.
  if (name == "is_compiling" &&
      (module == "torch.compiler" || module == "torch._utils" || module == "torch._dynamo.external_utils")) {
    info.kind = CallableClass::CompilerQuery;
    info.name = module + "." + name;
    return info;
  }
  // torchvision's ops and torch's modules record their first use for
  // torch's telemetry on every call; the record is once per process, so
  // calling it while tracing records it, and the graph needs no node (an
  // extern of it was a call into Python per step and per block).
  if (name == "_log_api_usage_once" && module == "torch._C") {
    info.kind = CallableClass::UsageLog;
    info.name = "torch._C._log_api_usage_once";
    return info;
  }
  // Note [Torch function queries]: has_torch_function(args) in torch's
  // Python functions (F.multi_head_attention_forward, ...) is asked of the
  // tracer (trace_calls.cpp), which answers for the traced values.
  if (module == "torch._C" && (name == "_has_torch_function" || name == "_has_torch_function_unary" ||
                               name == "_has_torch_function_variadic")) {
    info.kind = CallableClass::TorchFunctionQuery;
    info.name = "torch._C." + name;
    return info;
  }
  // Dynamo's generated code spells `with torch.autocast(...)` as a pair of
  // calls (an FX graph holds no with blocks); torch.compile(backend="kiln")
  // hands kiln such code, and its blocks are traced as the with statement's.
  if (module == "torch.amp.autocast_mode" && (name == "_enter_autocast" || name == "_exit_autocast")) {
    info.kind = name == "_enter_autocast" ? CallableClass::AutocastEnter : CallableClass::AutocastLeave;
    info.name = "torch.amp." + name;
    return info;
  }
  if (module == "torch.utils.checkpoint" && name == "checkpoint") {
    info.kind = CallableClass::Checkpoint;
    info.name = "torch.utils.checkpoint.checkpoint";
    return info;
  }
  if (name == "is_grad_enabled" && is_attr_of(api->torch, name, callable)) {
    info.kind = CallableClass::GradModeQuery;
    info.name = "torch.is_grad_enabled";
    return info;
  }
  if (refused_torch_functions().count(name)) {
    info.kind = CallableClass::Refused;
    info.name = "torch." + name;
    info.reason = "torch." + name + " changes or reads global state";
    return info;
  }
  if (is_attr_of(api->functional, name, callable)) {
    info.name = "F." + name;
  } else if (is_attr_of(api->torch, name, callable)) {
    info.name = "torch." + name;
  } else {
    info.name = module + "." + name;
  }
  const bool in_torch_namespace = starts_with(info.name, "torch.");
  info.kind = in_torch_namespace && factory_functions().count(name) ? CallableClass::Factory
                                                                     : CallableClass::GraphOp;
  return info;
}

TensorMethodClass classify_tensor_method(const std::string& name) {
  static const std::unordered_set<std::string_view> shape_queries = {
      "size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous",
      "element_size", "is_floating_point", "is_complex", "get_device"};
  static const std::unordered_set<std::string_view> data_dependent = {
      "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__",
      "__len__", "__iter__", "nonzero", "unique", "data_ptr", "any_", "__format__",
      "__repr__", "__str__"};
  static const std::unordered_set<std::string_view> refused = {
      "backward", "register_hook", "retain_grad", "storage", "untyped_storage",
      "share_memory_", "pin_memory", "record_stream", "set_", "resize_", "resize_as_",
      "requires_grad_", "detach_", "tolist",
      // Facts about storage and history that fake tensors do not mirror.
      "storage_offset", "is_set_to", "_is_view", "is_shared"};
  if (shape_queries.count(name)) return TensorMethodClass::ShapeQuery;
  if (data_dependent.count(name)) return TensorMethodClass::DataDependent;
  if (refused.count(name)) return TensorMethodClass::Refused;
  return TensorMethodClass::GraphOp;
}

TensorAttrClass classify_tensor_attribute(const std::string& name) {
  static const std::unordered_set<std::string_view> metadata = {
      "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_cpu", "is_meta",
      "is_sparse", "is_quantized", "layout"};
  static const std::unordered_set<std::string_view> views = {"T", "mT", "H", "mH", "real",
                                                             "imag"};
  // An operator's method spelled out, x.__eq__(0) (Dynamo's generated code
  // writes some so): the operator.
  static const std::unordered_set<std::string_view> operators = {
      "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__", "__imul__",
      "__truediv__", "__rtruediv__", "__itruediv__", "__floordiv__", "__rfloordiv__", "__ifloordiv__",
      "__mod__", "__rmod__", "__imod__", "__pow__", "__rpow__", "__ipow__", "__matmul__", "__rmatmul__",
      "__and__", "__rand__", "__iand__", "__or__", "__ror__", "__ior__", "__xor__", "__rxor__", "__ixor__",
      "__lshift__", "__rlshift__", "__ilshift__", "__rshift__", "__rrshift__", "__irshift__",
      "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__", "__pos__", "__abs__",
      "__invert__", "__getitem__"};
  if (metadata.count(name)) return TensorAttrClass::Metadata;
  if (views.count(name)) return TensorAttrClass::GraphOp;
  if (operators.count(name)) return TensorAttrClass::Method;
  // is_leaf and grad_fn describe autograd history, which fakes do not have.
  if (name == "grad" || name == "data" || name == "_version" || name == "grad_fn" ||
      name == "is_leaf" || name == "_base" || starts_with(name, "_")) {
    return TensorAttrClass::Refused;
  }
  return TensorAttrClass::Method;
}

bool is_fixed_module(PyObject* module) {
  if (!PyModule_Check(module)) return false;
  const char* name = PyModule_GetName(module);
  if (!name) {
    PyErr_Clear();
    return false;
  }
  return std::strcmp(name, "torch") == 0 || std::strncmp(name, "torch.", 6) == 0 ||
         std::strcmp(name, "math") == 0 || std::strcmp(name, "operator") == 0;
}

}  // namespace kiln::stdlib
