#include "runtime/graph_arg_values.h"

namespace kiln::runtime {

using graph::Arg;

PyObject* materialize_arg(const Arg& arg, PyObject* const* values) {
  switch (arg.kind) {
    case Arg::Kind::Node: {
      PyObject* value = values[arg.node];
      Py_INCREF(value);
      return value;
    }
    case Arg::Kind::Constant:
      Py_INCREF(arg.constant);
      return arg.constant;
    case Arg::Kind::Tuple:
    case Arg::Kind::List: {
      const Py_ssize_t n = static_cast<Py_ssize_t>(arg.items.size());
      PyObject* out = arg.kind == Arg::Kind::Tuple ? PyTuple_New(n) : PyList_New(n);
      if (!out) return nullptr;
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = materialize_arg(arg.items[i], values);
        if (!item) {
          Py_DECREF(out);
          return nullptr;
        }
        if (arg.kind == Arg::Kind::Tuple) {
          PyTuple_SET_ITEM(out, i, item);
        } else {
          PyList_SET_ITEM(out, i, item);
        }
      }
      return out;
    }
    case Arg::Kind::Dict: {
      PyObject* out = PyDict_New();
      if (!out) return nullptr;
      for (size_t i = 0; i < arg.items.size(); ++i) {
        PyObject* item = materialize_arg(arg.items[i], values);
        if (!item || PyDict_SetItem(out, arg.keys[i], item) < 0) {
          Py_XDECREF(item);
          Py_DECREF(out);
          return nullptr;
        }
        Py_DECREF(item);
      }
      return out;
    }
  }
  return nullptr;
}

}  // namespace kiln::runtime
