#include "base/py_text.h"

namespace kiln::base {

std::string py_repr(PyObject* obj) {
  PyObject* text = PyObject_Repr(obj);
  const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
  if (!utf8) {
    Py_XDECREF(text);
    PyErr_Clear();
    return "<unprintable>";
  }
  std::string out = utf8;
  Py_DECREF(text);
  return out;
}

}  // namespace kiln::base
