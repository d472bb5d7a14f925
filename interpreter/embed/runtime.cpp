// kiln::Runtime and kiln::Module: starting or attaching to CPython, and
// importing the host's model code.
#include <atomic>
#include <exception>
#include <map>
#include <mutex>

#include "interpreter/embed/embed_state.h"
#include "interpreter/embedded_python.h"
#include "base/py_ref.h"

#ifndef KILN_PYTHON_EXECUTABLE
#error "KILN_PYTHON_EXECUTABLE must name the python the build was configured with"
#endif
#ifndef KILN_PYTHON_PACKAGE_DIR
#error "KILN_PYTHON_PACKAGE_DIR must name the directory that holds the kiln package"
#endif

namespace kiln {
namespace embed {
namespace {

using base::PyRef;

// One interpreter per process: start() hands out the live runtime again,
// and refuses to start after an owned one was finalized (torch cannot be
// initialized twice).
std::mutex g_mutex;
std::weak_ptr<RuntimeState> g_runtime;
std::atomic<bool> g_finalized = false;

// Puts `dir` first on sys.path (where imports look first).
bool prepend_to_sys_path(const std::string& dir) {
  PyObject* path = PySys_GetObject("path");  // borrowed
  PyRef entry = PyRef::steal(PyUnicode_FromString(dir.c_str()));
  return path != nullptr && entry && PyList_Insert(path, 0, entry.get()) == 0;
}

// Imports torch and kiln._embed into state->helpers (the GIL held).
void import_helpers(RuntimeState* state) {
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  if (!torch) throw take_python_error("importing torch");
  state->helpers = PyImport_ImportModule("kiln._embed");
  if (state->helpers == nullptr) throw take_python_error("importing kiln");
}

// Attaches to the host's interpreter; g_mutex held.
std::shared_ptr<RuntimeState> attach_locked() {
  if (!Py_IsInitialized()) {
    throw Error("kiln::Runtime::attach: no Python interpreter runs in this process; "
                "use kiln::Runtime::start");
  }
  auto state = std::make_shared<RuntimeState>();
  GilScope gil;
  // The kiln package built with this library comes first (another checkout's
  // on sys.path, say through a .pth file, would load another libkiln), unless
  // the host already imported a kiln: then that one is used.
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  const int imported = PyDict_Contains(modules, PyRef::steal(PyUnicode_FromString("kiln")).get());
  if (imported < 0 || (imported == 0 && !prepend_to_sys_path(KILN_PYTHON_PACKAGE_DIR))) {
    throw take_python_error("setting sys.path");
  }
  import_helpers(state.get());
  g_runtime = state;
  return state;
}

}  // namespace

void release_reference(PyObject* obj) {
  if (obj == nullptr || !Py_IsInitialized()) return;
  GilScope gil;
  Py_DECREF(obj);
}

PyObject* call_helper(const RuntimeState& runtime, const char* name,
                      std::initializer_list<PyObject*> args) {
  PyRef function = PyRef::steal(PyObject_GetAttrString(runtime.helpers, name));
  if (!function) return nullptr;
  return PyObject_Vectorcall(function.get(), args.begin(), args.size(), nullptr);
}

RuntimeState::~RuntimeState() {
  if (!owns_interpreter) {
    release_reference(helpers);
    return;
  }
  // Finalizing takes back the starting thread's state, so the last handle
  // should die on the thread that started the runtime, after the others
  // stopped calling.
  PyEval_RestoreThread(saved_thread);
  Py_XDECREF(helpers);
  Py_FinalizeEx();
  g_finalized = true;
}

}  // namespace embed

using base::PyRef;
using embed::GilScope;
using embed::RuntimeState;

Runtime Runtime::start(const RuntimeOptions& options) {
  std::lock_guard<std::mutex> lock(embed::g_mutex);
  if (auto live = embed::g_runtime.lock()) return Runtime(live);
  if (Py_IsInitialized()) return Runtime(embed::attach_locked());
  if (embed::g_finalized) {
    throw Error("kiln::Runtime::start: Python was already started and finalized in this process, "
                "and torch cannot be initialized twice; keep one Runtime for the process's life");
  }
  const std::string executable =
      options.python_executable.empty() ? KILN_PYTHON_EXECUTABLE : options.python_executable;
  std::string error;
  if (!interpreter::start_embedded_python(executable.c_str(), options.program_name.c_str(), &error)) {
    throw Error("kiln::Runtime::start: " + error);
  }
  // From here the state owns the interpreter: a failure below finalizes it
  // as the state is destroyed, so the GIL is released before throwing.
  auto state = std::make_shared<RuntimeState>();
  state->owns_interpreter = true;
  std::exception_ptr failure;
  try {
    bool ok = embed::prepend_to_sys_path(KILN_PYTHON_PACKAGE_DIR);
    for (auto it = options.sys_path.rbegin(); ok && it != options.sys_path.rend(); ++it) {
      ok = embed::prepend_to_sys_path(*it);
    }
    if (!ok) throw embed::take_python_error("setting sys.path");
    embed::import_helpers(state.get());
  } catch (const PythonError&) {
    failure = std::current_exception();
  }
  state->saved_thread = PyEval_SaveThread();
  if (failure) {
    state.reset();  // finalizes
    std::rethrow_exception(failure);
  }
  embed::g_runtime = state;
  return Runtime(state);
}

Runtime Runtime::attach() {
  std::lock_guard<std::mutex> lock(embed::g_mutex);
  if (auto live = embed::g_runtime.lock()) return Runtime(live);
  return Runtime(embed::attach_locked());
}

namespace {

// The state of a Module handle for `module` (a new reference, or null with
// an error set).
std::shared_ptr<const embed::ModuleState> module_state(const std::shared_ptr<RuntimeState>& runtime, PyObject* module,
                   const std::string& context) {
  if (module == nullptr) throw embed::take_python_error(context);
  auto state = std::make_shared<embed::ModuleState>();
  state->runtime = runtime;
  state->module = module;
  PyRef name = PyRef::steal(PyObject_GetAttrString(module, "__name__"));
  const char* utf8 = name ? PyUnicode_AsUTF8(name.get()) : nullptr;
  if (utf8 == nullptr) throw embed::take_python_error(context);
  state->name = utf8;
  return state;
}

}  // namespace

Module Runtime::import_module(const std::string& name) const {
  GilScope gil;
  return Module(module_state(state_, PyImport_ImportModule(name.c_str()), "importing module " + name));
}

Module Runtime::load_file(const std::string& path) const {
  GilScope gil;
  PyRef py_path = PyRef::steal(PyUnicode_DecodeFSDefault(path.c_str()));
  if (!py_path) throw embed::take_python_error("loading " + path);
  return Module(module_state(state_, embed::call_helper(*state_, "load_file", {py_path.get()}),
                            "loading " + path));
}

bool Runtime::owns_interpreter() const { return state_->owns_interpreter; }

std::map<std::string, int64_t> Runtime::stats() const {
  GilScope gil;
  PyRef counters = PyRef::steal(embed::call_helper(*state_, "stats", {}));
  if (!counters) throw embed::take_python_error("reading kiln.stats()");
  std::map<std::string, int64_t> result;
  PyObject *key, *value;  // borrowed
  Py_ssize_t position = 0;
  while (PyDict_Next(counters.get(), &position, &key, &value)) {
    const char* name = PyUnicode_AsUTF8(key);
    const long long count = PyLong_AsLongLong(value);
    if (name == nullptr || PyErr_Occurred()) throw embed::take_python_error("reading kiln.stats()");
    result[name] = count;
  }
  return result;
}

const std::string& Module::name() const { return state_->name; }

Function Module::function(const std::string& dotted_name) const {
  const std::string full_name = state_->name + "." + dotted_name;
  GilScope gil;
  PyRef name = PyRef::steal(PyUnicode_FromString(dotted_name.c_str()));
  PyRef callable = name ? PyRef::steal(embed::call_helper(*state_->runtime, "resolve",
                                                          {state_->module, name.get()}))
                        : PyRef();
  if (!callable) throw embed::take_python_error("looking up " + full_name);
  auto state = std::make_shared<embed::FunctionState>();
  state->runtime = state_->runtime;
  state->name = full_name;
  PyRef arity = PyRef::steal(embed::call_helper(*state_->runtime, "positional_arity", {callable.get()}));
  if (!arity) throw embed::take_python_error("reading the signature of " + full_name);
  if (arity.get() != Py_None &&
      !PyArg_ParseTuple(arity.get(), "ii", &state->fewest_inputs, &state->most_inputs)) {
    throw embed::take_python_error("reading the signature of " + full_name);
  }
  state->callable = callable.release();
  return Function(std::move(state));
}

}  // namespace kiln
