// Reads of environment variables: os.environ.get(k[, d]), os.environ[k],
// k in os.environ and os.getenv(k[, d]). See Note [Environment variables].
#include "base/environ.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

// Note [Environment variables]
// Library code reads feature switches from the environment inside forward
// (transformers' sdpa_attention reads TRANSFORMERS_SDPA_FORCE_GQA on every
// call). os.environ is a Python mapping over a dict of encoded bytes, and
// tracing its methods would guard every variable of the process. Instead a
// read of one variable is evaluated on the real os.environ and guarded by
// an EnvVar guard on that name alone (its value, or that it is unset), so a
// later change of that variable retraces and no other does. Writes to
// os.environ stay unsupported (a graph break).
bool is_environ(const ValuePtr& value) {
  PyObject* environ = base::environ_object();
  return environ && value->is(ValueKind::Object) && value->obj.get() == environ;
}

bool is_getenv(PyObject* callable) {
  PyObject* getenv = base::getenv_function();
  return getenv && callable == getenv;
}

ValuePtr FrameTracer::environ_method(const ValuePtr& environ, PyObject* name) {
  const std::string attr = PyUnicode_AsUTF8(name);
  if (attr != "get" && attr != "__getitem__" && attr != "__contains__") return nullptr;
  auto method = std::make_shared<Value>();
  method->kind = ValueKind::ContainerMethod;
  method->self = environ;
  method->name = attr;
  return method;
}

ValuePtr FrameTracer::read_environ(const std::string& op, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  ValuePtr fallback;
  for (const auto& [key, value] : kwargs) {
    if (key != "default" || op != "get") abort_trace(BreakCode::UnsupportedCall, "os.environ." + op + "() with " + key + "=");
    fallback = value;
  }
  const size_t most = op == "get" ? 2 : 1;
  if (args.empty() || args.size() > most || (fallback && args.size() > 1)) {
    abort_trace(BreakCode::UnsupportedCall, "os.environ." + op + "() with " + std::to_string(args.size()) + " arguments");
  }
  if (args.size() == 2) fallback = args[1];
  const ValuePtr& key = args[0];
  if (!key->is(ValueKind::Constant) || !PyUnicode_Check(key->obj.get())) {
    abort_trace(BreakCode::UnsupportedCall, "os.environ read with key " + describe_value(*key));
  }
  PyRef value = PyRef::steal(base::environ_value(key->obj.get()));
  state_.guards().add_env_var(key->obj.get(), value.get());
  if (op == "__contains__") return state_.wrap_unguarded(value ? Py_True : Py_False);
  if (value) return state_.wrap_unguarded(value.get());
  if (op == "get") return fallback ? fallback : state_.wrap_unguarded(Py_None);
  PyErr_SetObject(PyExc_KeyError, key->obj.get());
  raise_python_error();
}

}  // namespace kiln::tracer
