// Python's builtins on symbolic values: sizes and types answered from what
// the trace knows, iteration builtins evaluated eagerly over known items,
// arithmetic builtins on tensors as graph nodes, and the rest run for real
// on constant arguments.
#include <algorithm>

#include "stdlib/model_registry.h"
#include "stdlib/model_support.h"
#include "base/torch_api.h"

namespace kiln::stdlib {

using base::PyRef;
using base::torch_api;
namespace {

PyObject* as_object(PyTypeObject* type) { return reinterpret_cast<PyObject*>(type); }

// The exact Python type of a value, or null when the trace does not know it
// (an iterator's type depends on what made it). Guards an input tensor's type.
PyObject* type_of(BuiltinContext& context, const ValuePtr& x) {
  switch (x->kind) {
    case ValueKind::Tensor: {
      // Inputs keep their exact type (a Parameter is not a Tensor); tensors
      // made by the graph are plain torch.Tensor.
      PyObject* type = x->obj ? x->obj.get() : torch_api()->tensor_type;
      if (x->obj) context.guard_type(x, type);
      return type;
    }
    case ValueKind::Tuple:
    case ValueKind::List:
    case ValueKind::Dict:
      if (x->tuple_type) return x->tuple_type.get();
      if (x->obj) return as_object(Py_TYPE(x->obj.get()));
      return as_object(x->is(ValueKind::Tuple) ? &PyTuple_Type
                       : x->is(ValueKind::List) ? &PyList_Type
                                                : &PyDict_Type);
    case ValueKind::StdObject:
      return x->obj.get();
    case ValueKind::Record:
      return x->tuple_type.get();  // the dataclass
    case ValueKind::Set:
      return as_object(&PySet_Type);
    case ValueKind::Constant:
    case ValueKind::Module:
    case ValueKind::Function:
    case ValueKind::Builtin:
    case ValueKind::PyModule:
    case ValueKind::Object:
    case ValueKind::TorchCallable:
      return as_object(Py_TYPE(x->obj.get()));
    case ValueKind::Method:
      return as_object(&PyMethod_Type);  // a Python function bound to its receiver
    case ValueKind::LocalFunction:
      return as_object(&PyFunction_Type);
    case ValueKind::SymInt:  // computed at run time as a Python int (or slice)
      return as_object(x->sym_slice ? &PySlice_Type : &PyLong_Type);
    default:
      return nullptr;
  }
}

// True for kinds whose obj is the very object the program holds.
bool holds_real_object(const Value& x) {
  switch (x.kind) {
    case ValueKind::Constant:
    case ValueKind::Module:
    case ValueKind::Function:
    case ValueKind::Builtin:
    case ValueKind::PyModule:
    case ValueKind::Object:
    case ValueKind::TorchCallable:
      return true;
    default:
      return false;
  }
}

// isinstance()'s second argument as the real class or tuple of classes.
PyRef class_info(const Value& value) {
  if (holds_real_object(value)) return value.obj;
  if (!value.is(ValueKind::Tuple)) return PyRef();
  PyRef out = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(value.items.size())));
  for (size_t i = 0; i < value.items.size(); ++i) {
    PyRef item = class_info(*value.items[i]);
    if (!item) return PyRef();
    PyTuple_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), item.release());
  }
  return out;
}

ValuePtr boolean(BuiltinContext& context, bool value) { return context.constant(value ? Py_True : Py_False); }

ValuePtr fold(BuiltinContext& context, BuiltinCall& call) {
  return fold_constants(context, call.callee->obj.get(), call, false);
}

// Builtins that take an iterable first and consume it (sum, sorted, any...).
ValuePtr fold_consuming(BuiltinContext& context, BuiltinCall& call) {
  return fold_constants(context, call.callee->obj.get(), call, true);
}

