// Objects graph nodes hold as constants for values of other kinds (see
// node_constants.h).
#include "tracer/node_constants.h"

#include <algorithm>

namespace kiln::tracer {
namespace {

// The builtin scalar types, which torch takes as dtypes (torch.zeros(n,
// dtype=int): transformers' masking utils): immutable singletons, which a
// node holds as constants.
bool is_builtin_scalar_type(PyObject* obj) {
  return obj == reinterpret_cast<PyObject*>(&PyLong_Type) || obj == reinterpret_cast<PyObject*>(&PyFloat_Type) ||
         obj == reinterpret_cast<PyObject*>(&PyBool_Type) || obj == reinterpret_cast<PyObject*>(&PyComplex_Type);
}

// Note [Functions made in the trace as arguments]
// A torch op taking a Python function (torch's associative_scan, which
// transformers' Mamba calls under a compiler with a combine function
// defined in its forward) gets one: a function the trace made over
// constants (its closure cells, defaults) computes the same whichever
// object runs it, so the node holds one made now, over the defining
// frame's globals (read when it runs, as the original's). A closure over
// a tensor or another value of the trace cannot be made so.
PyRef materialize_local_function(const ValuePtr& value) {
  if (!value->is(ValueKind::LocalFunction) || !value->globals) return PyRef();
  auto constants = [](const ValuePtr& holder) {
    return !holder || std::all_of(holder->items.begin(), holder->items.end(),
                                  [](const ValuePtr& v) { return v->is(ValueKind::Constant); });
  };
  if (!constants(value->defaults) || !constants(value->kwdefaults)) return PyRef();
  PyRef closure;
  if (!value->items.empty()) {
    closure = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(value->items.size())));
    for (size_t i = 0; i < value->items.size(); ++i) {
      const ValuePtr& cell = value->items[i];
      if (!cell->is(ValueKind::Cell) || cell->items.empty() || !cell->items[0]->is(ValueKind::Constant)) {
        return PyRef();
      }
      PyTuple_SET_ITEM(closure.get(), static_cast<Py_ssize_t>(i), PyCell_New(cell->items[0]->obj.get()));
    }
  }
  PyRef func = PyRef::steal(PyFunction_New(value->obj.get(), value->globals.get()));
  if (!func) {
    PyErr_Clear();
    return PyRef();
  }
  bool ok = !closure || PyFunction_SetClosure(func.get(), closure.get()) == 0;
  if (ok && value->defaults) {
    PyRef defaults = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(value->defaults->items.size())));
    for (size_t i = 0; i < value->defaults->items.size(); ++i) {
      PyTuple_SET_ITEM(defaults.get(), static_cast<Py_ssize_t>(i), PyRef(value->defaults->items[i]->obj).release());
    }
    ok = PyFunction_SetDefaults(func.get(), defaults.get()) == 0;
  }
  if (ok && value->kwdefaults) {
    PyRef kwdefaults = PyRef::steal(PyDict_New());
    for (size_t i = 0; i < value->kwdefaults->items.size(); ++i) {
      PyDict_SetItem(kwdefaults.get(), value->kwdefaults->keys[i].get(), value->kwdefaults->items[i]->obj.get());
    }
    ok = PyFunction_SetKwDefaults(func.get(), kwdefaults.get()) == 0;
  }
  if (!ok) {
    PyErr_Clear();
    return PyRef();
  }
  return func;
}

}  // namespace

PyRef node_constant_of(const ValuePtr& value) {
  if (value->obj && is_builtin_scalar_type(value->obj.get())) return value->obj;
  return materialize_local_function(value);
}

}  // namespace kiln::tracer
