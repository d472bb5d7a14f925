// Methods of Python constants (str.format, "-".join, .upper(), ...): they
// run no user code, so with constant arguments they are evaluated while
// tracing and fold to constants. A tensor among the arguments (formatting
// its values) stops the trace with a clean graph break.
#include <cstring>

#include "tracer/frame_tracer.h"

namespace kiln::tracer {
namespace {

// str methods that only compute a new value from their arguments.
constexpr const char* kStrMethods[] = {
    "format", "join", "upper", "lower", "strip", "lstrip", "rstrip", "split", "rsplit", "replace",
    "startswith", "endswith", "zfill", "ljust", "rjust", "center", "count", "find", "rfind", "title",
    "capitalize", "removeprefix", "removesuffix", "isdigit", "isalpha", "isalnum", "isspace",
    "islower", "isupper", "partition", "rpartition", "casefold", "swapcase", "splitlines", "__format__"};

}  // namespace

bool is_constant_method(const ValuePtr& base, const std::string& name) {
  if (!base->is(ValueKind::Constant)) return false;
  if (PyObject_TypeCheck(base->obj.get(), &PyDictProxy_Type)) {
    // A read-only mapping a constant holds (a Signature's parameters).
    return name == "keys" || name == "values" || name == "items" || name == "get" || name == "__contains__";
  }
  if (!PyUnicode_Check(base->obj.get())) return false;
  for (const char* allowed : kStrMethods) {
    if (name == allowed) return true;
  }
  return false;
}

ValuePtr FrameTracer::call_constant_method(const ValuePtr& method, const std::vector<ValuePtr>& args,
                                           const KwArgs& kwargs) {
  const std::string what = std::string(Py_TYPE(method->self->obj.get())->tp_name) + "." + method->name + "()";
  PyRef call_args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef arg = constant_to_python(args[i]);
    if (!arg) abort_trace(BreakCode::UnsupportedValue, what + " of " + describe_value(*args[i]));
    PyTuple_SET_ITEM(call_args.get(), i, arg.release());
  }
  PyRef call_kwargs = PyRef::steal(PyDict_New());
  for (const auto& [key, value] : kwargs) {
    PyRef arg = constant_to_python(value);
    if (!arg) abort_trace(BreakCode::UnsupportedValue, what + " of " + describe_value(*value));
    PyDict_SetItemString(call_kwargs.get(), key.c_str(), arg.get());
  }
  PyRef bound = PyRef::steal(PyObject_GetAttrString(method->self->obj.get(), method->name.c_str()));
  PyRef result = bound ? PyRef::steal(PyObject_Call(bound.get(), call_args.get(), call_kwargs.get())) : PyRef();
  if (!result) abort_trace(BreakCode::PythonException, what + " raised " + take_python_error());
  ValuePtr wrapped = state_.wrap_unguarded(result.get());
  // A view of a read-only constant mapping is as fixed as the mapping.
  if (!wrapped->is(ValueKind::Constant) && !PyUnicode_Check(method->self->obj.get())) wrapped = make_constant(result);
  return wrapped;
}

}  // namespace kiln::tracer
