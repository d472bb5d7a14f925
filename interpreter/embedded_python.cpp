#include "interpreter/embedded_python.h"

#include <Python.h>

namespace kiln::interpreter {

bool start_embedded_python(const char* executable, const char* program, std::string* error) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  // The host owns its command line (--gtest_*, --benchmark_*).
  config.parse_argv = 0;
  // Ctrl-C should stop the host, not raise KeyboardInterrupt in whatever
  // Python code happens to run.
  config.install_signal_handlers = 0;
  PyStatus status = PyConfig_SetBytesString(&config, &config.executable, executable);
  if (!PyStatus_Exception(status)) {
    char* argv[] = {const_cast<char*>(program)};
    status = PyConfig_SetBytesArgv(&config, 1, argv);
  }
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    *error = std::string("cannot start Python (") + executable +
             "): " + (status.err_msg != nullptr ? status.err_msg : "unknown error");
    return false;
  }
  return true;
}

}  // namespace kiln::interpreter
