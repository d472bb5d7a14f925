#include "base/dict_order.h"

#include "base/module_attr.h"

namespace kiln::base {
namespace {

bool same_key(PyObject* key, PyObject* expected) {
  if (key == expected) return true;
  const int equal = PyObject_RichCompareBool(key, expected, Py_EQ);
  if (equal < 0) PyErr_Clear();
  return equal == 1;
}

// collections.<name>, imported once per caller's static; null, with no
// error set, if it cannot be imported.
PyObject* collections_type(const char* name) { return import_attr("collections", name); }

}  // namespace

PyObject* ordered_dict_type() {
  static PyObject* type = collections_type("OrderedDict");
  return type;
}

PyObject* defaultdict_type() {
  static PyObject* type = collections_type("defaultdict");
  return type;
}

bool is_dict_or_ordered_dict(PyObject* obj) {
  if (PyDict_CheckExact(obj)) return true;
  PyObject* ordered = ordered_dict_type();
  return ordered && reinterpret_cast<PyObject*>(Py_TYPE(obj)) == ordered;
}

bool dict_keys_in_order(PyObject* dict, std::vector<PyRef>& keys) {
  if (PyDict_CheckExact(dict)) {
    PyObject* key;
    PyObject* value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) keys.push_back(PyRef::borrow(key));
    return true;
  }
  PyRef iter = PyRef::steal(PyObject_GetIter(dict));
  if (!iter) return false;
  while (PyObject* key = PyIter_Next(iter.get())) keys.push_back(PyRef::steal(key));
  return !PyErr_Occurred();
}

bool dict_has_keys(PyObject* dict, PyObject* keys) {
  const Py_ssize_t n = PyTuple_GET_SIZE(keys);
  if (!PyDict_Check(dict) || PyDict_GET_SIZE(dict) != n) return false;
  if (PyDict_CheckExact(dict)) {
    PyObject* key;
    PyObject* value;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; PyDict_Next(dict, &pos, &key, &value); ++i) {
      if (i >= n || !same_key(key, PyTuple_GET_ITEM(keys, i))) return false;
    }
    return true;
  }
  PyRef iter = PyRef::steal(PyObject_GetIter(dict));
  if (!iter) {
    PyErr_Clear();
    return false;
  }
  Py_ssize_t i = 0;
  while (PyObject* key = PyIter_Next(iter.get())) {
    const bool same = i < n && same_key(key, PyTuple_GET_ITEM(keys, i));
    Py_DECREF(key);
    if (!same) {
      PyErr_Clear();
      return false;
    }
    ++i;
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return i == n;
}

}  // namespace kiln::base
