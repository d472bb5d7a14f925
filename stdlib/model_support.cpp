#include "stdlib/model_support.h"

#include <algorithm>

#include "stdlib/model_registry.h"
#include "tracer/dynamic_shapes.h"

namespace kiln::stdlib {

void expect_args(BuiltinContext& context, const BuiltinCall& call, size_t min, size_t max) {
  if (!call.kwargs.empty()) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() with keyword arguments");
  }
  if (call.args.size() < min || call.args.size() > max) {
    context.abort(BreakCode::UnsupportedCall,
                  call.name + "() with " + std::to_string(call.args.size()) + " arguments");
  }
}

PyRef python_constant(const Value& value) {
  if (value.is(ValueKind::Constant)) return value.obj;
  // An exception the trace made or caught (Note [Exceptions in inlined
  // frames]): str(e), e.args and the like read what it was made with.
  if (value.is(ValueKind::Object) && value.source < 0 && PyExceptionInstance_Check(value.obj.get())) return value.obj;
  // A class whose metaclass keeps type's str() and repr(): str(type(x)) is
  // "<class 'torch.Tensor'>" for as long as the class is the one guarded.
  if (value.is(ValueKind::Object) && value.obj && PyType_Check(value.obj.get()) &&
      Py_TYPE(value.obj.get())->tp_repr == PyType_Type.tp_repr &&
      Py_TYPE(value.obj.get())->tp_str == PyType_Type.tp_str) {
    return value.obj;
  }
  if (value.is(ValueKind::Set)) {  // a copy; tensor members (Note [Tensors in sets]) have no object here
    return value.items.empty() ? PyRef::steal(PySet_New(value.obj.get())) : PyRef();
  }
  if (value.is(ValueKind::SymInt)) throw tracer::Specialize("a dynamic size is used as a plain Python value");
  const bool tuple = value.is(ValueKind::Tuple);
  if (!tuple && !value.is(ValueKind::List)) return PyRef();
  for (const ValuePtr& item : value.items) {
    if (!item->is(ValueKind::Constant) && !item->is(ValueKind::Tuple) && !item->is(ValueKind::List)) {
      return PyRef();
    }
  }
  if (tuple && value.obj && !value.tuple_type) return value.obj;  // torch.Size
  if (value.tuple_type) return PyRef();  // a namedtuple's own methods could run
  const Py_ssize_t n = static_cast<Py_ssize_t>(value.items.size());
  PyRef out = PyRef::steal(tuple ? PyTuple_New(n) : PyList_New(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyRef item = python_constant(*value.items[i]);
    if (!item) return PyRef();
    if (tuple) {
      PyTuple_SET_ITEM(out.get(), i, item.release());
    } else {
      PyList_SET_ITEM(out.get(), i, item.release());
    }
  }
  return out;
}

bool holds_tensor(const Value& value) {
  if (value.is(ValueKind::Tensor)) return true;
  if (value.is(ValueKind::Tuple) || value.is(ValueKind::List) || value.is(ValueKind::Dict) ||
      value.is(ValueKind::Iterator)) {
    return std::any_of(value.items.begin() + (value.is(ValueKind::Iterator) ? value.position : 0),
                       value.items.end(), [](const ValuePtr& item) { return holds_tensor(*item); });
  }
  return false;
}

bool is_none(const Value& value) { return value.is(ValueKind::Constant) && value.obj.get() == Py_None; }

Py_ssize_t int_argument(BuiltinContext& context, const Value& value, const std::string& what) {
  if (!value.is(ValueKind::Constant) || !PyLong_Check(value.obj.get())) {
    context.abort(BreakCode::UnsupportedCall, what + " must be a constant int, got " + tracer::describe_value(value));
  }
  Py_ssize_t n = PyLong_AsSsize_t(value.obj.get());
  if (n == -1 && PyErr_Occurred()) context.abort_python_error(what);
  return n;
}

ValuePtr int_value(BuiltinContext& context, Py_ssize_t n) {
  PyRef number = PyRef::steal(PyLong_FromSsize_t(n));
  return context.constant(number.get());
}

ValuePtr take_keyword(KwArgs& kwargs, const char* key) {
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    if (it->first == key) {
      ValuePtr value = it->second;
      kwargs.erase(it);
      return value;
    }
  }
  return nullptr;
}

ValuePtr fold_constants(BuiltinContext& context, PyObject* fn, const BuiltinCall& call,
                        bool consumes_iterable) {
  auto refuse = [&](const Value& value, const std::string& where) {
    // Comparing, converting or printing a tensor reads its data.
    const BreakCode code = holds_tensor(value) ? BreakCode::DataDependent : BreakCode::UnsupportedCall;
    context.abort(code, call.name + "() " + where + tracer::describe_value(value));
  };
  PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(call.args.size())));
  for (size_t i = 0; i < call.args.size(); ++i) {
    ValuePtr arg = call.args[i];
    if (i == 0 && consumes_iterable && arg->is(ValueKind::Iterator)) {
      std::vector<ValuePtr> rest(arg->items.begin() + arg->position, arg->items.end());
      ValuePtr items = tracer::make_sequence(ValueKind::Tuple, std::move(rest));
      if (!python_constant(*items)) refuse(*items, "of ");
      context.unpack(arg);  // consumed, as the real call would
      arg = items;
    }
    PyRef object = python_constant(*arg);
    if (!object) refuse(*arg, "of ");
    PyTuple_SET_ITEM(args.get(), i, object.release());
  }
  PyRef kwargs;
  if (!call.kwargs.empty()) {
    kwargs = PyRef::steal(PyDict_New());
    for (const auto& [key, value] : call.kwargs) {
      PyRef object = python_constant(*value);
      if (!object) refuse(*value, "keyword " + key + " of ");
      PyDict_SetItemString(kwargs.get(), key.c_str(), object.get());
    }
  }
  PyRef result = PyRef::steal(PyObject_Call(fn, args.get(), kwargs.get()));
  if (!result) context.abort_python_error(call.name + "() raised");
  return context.constant(result.get());
}

std::vector<std::vector<ValuePtr>> unpack_in_lockstep(BuiltinContext& context,
                                                      const std::vector<ValuePtr>& iterables,
                                                      const std::string& what) {
  std::vector<std::vector<ValuePtr>> seqs(iterables.size());
  size_t n = SIZE_MAX;
  for (size_t k = 0; k < iterables.size(); ++k) {
    if (is_unbounded(*iterables[k])) continue;
    seqs[k] = context.unpack(iterables[k]);
    n = std::min(n, seqs[k].size());
  }
  if (n == SIZE_MAX) {
    if (iterables.empty()) return seqs;
    context.abort(BreakCode::UnsupportedCall, what + "() over endless iterators only");
  }
  for (size_t k = 0; k < iterables.size(); ++k) {
    if (is_unbounded(*iterables[k])) {
      seqs[k] = take_unbounded(context, iterables[k], n);
    } else {
      seqs[k].resize(n);
    }
  }
  return seqs;
}

}  // namespace kiln::stdlib
