// Python exceptions as kiln::PythonError: type, message and traceback text.
#include "interpreter/embed/embed_state.h"
#include "base/py_ref.h"

namespace kiln {

PythonError::PythonError(const std::string& context, std::string type, std::string message,
                         std::string traceback)
    : Error(context + ": " + type + (message.empty() ? "" : ": " + message)),
      type_(std::move(type)),
      message_(std::move(message)),
      traceback_(std::move(traceback)) {}

namespace embed {
namespace {

using base::PyRef;

// The UTF-8 text of a str object, or `fallback` (clearing any error).
std::string text_of(PyObject* str, const char* fallback) {
  const char* utf8 = str != nullptr ? PyUnicode_AsUTF8(str) : nullptr;
  if (utf8 == nullptr) {
    PyErr_Clear();
    return fallback;
  }
  return utf8;
}

// "ValueError" for builtins, "package.module.Class" for the rest.
std::string type_name(PyObject* type) {
  PyRef module = PyRef::steal(PyObject_GetAttrString(type, "__module__"));
  PyRef qualname = PyRef::steal(PyObject_GetAttrString(type, "__qualname__"));
  std::string name = text_of(qualname.get(), reinterpret_cast<PyTypeObject*>(type)->tp_name);
  std::string module_name = text_of(module.get(), "builtins");
  return module_name == "builtins" ? name : module_name + "." + name;
}

// traceback.format_exception's lines joined, or "" when formatting fails.
std::string format_traceback(PyObject* type, PyObject* value, PyObject* traceback) {
  PyRef module = PyRef::steal(PyImport_ImportModule("traceback"));
  PyRef lines = module ? PyRef::steal(PyObject_CallMethod(module.get(), "format_exception", "OOO",
                                                          type, value ? value : Py_None,
                                                          traceback ? traceback : Py_None))
                       : PyRef();
  PyRef empty = PyRef::steal(PyUnicode_FromString(""));
  PyRef joined = lines && empty ? PyRef::steal(PyUnicode_Join(empty.get(), lines.get())) : PyRef();
  return text_of(joined.get(), "");
}

}  // namespace

PythonError take_python_error(const std::string& context) {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);  // new references (or null)
  if (type == nullptr) return PythonError(context, "SystemError", "no Python error was set", "");
  PyErr_NormalizeException(&type, &value, &traceback);
  PyRef owned_type = PyRef::steal(type), owned_value = PyRef::steal(value),
        owned_traceback = PyRef::steal(traceback);
  std::string name = type_name(type);
  PyRef message = value != nullptr ? PyRef::steal(PyObject_Str(value)) : PyRef();
  std::string message_text = text_of(message.get(), "<unprintable message>");
  std::string traceback_text = format_traceback(type, value, traceback);
  return PythonError(context, std::move(name), std::move(message_text), std::move(traceback_text));
}

}  // namespace embed
}  // namespace kiln
