#include "base/module_attr.h"

namespace kiln::base {

PyObject* import_attr(const char* module, const char* name) {
  PyObject* imported = PyImport_ImportModule(module);
  PyObject* found = imported ? PyObject_GetAttrString(imported, name) : nullptr;
  Py_XDECREF(imported);
  if (!found) PyErr_Clear();
  return found;
}

}  // namespace kiln::base
