#include "runtime/replace_contents.h"

#include "base/py_ref.h"

namespace kiln::runtime {

using base::PyRef;

int replace_contents(PyObject* target, PyObject* contents) {
  if (PyList_CheckExact(target)) return PyList_SetSlice(target, 0, PY_SSIZE_T_MAX, contents);
  if (PyDict_CheckExact(target)) {
    PyDict_Clear(target);
    return PyDict_Update(target, contents);
  }
  if (PyList_Check(contents)) {
    PyRef all = PyRef::steal(PySlice_New(nullptr, nullptr, nullptr));
    return all ? PyObject_SetItem(target, all.get(), contents) : -1;
  }
  PyRef cleared = PyRef::steal(PyObject_CallMethod(target, "clear", nullptr));
  if (!cleared) return -1;
  PyRef updated = PyRef::steal(PyObject_CallMethod(target, "update", "O", contents));
  return updated ? 0 : -1;
}

}  // namespace kiln::runtime
