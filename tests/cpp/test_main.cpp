// main() of kiln_cpp_tests: the tests run inside an embedded CPython with
// torch imported, because kiln_core works on live interpreter objects (code
// objects, frames, tensors). Every other file under tests/cpp holds only
// TESTs; the tests run on this thread and hold the GIL.

#include <Python.h>
#include <gtest/gtest.h>

#include <cstdio>

#ifndef KILN_PYTHON_EXECUTABLE
#error "KILN_PYTHON_EXECUTABLE must name the python the build was configured with"
#endif

namespace {

// Starts the interpreter with the configured python's paths (sys.prefix,
// Debian's dist-packages, a venv's site-packages). Returns 0 on success.
int start_python(const char* program) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  // gtest owns the command line; Python must not parse --gtest_* options.
  config.parse_argv = 0;
  // Ctrl-C should kill the test binary, not raise KeyboardInterrupt in
  // whatever Python code a test happens to run.
  config.install_signal_handlers = 0;
  PyStatus status = PyConfig_SetBytesString(&config, &config.executable, KILN_PYTHON_EXECUTABLE);
  if (!PyStatus_Exception(status)) {
    char* argv[] = {const_cast<char*>(program)};
    status = PyConfig_SetBytesArgv(&config, 1, argv);
  }
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    std::fprintf(stderr, "kiln_cpp_tests: cannot start Python (%s): %s\n", KILN_PYTHON_EXECUTABLE,
                 status.err_msg != nullptr ? status.err_msg : "unknown error");
    return -1;
  }
  PyObject* torch = PyImport_ImportModule("torch");  // new reference
  if (torch == nullptr) {
    PyErr_Print();
    std::fprintf(stderr, "kiln_cpp_tests: %s cannot import torch\n", KILN_PYTHON_EXECUTABLE);
    return -1;
  }
  Py_DECREF(torch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (start_python(argv[0]) != 0) return 1;
  int result = RUN_ALL_TESTS();
  if (Py_FinalizeEx() < 0 && result == 0) result = 1;
  return result;
}
