#include "base/environ.h"

namespace kiln::base {

namespace {

// os.<name>, kept for the process; null (no error set) if missing.
PyObject* os_attr(const char* name) {
  PyObject* os = PyImport_ImportModule("os");
  PyObject* found = os ? PyObject_GetAttrString(os, name) : nullptr;
  Py_XDECREF(os);
  if (!found) PyErr_Clear();
  return found;
}

}  // namespace

PyObject* environ_object() {
  static PyObject* environ = os_attr("environ");
  return environ;
}

PyObject* getenv_function() {
  static PyObject* getenv = os_attr("getenv");
  return getenv;
}

PyObject* environ_value(PyObject* name) {
  PyObject* environ = environ_object();
  if (!environ) return nullptr;
  PyObject* value = PyObject_GetItem(environ, name);
  if (!value) PyErr_Clear();
  return value;
}

}  // namespace kiln::base