// min(a, b, ...) and max(...) of ints with a dynamic size among them
// (transformers' sliding-window cache: max(cumulative_length - window + 1,
// 0), Note [Dynamic ints] in tracer/dynamic_shapes.cpp): where every sample
// point picks the same argument, that argument, the comparisons that chose
// it guarded; otherwise a SymInt computed at run time.
ValuePtr min_max_model(BuiltinContext& context, BuiltinCall& call) {
  bool symbolic = false;
  for (const ValuePtr& arg : call.args) {
    const bool is_size = arg->is(ValueKind::SymInt) && !arg->sym_slice;
    const bool is_int = arg->is(ValueKind::Constant) && PyLong_CheckExact(arg->obj.get());
    if (!is_size && !is_int) return fold_consuming(context, call);
    symbolic = symbolic || is_size;
  }
  if (!symbolic || call.args.size() < 2 || !call.kwargs.empty()) return fold_consuming(context, call);
  const bool is_max = call.name == "max";
  auto at = [](const ValuePtr& v, size_t p) {
    return v->is(ValueKind::SymInt) ? v->sym_points[std::min(p, v->sym_points.size() - 1)]
                                    : static_cast<int64_t>(PyLong_AsLongLong(v->obj.get()));
  };
  size_t points = 1;
  for (const ValuePtr& arg : call.args) {
    if (arg->is(ValueKind::SymInt)) points = std::max(points, arg->sym_points.size());
  }
  // The argument each point picks (the first of equal ones, as Python's).
  size_t chosen = 0;
  for (size_t p = 0; p < points; ++p) {
    size_t best = 0;
    for (size_t i = 1; i < call.args.size(); ++i) {
      const int64_t x = at(call.args[i], p), b = at(call.args[best], p);
      if (is_max ? x > b : x < b) best = i;
    }
    if (p == 0) chosen = best;
    if (best != chosen) {
      return context.size_call(call.name, call.callee->obj.get(), call.args);
    }
  }
  for (size_t i = 0; i < call.args.size(); ++i) {
    if (i == chosen) continue;
    // args[i] does not beat the choice (later ones do not equal it either).
    const int cmp = i < chosen ? (is_max ? Py_LE : Py_GE) : (is_max ? Py_LT : Py_GT);
    context.truthy(context.compare(cmp, call.args[i], call.args[chosen]));
  }
  return call.args[chosen];
}

ValuePtr len_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  const ValuePtr& x = call.args[0];
  if (x->is(ValueKind::Tuple) || x->is(ValueKind::List) || x->is(ValueKind::Dict)) {
    return int_value(context, static_cast<Py_ssize_t>(x->items.size()));
  }
  if (x->is(ValueKind::Tensor)) {
    if (x->meta.sizes.empty()) context.abort(BreakCode::PythonException, "TypeError: len() of a 0-d tensor");
    return context.tensor_size(x, 0);
  }
  if (x->is(ValueKind::Module)) {
    return int_value(context, static_cast<Py_ssize_t>(context.unpack(context.iterate(x)).size()));
  }
  if (ValuePtr n = context.call_python_special(x, "__len__", {})) return n;
  if (x->contents) return int_value(context, static_cast<Py_ssize_t>(x->contents->items.size()));
  return fold(context, call);
}

ValuePtr isinstance_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  const ValuePtr& x = call.args[0];
  PyRef types = class_info(*call.args[1]);
  if (!types) context.abort(BreakCode::UnsupportedCall, "isinstance() with non-constant types");
  int result;
  if (holds_real_object(*x)) {
    result = PyObject_IsInstance(x->obj.get(), types.get());
  } else if (PyObject* type = type_of(context, x)) {
    result = PyObject_IsSubclass(type, types.get());
  } else {
    context.abort(BreakCode::UnsupportedCall, "isinstance() of " + tracer::describe_value(*x));
  }
  if (result < 0) context.abort_python_error("isinstance()");
  return boolean(context, result);
}

// True when `obj`'s class defines __getattribute__ as a Python function.
bool has_python_getattribute(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  if (type->tp_getattro == PyObject_GenericGetAttr) return false;
  PyRef key = PyRef::steal(PyUnicode_InternFromString("__getattribute__"));
  PyObject* getattribute = key ? _PyType_Lookup(type, key.get()) : nullptr;
  return getattribute && PyFunction_Check(getattribute);
}

