#include "tracer/dynamic_marks.h"

#include "base/python_warning.h"
#include "base/py_ref.h"
#include "base/torch_api.h"

namespace kiln::tracer {
namespace {

using base::PyRef;

// The dims in the set `tensor.<attr>`, torch's spelling of a mark
// (negative ones counted from the end); empty when the tensor carries none.
std::vector<int> marked(PyObject* tensor, const char* attr) {
  std::vector<int> dims;
  PyRef set = PyRef::steal(PyObject_GetAttrString(tensor, attr));
  if (!set) {
    PyErr_Clear();
    return dims;
  }
  PyRef items = PyRef::steal(PySequence_List(set.get()));
  if (!items) {
    PyErr_Clear();
    return dims;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.get()); ++i) {
    const long dim = PyLong_AsLong(PyList_GET_ITEM(items.get(), i));
    if (dim == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      continue;
    }
    if (dim < 0) {
      PyRef ndim = PyRef::steal(PyObject_CallMethod(tensor, "dim", nullptr));
      if (!ndim) {
        PyErr_Clear();
        continue;
      }
      dims.push_back(static_cast<int>(dim + PyLong_AsLong(ndim.get())));
    } else {
      dims.push_back(static_cast<int>(dim));
    }
  }
  return dims;
}

// Why dim `dim` of `tensor` cannot be symbolic (Note [Dynamic shapes]:
// contiguous tensors only, sizes 0 and 1 specialized), or "".
std::string why_static(PyObject* tensor, int dim) {
  PyRef contiguous = PyRef::steal(PyObject_CallMethod(tensor, "is_contiguous", nullptr));
  if (contiguous && contiguous.get() != Py_True) return "the tensor is not contiguous";
  PyRef size = contiguous ? PyRef::steal(PyObject_CallMethod(tensor, "size", "i", dim)) : PyRef();
  const long value = size ? PyLong_AsLong(size.get()) : -1;
  if (!size || PyErr_Occurred()) {
    PyErr_Clear();
    return "the tensor has no dim " + std::to_string(dim);
  }
  if (value < 2) return "its size is " + std::to_string(value) + " (sizes 0 and 1 are always specialized)";
  return "";
}

}  // namespace

std::string add_marked_dims(PyCodeObject* code, const guards::FrameView& frame, DynamicDims* dims) {
  std::string names;
  const int arguments = code->co_argcount + code->co_kwonlyargcount;
  PyObject* tensor_type = base::torch_api()->tensor_type;
  for (int i = 0; i < arguments && frame.localsplus; ++i) {
    PyObject* value = frame.localsplus[i];
    if (!value || !PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(tensor_type))) continue;
    const std::vector<int> marks = marked(value, "_dynamo_dynamic_indices");
    // maybe_mark_dynamic: dynamic, but free to specialize without a word.
    const std::vector<int> weak = marked(value, "_dynamo_weak_dynamic_indices");
    if (marks.empty() && weak.empty()) continue;
    const std::string source =
        "L['" + std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i))) + "']";
    for (int dim : weak) dims->add(source, dim);
    for (int dim : marks) {
      if (const std::string why = why_static(value, dim); !why.empty()) {
        const std::string warning = "kiln: " + source + " dim " + std::to_string(dim) +
                                    " is marked dynamic but stays static: " + why;
        base::warn(PyExc_UserWarning, warning);
        continue;
      }
      dims->add(source, dim);
      names += (names.empty() ? "" : ", ") + source + " dim " + std::to_string(dim);
    }
  }
  return names;
}

std::vector<int> static_dims(PyObject* tensor) { return marked(tensor, "_dynamo_static_indices"); }

}  // namespace kiln::tracer
