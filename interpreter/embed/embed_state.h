// What libkiln's handles (include/kiln/embed.h) hold: owned references to
// Python objects, and the interpreter they live in. Internal to kiln_embed.
#pragma once

#include <Python.h>

#include <initializer_list>
#include <memory>
#include <string>

#include "kiln/embed.h"

namespace kiln::embed {

// Holds the GIL for a scope, from any thread: a host thread that has never
// run Python gets a thread state on first use (PyGILState_Ensure).
class GilScope {
 public:
  GilScope() : state_(PyGILState_Ensure()) {}
  ~GilScope() { PyGILState_Release(state_); }
  GilScope(const GilScope&) = delete;
  GilScope& operator=(const GilScope&) = delete;

 private:
  PyGILState_STATE state_;
};

// Drops one reference under the GIL; leaks it when the interpreter is gone
// (a host that finalized the Python it runs before dropping kiln's handles).
void release_reference(PyObject* obj);

// The interpreter: started by libkiln (owned; finalized with the last
// handle) or the host's own (attached).
struct RuntimeState {
  bool owns_interpreter = false;
  // The starting thread's state, released by PyEval_SaveThread so any
  // thread can take the GIL; restored to finalize.
  PyThreadState* saved_thread = nullptr;
  // kiln._embed (python/kiln/_embed.py); owned.
  PyObject* helpers = nullptr;
  RuntimeState() = default;
  RuntimeState(const RuntimeState&) = delete;
  RuntimeState& operator=(const RuntimeState&) = delete;
  ~RuntimeState();
};

// An imported module; `module` is owned.
struct ModuleState {
  std::shared_ptr<RuntimeState> runtime;
  PyObject* module = nullptr;
  std::string name;
  ModuleState() = default;
  ModuleState(const ModuleState&) = delete;
  ModuleState& operator=(const ModuleState&) = delete;
  ~ModuleState() { release_reference(module); }
};

// A callable; `callable` is owned. Immutable once built, so one state is
// shared by every thread calling it.
struct FunctionState {
  std::shared_ptr<RuntimeState> runtime;
  PyObject* callable = nullptr;
  std::string name;
  // Positional arguments it takes; fewest < 0: unknown, most < 0: any number.
  int fewest_inputs = -1;
  int most_inputs = -1;
  FunctionState() = default;
  FunctionState(const FunctionState&) = delete;
  FunctionState& operator=(const FunctionState&) = delete;
  ~FunctionState() { release_reference(callable); }
};

// Takes the pending Python exception (the GIL held) and returns it as a
// PythonError; `context` says what libkiln was doing.
PythonError take_python_error(const std::string& context);

// Calls helpers.<name>(*args) (the GIL held); returns a new reference, or
// null with a Python error set. Args are borrowed.
PyObject* call_helper(const RuntimeState& runtime, const char* name,
                      std::initializer_list<PyObject*> args);

}  // namespace kiln::embed
