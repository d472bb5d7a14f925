#include "base/class_dict.h"

namespace kiln::base {

PyRef own_class_attr(PyTypeObject* type, PyObject* name) {
  PyRef namespace_proxy = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dict__"));
  if (!namespace_proxy) {
    PyErr_Clear();
    return PyRef();
  }
  PyRef found = PyRef::steal(PyObject_GetItem(namespace_proxy.get(), name));
  if (!found) PyErr_Clear();
  return found;
}

PyRef own_class_attr(PyTypeObject* type, const char* name) {
  PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
  return key ? own_class_attr(type, key.get()) : PyRef();
}

}  // namespace kiln::base
