#include "tracer/disabled_code.h"

#include <unordered_set>

namespace kiln::tracer {
namespace {

// Both guarded by the GIL.
std::unordered_set<PyCodeObject*>& disabled_codes() {
  static auto* codes = new std::unordered_set<PyCodeObject*>();
  return *codes;
}

bool any_disabled = false;

}  // namespace

void mark_disabled_code(PyCodeObject* code) {
  if (disabled_codes().insert(code).second) Py_INCREF(code);
  any_disabled = true;
}

bool is_disabled_code(PyCodeObject* code) {
  return any_disabled && disabled_codes().count(code) != 0;
}

void mark_disabled_target(PyObject* func) {
  // The marker's wrapper too: torch's wrappers share one code object, so a
  // disabled function reached later from an untraced frame, through its
  // wrapper, runs with no compile context as well.
  if (PyFunction_Check(func)) mark_disabled_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(func)));
  for (const char* name : {"_torchdynamo_orig_callable", "__wrapped__"}) {
    PyObject* target = PyObject_GetAttrString(func, name);
    if (!target) {
      PyErr_Clear();
      continue;
    }
    if (PyMethod_Check(target)) {
      PyObject* inner = PyMethod_GET_FUNCTION(target);
      Py_INCREF(inner);
      Py_DECREF(target);
      target = inner;
    }
    const bool function = PyFunction_Check(target);
    if (function) mark_disabled_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(target)));
    Py_DECREF(target);
    if (function) return;
  }
}

}  // namespace kiln::tracer
