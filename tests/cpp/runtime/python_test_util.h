// Small helpers shared by the C++ tests that work on live Python objects.
// test_main.cpp has started the interpreter, imported torch and holds the
// GIL; every helper here assumes that.
#pragma once

#include <Python.h>
#include <gtest/gtest.h>

#include <string>

#include "base/py_ref.h"

namespace kiln::test {

using base::PyRef;

// Takes the pending Python exception as "Type: message" and clears it;
// "<no Python error>" when none is set.
inline std::string take_error() {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  if (type == nullptr) return "<no Python error>";
  PyErr_NormalizeException(&type, &value, &traceback);
  std::string text = reinterpret_cast<PyTypeObject*>(type)->tp_name;
  if (value != nullptr) {
    PyObject* message = PyObject_Str(value);
    const char* utf8 = message != nullptr ? PyUnicode_AsUTF8(message) : nullptr;
    text += std::string(": ") + (utf8 != nullptr ? utf8 : "<unprintable>");
    Py_XDECREF(message);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return text;
}

// The namespace eval() runs in: builtins plus torch, operator, types, weakref
// and sys. Created once and kept for the life of the interpreter.
inline PyObject* shared_namespace() {
  static PyObject* globals = [] {
    PyObject* dict = PyDict_New();
    PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins());
    PyObject* result =
        PyRun_String("import torch, operator, types, weakref, sys\n", Py_file_input, dict, dict);
    if (result == nullptr) ADD_FAILURE() << "cannot set up the test namespace: " << take_error();
    Py_XDECREF(result);
    return dict;
  }();
  return globals;
}

// Evaluates a Python expression in shared_namespace(); a failure is a test
// failure (and returns null).
inline PyRef eval(const std::string& expression) {
  PyObject* value =
      PyRun_String(expression.c_str(), Py_eval_input, shared_namespace(), shared_namespace());
  if (value == nullptr) ADD_FAILURE() << "Python `" << expression << "` failed: " << take_error();
  return PyRef::steal(value);
}

// Runs `source` as a fresh module (named `module_name`, compiled with file
// name `filename`) and returns its globals dict.
inline PyRef exec_module(const std::string& source, const std::string& filename = "<kiln_test>",
                         const std::string& module_name = "kiln_test_module") {
  PyRef globals = PyRef::steal(PyDict_New());
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyRef name = PyRef::steal(PyUnicode_FromString(module_name.c_str()));
  PyDict_SetItemString(globals.get(), "__name__", name.get());
  PyRef code = PyRef::steal(Py_CompileString(source.c_str(), filename.c_str(), Py_file_input));
  if (!code) {
    ADD_FAILURE() << "cannot compile:\n" << source << "\n" << take_error();
    return globals;
  }
  PyRef result = PyRef::steal(PyEval_EvalCode(code.get(), globals.get(), globals.get()));
  if (!result) ADD_FAILURE() << "module failed:\n" << source << "\n" << take_error();
  return globals;
}

// Looks a name up in a dict returned by exec_module (new reference).
inline PyRef item(const PyRef& dict, const char* name) {
  PyObject* value = PyDict_GetItemString(dict.get(), name);
  if (value == nullptr) ADD_FAILURE() << "no '" << name << "' in the namespace";
  return PyRef::borrow(value);
}

inline std::string str_of(PyObject* obj) {
  PyRef text = PyRef::steal(PyObject_Str(obj));
  if (!text) return "<str failed: " + take_error() + ">";
  return PyUnicode_AsUTF8(text.get());
}

inline std::string repr_of(PyObject* obj) {
  PyRef text = PyRef::steal(PyObject_Repr(obj));
  if (!text) return "<repr failed: " + take_error() + ">";
  return PyUnicode_AsUTF8(text.get());
}

// torch.equal(a, b) (false, with a test failure, when it raises).
inline bool torch_equal(PyObject* a, PyObject* b) {
  static PyObject* equal = PyObject_GetAttrString(eval("torch").get(), "equal");
  PyRef result = PyRef::steal(PyObject_CallFunctionObjArgs(equal, a, b, nullptr));
  if (!result) {
    ADD_FAILURE() << "torch.equal raised: " << take_error();
    return false;
  }
  return result.get() == Py_True;
}

inline PyRef py_str(const char* text) { return PyRef::steal(PyUnicode_FromString(text)); }
inline PyRef py_int(long value) { return PyRef::steal(PyLong_FromLong(value)); }

// Sets torch's grad mode for a scope and restores the previous one.
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) {
    PyRef previous = eval("torch.is_grad_enabled()");
    previous_ = previous.get() == Py_True;
    set(enabled);
  }
  ~GradModeScope() { set(previous_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  static void set(bool enabled) {
    eval(enabled ? "torch._C._set_grad_enabled(True)" : "torch._C._set_grad_enabled(False)");
  }
  bool previous_ = true;
};

}  // namespace kiln::test