// getattr(x, name[, default]) and hasattr(x, name).
ValuePtr getattr_model(BuiltinContext& context, BuiltinCall& call) {
  const bool has = call.name == "hasattr";
  expect_args(context, call, 2, has ? 2 : 3);
  const ValuePtr& x = call.args[0];
  const ValuePtr& name = call.args[1];
  if (!name->is(ValueKind::Constant) || !PyUnicode_Check(name->obj.get())) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() with a non-constant name");
  }
  if (!has && call.args.size() == 2) return context.load_attr(x, name->obj.get());
  PyObject* tensor_type = !x->is(ValueKind::Tensor) ? nullptr
                          : x->obj && PyType_Check(x->obj.get()) ? x->obj.get()
                          : x->fake ? reinterpret_cast<PyObject*>(Py_TYPE(x->fake.get()))  // an intermediate
                                    : nullptr;
  if (x->is(ValueKind::Record)) {
    // A Record is known whole (Note [User objects]): its lookup decides,
    // a Python __getattr__ included.
    ValuePtr found = context.try_load_attr(x, name->obj.get());
    if (has) return boolean(context, found != nullptr);
    return found ? found : call.args[2];
  }
  if (tensor_type) {
    // Duck typing on tensors (`hasattr(x, "jax")`): the class answers; an
    // input is guarded to keep the answer (an attribute set on the tensor
    // object itself makes the guard fail, and the call retraces).
    const int found = PyObject_HasAttr(tensor_type, name->obj.get());
    context.guard_has_attr(x, name->obj.get(), found == 1);
    if (has) return boolean(context, found);
    return found ? context.load_attr(x, name->obj.get()) : call.args[2];
  }
  if (!holds_real_object(*x)) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() on " + tracer::describe_value(*x));
  }
  // A store traced earlier in the frame is written back only after the
  // graph: the real object does not hold it yet.
  if (context.pending_attr_store(x, name->obj.get())) return has ? boolean(context, 1) : context.load_attr(x, name->obj.get());
  const int found = PyObject_HasAttr(x->obj.get(), name->obj.get());
  if (found == 0 && has_python_getattribute(x->obj.get()) && !context.try_load_attr(x, name->obj.get())) {
    // A missing attribute of an object whose class reads attributes in
    // Python (transformers' configs): the read traced through that
    // function failed in the generic lookup, which guards the absence
    // without running the function again on every call (Note [Custom
    // getattr]).
    if (has) return boolean(context, 0);
    return call.args[2];
  }
  // What the trace decided on must hold on later calls (an attribute set
  // or deleted between calls changes the branch taken).
  context.guard_has_attr(x, name->obj.get(), found == 1);
  if (has) return boolean(context, found);
  return found ? context.load_attr(x, name->obj.get()) : call.args[2];
}

ValuePtr type_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  PyObject* type = type_of(context, call.args[0]);
  if (!type) context.abort(BreakCode::UnsupportedCall, "type() of " + tracer::describe_value(*call.args[0]));
  return context.constant(type);
}

ValuePtr callable_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  const ValuePtr& x = call.args[0];
  switch (x->kind) {
    case ValueKind::Function:
    case ValueKind::Method:
    case ValueKind::LocalFunction:
    case ValueKind::TensorMethod:
    case ValueKind::ContainerMethod:
    case ValueKind::TorchCallable:
    case ValueKind::Builtin:
    case ValueKind::Module:
      return boolean(context, true);
    case ValueKind::Tensor:
    case ValueKind::Tuple:
    case ValueKind::List:
    case ValueKind::Dict:
    case ValueKind::Iterator:
      return boolean(context, false);
    default:
      if (PyObject* type = type_of(context, x)) {
        return boolean(context, reinterpret_cast<PyTypeObject*>(type)->tp_call != nullptr);
      }
      context.abort(BreakCode::UnsupportedCall, "callable() of " + tracer::describe_value(*x));
  }
}

