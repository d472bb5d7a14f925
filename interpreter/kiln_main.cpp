// The `kiln` binary: a drop-in for python3 with kiln enabled.
//
// It starts CPython the way Py_BytesMain does (same pre-config, same argv
// parsing, Py_RunMain for -c/-m/script/REPL), so command-line options, exit
// codes, tracebacks and signal handling are python3's own. Two differences:
//   - paths (sys.prefix, site-packages, venv) are computed from the python
//     the build was configured with, so its torch is the one imported;
//   - before the user's code runs, the repository's python/ directory is put
//     on sys.path and `import kiln` enables the frame hook.
// Enabling goes through `import kiln`, not kiln_core directly, because the
// extension module holds its own copy of kiln_core and there must be one
// frame hook and one code cache per process.

#include <Python.h>

#include <cstdio>

#ifndef KILN_PYTHON_EXECUTABLE
#error "KILN_PYTHON_EXECUTABLE must name the python the build was configured with"
#endif
#ifndef KILN_PYTHON_PACKAGE_DIR
#error "KILN_PYTHON_PACKAGE_DIR must name the directory that holds the kiln package"
#endif

namespace {

// Exits the process the way python3 does for a failed or "exit" status (-h,
// --version, bad options); returns otherwise.
void exit_if_failed(PyStatus status, PyConfig* config) {
  if (!PyStatus_Exception(status)) return;
  if (config != nullptr) PyConfig_Clear(config);
  Py_ExitStatusException(status);
}

// Puts the kiln package first on sys.path and imports it. Returns 0 on
// success; on failure prints the traceback and returns -1. Needs the GIL.
int enable_kiln() {
  PyObject* path = PySys_GetObject("path");  // borrowed
  PyObject* dir = PyUnicode_DecodeFSDefault(KILN_PYTHON_PACKAGE_DIR);  // new
  if (path == nullptr || dir == nullptr || PyList_Insert(path, 0, dir) != 0) {
    Py_XDECREF(dir);
    if (PyErr_Occurred()) PyErr_Print();
    return -1;
  }
  Py_DECREF(dir);
  PyObject* kiln = PyImport_ImportModule("kiln");  // new
  if (kiln == nullptr) {
    PyErr_Print();
    return -1;
  }
  Py_DECREF(kiln);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  PyPreConfig preconfig;
  PyPreConfig_InitPythonConfig(&preconfig);
  // Pre-initialization reads -E, -I, -X utf8 and -X dev from argv, as
  // python3's own main does.
  exit_if_failed(Py_PreInitializeFromBytesArgs(&preconfig, argc, argv), nullptr);

  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  exit_if_failed(PyConfig_SetBytesArgv(&config, argc, argv), &config);
  // sys.prefix, sys.path and venv detection all derive from the executable;
  // naming the configured python makes them exactly that python's.
  exit_if_failed(PyConfig_SetBytesString(&config, &config.executable, KILN_PYTHON_EXECUTABLE),
                 &config);
  exit_if_failed(Py_InitializeFromConfig(&config), &config);
  PyConfig_Clear(&config);

  if (enable_kiln() != 0) {
    std::fprintf(stderr, "kiln: cannot import the kiln package from %s (python: %s)\n",
                 KILN_PYTHON_PACKAGE_DIR, KILN_PYTHON_EXECUTABLE);
    Py_FinalizeEx();
    return 1;
  }
  // Runs -c/-m/script/REPL, finalizes, and maps SystemExit and
  // KeyboardInterrupt to python3's exit codes.
  return Py_RunMain();
}
