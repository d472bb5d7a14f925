#include "runtime/environ.h"

namespace kiln::runtime {

PyObject* environ_object() {
  static PyObject* environ = [] {
    PyObject* os = PyImport_ImportModule("os");
    PyObject* found = os ? PyObject_GetAttrString(os, "environ") : nullptr;  // kept for the process
    Py_XDECREF(os);
    if (!found) PyErr_Clear();
    return found;
  }();
  return environ;
}

PyObject* environ_value(PyObject* name) {
  PyObject* environ = environ_object();
  if (!environ) return nullptr;
  PyObject* value = PyObject_GetItem(environ, name);
  if (!value) PyErr_Clear();
  return value;
}

}  // namespace kiln::runtime