ValuePtr bool_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 0, 1);
  return boolean(context, !call.args.empty() && context.truthy(call.args[0]));
}

ValuePtr abs_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  if (call.args[0]->is(ValueKind::Tensor)) {
    static PyObject* torch_abs = PyObject_GetAttrString(torch_api()->torch, "abs");
    return context.call_torch("torch.abs", torch_abs, call.args, {});
  }
  return fold(context, call);
}

ValuePtr round_model(BuiltinContext& context, BuiltinCall& call) {
  if (!call.args.empty() && call.args[0]->is(ValueKind::Tensor)) {
    // Tensor.__round__ exists only in newer torch versions.
    static PyObject* tensor_round = [] {
      PyObject* found = PyObject_GetAttrString(torch_api()->tensor_type, "__round__");
      PyErr_Clear();
      return found;
    }();
    if (!tensor_round) context.abort(BreakCode::PythonException, "TypeError: type Tensor doesn't define __round__ method");
    expect_args(context, call, 1, 2);
    return context.call_torch("Tensor.__round__", tensor_round, call.args, {});
  }
  return fold(context, call);
}

ValuePtr pow_model(BuiltinContext& context, BuiltinCall& call) {
  if (call.args.size() == 2 && call.kwargs.empty() &&
      (holds_tensor(*call.args[0]) || holds_tensor(*call.args[1]))) {
    return context.binary_op(8 /* NB_POWER */, call.args[0], call.args[1]);
  }
  return fold(context, call);
}

ValuePtr print_model(BuiltinContext& context, BuiltinCall&) {
  context.abort(BreakCode::SideEffect, "print() writes to stdout");
}

// tuple(xs) and list(xs).
ValuePtr sequence_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 0, 1);
  std::vector<ValuePtr> items = call.args.empty() ? std::vector<ValuePtr>{} : context.unpack(call.args[0]);
  return tracer::make_sequence(call.name == "tuple" ? ValueKind::Tuple : ValueKind::List, std::move(items));
}

ValuePtr iter_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  if (is_unbounded(*call.args[0])) return call.args[0];
  return context.iterate(call.args[0]);
}

ValuePtr next_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 2);
  const ValuePtr& iterator = call.args[0];
  if (is_unbounded(*iterator)) return take_unbounded(context, iterator, 1)[0];
  if (!iterator->is(ValueKind::Iterator)) {
    context.abort(BreakCode::UnsupportedCall, "next() of " + tracer::describe_value(*iterator));
  }
  if (ValuePtr item = context.next_item(iterator)) {
    context.note_write(iterator);
    return item;
  }
  if (call.args.size() == 2) return call.args[1];
  // Exact: the iterator's items are known (contextlib's __exit__ catches it).
  PyErr_SetString(PyExc_StopIteration, "");
  context.raise_exact();
}

// map(fn, *iterables) and filter(fn, iterable), evaluated eagerly like a
// generator expression consumed whole (see FrameTracer::inline_callee).
ValuePtr map_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, SIZE_MAX);
  const bool is_map = call.name == "map";
  if (!is_map && call.args.size() != 2) context.abort(BreakCode::PythonException, "TypeError: filter expected 2 arguments");
  const ValuePtr fn = call.args[0];
  std::vector<std::vector<ValuePtr>> seqs = unpack_in_lockstep(
      context, std::vector<ValuePtr>(call.args.begin() + 1, call.args.end()), call.name);
  std::vector<ValuePtr> items;
  for (size_t i = 0; i < seqs[0].size(); ++i) {
    std::vector<ValuePtr> fn_args;
    for (const auto& seq : seqs) fn_args.push_back(seq[i]);
    if (is_map) {
      items.push_back(context.call(fn, std::move(fn_args), {}));
    } else {
      ValuePtr item = fn_args[0];
      const bool keep = is_none(*fn) ? context.truthy(item) : context.truthy(context.call(fn, std::move(fn_args), {}));
      if (keep) items.push_back(item);
    }
  }
  return tracer::make_sequence(ValueKind::Iterator, std::move(items));
}

