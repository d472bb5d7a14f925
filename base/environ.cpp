#include "base/environ.h"

#include "base/module_attr.h"

namespace kiln::base {

PyObject* environ_object() {
  static PyObject* environ = import_attr("os", "environ");
  return environ;
}

PyObject* getenv_function() {
  static PyObject* getenv = import_attr("os", "getenv");
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
