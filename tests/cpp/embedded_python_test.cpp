// The test harness itself: every other C++ test assumes that test_main.cpp
// started the configured python with torch importable.

#include <Python.h>
#include <gtest/gtest.h>

#include <string>

namespace {

// Evaluates a Python expression in a fresh namespace and returns str() of it,
// or "<error>" after printing the traceback.
std::string eval_str(const char* expression) {
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* value = PyRun_String(expression, Py_eval_input, globals, globals);
  Py_DECREF(globals);
  if (value == nullptr) {
    PyErr_Print();
    return "<error>";
  }
  PyObject* text = PyObject_Str(value);
  std::string result = PyUnicode_AsUTF8(text);
  Py_DECREF(text);
  Py_DECREF(value);
  return result;
}

TEST(EmbeddedPython, RunsTheConfiguredInterpreter) {
  EXPECT_EQ(eval_str("__import__('sys').executable"), KILN_PYTHON_EXECUTABLE);
  EXPECT_EQ(eval_str("__import__('sys').version_info[:2] in ((3, 11), (3, 12))"), "True");
}

TEST(EmbeddedPython, TorchIsImported) {
  EXPECT_EQ(eval_str("'torch' in __import__('sys').modules"), "True");
  EXPECT_EQ(eval_str("__import__('torch').ones(2, 3).sum().item()"), "6.0");
}

}  // namespace
