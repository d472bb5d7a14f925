#include "interpreter/embed/tensor_convert.h"

#include <torch/csrc/autograd/python_variable.h>

#include "runtime/aten_bridge.h"

namespace kiln::embed {

PyObject* tensors_to_tuple(const std::vector<at::Tensor>& tensors) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(tensors.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    PyObject* tensor = THPVariable_Wrap(tensors[i]);  // new reference
    if (tensor == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), tensor);  // steals
  }
  return tuple;
}

namespace {

// "an int", "a tuple": the article and type name of `obj` for messages.
std::string describe(PyObject* obj) {
  std::string name = Py_TYPE(obj)->tp_name;
  const bool vowel = !name.empty() && std::string("aeiouAEIOU").find(name[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + name;
}

}  // namespace

bool tensors_from_result(PyObject* result, std::vector<at::Tensor>* out, std::string* problem) {
  if (runtime::is_tensor(result)) {
    out->push_back(THPVariable_Unpack(result));
    return true;
  }
  if (!PyTuple_Check(result) && !PyList_Check(result)) {
    *problem = describe(result);
    return false;
  }
  const Py_ssize_t size = PySequence_Fast_GET_SIZE(result);
  PyObject** items = PySequence_Fast_ITEMS(result);  // borrowed
  for (Py_ssize_t i = 0; i < size; ++i) {
    if (!runtime::is_tensor(items[i])) {
      out->clear();
      *problem = describe(result) + " whose item " + std::to_string(i) + " is " + describe(items[i]);
      return false;
    }
  }
  out->reserve(out->size() + static_cast<size_t>(size));
  for (Py_ssize_t i = 0; i < size; ++i) out->push_back(THPVariable_Unpack(items[i]));
  return true;
}

}  // namespace kiln::embed
