// Imports inside traced code (IMPORT_NAME, IMPORT_FROM). See Note [Imports].
#include "stdlib/torch_callables.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {
namespace {

// Note [Imports]
// Library code imports inside functions (`from ..utils import x`, `import
// math`), often on every call. An import of a module that sys.modules
// already holds runs no module code: it looks the module up, and for
// `from m import n` reads an attribute (or an already loaded submodule). The
// trace does the same lookups at trace time. Which module object a dotted
// name denotes is assumed fixed for the life of the process, as torch's
// namespace is; names read from a module's globals are guarded like the
// globals of an inlined function (GlobalIn sources on the module's dict).
// Importing a module not loaded yet runs its code: that is a graph break,
// and CPython performs the import between graphs.

PyObject* sys_modules_get(const std::string& name) {
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  PyObject* module = key ? PyDict_GetItemWithError(modules, key.get()) : nullptr;
  if (!module) PyErr_Clear();
  return module == Py_None ? nullptr : module;  // None marks a failed import
}

// The package a relative import in code with these globals starts from,
// as importlib computes it (__package__, else __spec__.parent, else
// __name__ minus its last part unless __path__ makes it a package).
std::string importing_package(PyObject* globals) {
  PyObject* package = PyDict_GetItemString(globals, "__package__");
  if (package && PyUnicode_Check(package)) return PyUnicode_AsUTF8(package);
  PyObject* spec = PyDict_GetItemString(globals, "__spec__");
  if (spec && spec != Py_None) {
    PyRef parent = PyRef::steal(PyObject_GetAttrString(spec, "parent"));
    if (parent && PyUnicode_Check(parent.get())) return PyUnicode_AsUTF8(parent.get());
    PyErr_Clear();
  }
  PyObject* name = PyDict_GetItemString(globals, "__name__");
  if (!name || !PyUnicode_Check(name)) return "";
  std::string module = PyUnicode_AsUTF8(name);
  if (PyDict_GetItemString(globals, "__path__")) return module;
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? "" : module.substr(0, dot);
}

}  // namespace

ValuePtr FrameTracer::import_name(PyObject* name, const ValuePtr& level, const ValuePtr& fromlist) {
  // The level is an int constant; the name list None or a tuple of names.
  const bool names_known = fromlist->is(ValueKind::Constant) || fromlist->is(ValueKind::Tuple);
  if (!level->is(ValueKind::Constant) || !PyLong_Check(level->obj.get()) || !names_known) {
    abort_trace(BreakCode::UnsupportedCall, "import with a non-constant level or name list");
  }
  const long depth = PyLong_AsLong(level->obj.get());
  std::string absolute = PyUnicode_AsUTF8(name);
  if (depth > 0) {
    // `from ..a import b`: `depth` dots, resolved against the package.
    std::string base = importing_package(globals_);
    for (long k = 1; k < depth; ++k) {
      const size_t dot = base.rfind('.');
      if (dot == std::string::npos) {
        abort_trace(BreakCode::PythonException, "ImportError: attempted relative import beyond top-level package");
      }
      base.resize(dot);
    }
    if (base.empty()) abort_trace(BreakCode::PythonException, "ImportError: attempted relative import with no known parent package");
    absolute = absolute.empty() ? base : base + "." + absolute;
  }
  PyObject* module = sys_modules_get(absolute);
  if (!module) abort_trace(BreakCode::UnsupportedCall, "import of " + absolute + ", which is not loaded yet");
  const bool has_fromlist = fromlist->is(ValueKind::Tuple) ? !fromlist->items.empty()
                                                           : PyObject_IsTrue(fromlist->obj.get()) == 1;
  PyErr_Clear();
  if (!has_fromlist && depth == 0) {
    // `import a.b.c` binds the top-level package `a`.
    const size_t dot = absolute.find('.');
    if (dot != std::string::npos) {
      module = sys_modules_get(absolute.substr(0, dot));
      if (!module) abort_trace(BreakCode::UnsupportedCall, "import of " + absolute + ", whose package is not loaded");
    }
  }
  return state_.wrap_unguarded(module);
}

ValuePtr FrameTracer::import_from(const ValuePtr& module, PyObject* name) {
  if (!module->is(ValueKind::PyModule)) {
    abort_trace(BreakCode::UnsupportedCall, "from-import out of " + describe_value(*module));
  }
  PyObject* dict = PyModule_GetDict(module->obj.get());  // borrowed
  PyObject* value = dict ? PyDict_GetItemWithError(dict, name) : nullptr;
  if (value) {
    if (stdlib::is_fixed_module(module->obj.get())) return state_.wrap_unguarded(value);
    return state_.wrap(value, state_.sources().global_in(dict, name));
  }
  PyErr_Clear();
  // A submodule that is loaded but not (yet) an attribute of its package.
  PyObject* package = PyModule_GetNameObject(module->obj.get());
  if (package) {
    std::string full = std::string(PyUnicode_AsUTF8(package)) + "." + PyUnicode_AsUTF8(name);
    Py_DECREF(package);
    if (PyObject* submodule = sys_modules_get(full)) return state_.wrap_unguarded(submodule);
  }
  PyErr_Clear();
  abort_trace(BreakCode::UnsupportedCall,
              "from-import of " + std::string(PyUnicode_AsUTF8(name)) + ", which its module does not hold yet");
}

}  // namespace kiln::tracer