ValuePtr enumerate_model(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr start_value = take_keyword(call.kwargs, "start");
  if (call.args.size() == 2 && !start_value) {
    start_value = call.args[1];
    call.args.pop_back();
  }
  expect_args(context, call, 1, 1);
  const Py_ssize_t start = start_value ? int_argument(context, *start_value, "enumerate()'s start") : 0;
  std::vector<ValuePtr> seq = context.unpack(call.args[0]);
  std::vector<ValuePtr> items;
  for (size_t i = 0; i < seq.size(); ++i) {
    items.push_back(tracer::make_sequence(
        ValueKind::Tuple, {int_value(context, start + static_cast<Py_ssize_t>(i)), seq[i]}));
  }
  return tracer::make_sequence(ValueKind::Iterator, std::move(items));
}

ValuePtr zip_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 0, SIZE_MAX);
  std::vector<std::vector<ValuePtr>> seqs = unpack_in_lockstep(context, call.args, "zip");
  std::vector<ValuePtr> items;
  const size_t n = seqs.empty() ? 0 : seqs[0].size();
  for (size_t i = 0; i < n; ++i) {
    std::vector<ValuePtr> tuple;
    for (const auto& seq : seqs) tuple.push_back(seq[i]);
    items.push_back(tracer::make_sequence(ValueKind::Tuple, std::move(tuple)));
  }
  return tracer::make_sequence(ValueKind::Iterator, std::move(items));
}

ValuePtr reversed_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  const ValuePtr& x = call.args[0];
  if (x->is(ValueKind::Iterator) || x->is(ValueKind::StdObject)) {
    context.abort(BreakCode::PythonException, "TypeError: reversed() of an iterator");
  }
  std::vector<ValuePtr> items = context.unpack(x);
  std::reverse(items.begin(), items.end());
  return tracer::make_sequence(ValueKind::Iterator, std::move(items));
}

ValuePtr sum_model(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr start = take_keyword(call.kwargs, "start");
  if (call.args.size() == 2 && !start) {
    start = call.args[1];
    call.args.pop_back();
  }
  expect_args(context, call, 1, 1);
  if (!holds_tensor(*call.args[0]) && (!start || !holds_tensor(*start))) {
    if (start) call.args.push_back(start);
    return fold_consuming(context, call);
  }
  // sum() is start + items[0] + items[1] + ..., left to right.
  ValuePtr total = start ? start : int_value(context, 0);
  for (const ValuePtr& item : context.unpack(call.args[0])) {
    total = context.binary_op(0 /* NB_ADD */, total, item);
  }
  return total;
}

}  // namespace

void register_builtins_model(ModelRegistry& registry) {
  struct Entry {
    const char* name;
    ModelFn fn;
  };
  static const Entry kEntries[] = {
      {"len", len_model},         {"isinstance", isinstance_model}, {"getattr", getattr_model},
      {"hasattr", getattr_model}, {"type", type_model},             {"callable", callable_model},
      {"bool", bool_model},       {"abs", abs_model},               {"round", round_model},
      {"pow", pow_model},         {"print", print_model},           {"tuple", sequence_model},
      {"list", sequence_model},   {"iter", iter_model},             {"next", next_model},
      {"map", map_model},         {"filter", map_model},            {"enumerate", enumerate_model},
      {"zip", zip_model},         {"reversed", reversed_model},     {"sum", sum_model},
      // On constants only: run for real.
      {"int", fold},              {"float", fold},                  {"str", fold},
      {"divmod", fold},           {"range", fold},                  {"slice", fold},
      {"min", min_max_model},     {"max", min_max_model},           {"sorted", fold_consuming},
      {"any", fold_consuming},    {"all", fold_consuming},          {"set", fold_consuming},
      {"frozenset", fold_consuming},
  };
  for (const Entry& entry : kEntries) registry.add("builtins", entry.name, entry.fn);
}

}  // namespace kiln::stdlib
