// The operator module: each function means what its Python operator means
// to the tracer (a graph node when a tensor is involved, folded on Python
// values), and itemgetter/attrgetter/methodcaller objects apply their
// subscripts, attribute reads and method calls to their argument.
#include "stdlib/model_registry.h"
#include "stdlib/model_support.h"

namespace kiln::stdlib {
namespace {

using cpython::Op;

//  X(operator function, BINARY_OP code); in-place forms ("iadd") are 13 + code.
#define KILN_OPERATOR_BINARY(X)                                                              \
  X(add, 0) X(and_, 1) X(floordiv, 2) X(lshift, 3) X(matmul, 4) X(mul, 5) X(mod, 6) X(or_, 7) \
  X(pow, 8) X(rshift, 9) X(sub, 10) X(truediv, 11) X(xor, 12)                                \
  X(iadd, 13) X(iand, 14) X(ifloordiv, 15) X(ilshift, 16) X(imatmul, 17) X(imul, 18)         \
  X(imod, 19) X(ior, 20) X(ipow, 21) X(irshift, 22) X(isub, 23) X(itruediv, 24) X(ixor, 25)

//  X(operator function, rich comparison code)
#define KILN_OPERATOR_COMPARE(X) X(lt, Py_LT) X(le, Py_LE) X(eq, Py_EQ) X(ne, Py_NE) X(gt, Py_GT) X(ge, Py_GE)

template <int NbOp>
ValuePtr binary(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  return context.binary_op(NbOp, call.args[0], call.args[1]);
}

template <int Cmp>
ValuePtr compare(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  return context.compare(Cmp, call.args[0], call.args[1]);
}

template <Op UnaryOp>
ValuePtr unary(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  return context.unary_op(UnaryOp, call.args[0]);
}

// concat / iconcat: + on sequences only (a tensor is not one).
template <int NbOp>
ValuePtr concat(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  for (const ValuePtr& arg : call.args) {
    if (!arg->is(ValueKind::Tuple) && !arg->is(ValueKind::List) &&
        !(arg->is(ValueKind::Constant) && PySequence_Check(arg->obj.get()))) {
      context.abort(BreakCode::PythonException, "TypeError: " + call.name + "() of " + tracer::describe_value(*arg));
    }
  }
  return context.binary_op(NbOp, call.args[0], call.args[1]);
}

ValuePtr truth(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  return context.constant(context.truthy(call.args[0]) ? Py_True : Py_False);
}

// operator.abs, operator.index, operator.contains...: a graph node on a
// tensor (abs), folded on constants.
ValuePtr tensor_or_fold(BuiltinContext& context, BuiltinCall& call) {
  if (call.args.size() == 1 && call.kwargs.empty() && call.args[0]->is(ValueKind::Tensor) && call.name == "operator.abs") {
    return context.call_torch(call.name, call.callee->obj.get(), call.args, {});
  }
  return fold_constants(context, call.callee->obj.get(), call, false);
}

// is_ / is_not, answered only where identity is a fact of the values:
// the singletons None, True, False.
ValuePtr identity(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  auto singleton = [](const Value& v) {
    return v.is(ValueKind::Constant) && (v.obj.get() == Py_None || v.obj.get() == Py_True || v.obj.get() == Py_False);
  };
  const Value& a = *call.args[0];
  const Value& b = *call.args[1];
  if (!singleton(a) && !singleton(b)) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() of " + tracer::describe_value(a) + " and " +
                                                  tracer::describe_value(b));
  }
  bool same = a.is(ValueKind::Constant) && b.is(ValueKind::Constant) && a.obj.get() == b.obj.get();
  if (call.name == "operator.is_not") same = !same;
  return context.constant(same ? Py_True : Py_False);
}

ValuePtr getitem(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  return context.subscript(call.args[0], call.args[1]);
}

ValuePtr setitem(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 3, 3);
  context.store_subscript(call.args[0], call.args[1], call.args[2]);
  return context.constant(Py_None);
}

// itemgetter(...), attrgetter(...), methodcaller(...): a StdObject holding
// the constructor's arguments.
ValuePtr make_getter(BuiltinContext& context, BuiltinCall& call) {
  if (call.args.empty()) context.abort(BreakCode::PythonException, "TypeError: " + call.name + " expected 1 argument");
  if (call.name != "operator.methodcaller" && !call.kwargs.empty()) {
    context.abort(BreakCode::PythonException, "TypeError: " + call.name + "() takes no keyword arguments");
  }
  return make_std_object(call.callee->obj.get(), std::move(call.args), call.kwargs);
}

// The constructor's arguments of a getter: from the trace for a StdObject;
// for a real one (immutable, and identity-guarded) from its __reduce__.
std::pair<std::vector<ValuePtr>, KwArgs> getter_arguments(BuiltinContext& context, const ValuePtr& getter) {
  if (getter->is(ValueKind::StdObject)) {
    KwArgs kwargs;
    const Value& keywords = *getter->items[1];
    for (size_t i = 0; i < keywords.keys.size(); ++i) {
      kwargs.emplace_back(PyUnicode_AsUTF8(keywords.keys[i].get()), keywords.items[i]);
    }
    return {getter->items[0]->items, kwargs};
  }
  PyRef reduced = PyRef::steal(PyObject_CallMethod(getter->obj.get(), "__reduce__", nullptr));
  if (!reduced) context.abort_python_error("reading " + tracer::describe_value(*getter));
  if (!PyTuple_Check(reduced.get()) || PyTuple_GET_SIZE(reduced.get()) < 2 ||
      PyTuple_GET_ITEM(reduced.get(), 0) != reinterpret_cast<PyObject*>(Py_TYPE(getter->obj.get()))) {
    // methodcaller with keywords reduces to a partial: not modelled.
    context.abort(BreakCode::UnsupportedCall, "call of " + tracer::describe_value(*getter));
  }
  ValuePtr args = context.constant(PyTuple_GET_ITEM(reduced.get(), 1));
  return {args->items, {}};
}

ValuePtr call_itemgetter(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  auto [items, kwargs] = getter_arguments(context, call.callee);
  if (items.size() == 1) return context.subscript(call.args[0], items[0]);
  std::vector<ValuePtr> out;
  for (const ValuePtr& item : items) out.push_back(context.subscript(call.args[0], item));
  return tracer::make_sequence(ValueKind::Tuple, std::move(out));
}

// obj.a.b for the dotted name "a.b".
ValuePtr dotted_attr(BuiltinContext& context, ValuePtr obj, const ValuePtr& name) {
  if (!name->is(ValueKind::Constant) || !PyUnicode_Check(name->obj.get())) {
    context.abort(BreakCode::PythonException, "TypeError: attribute name must be a string");
  }
  PyRef dot = PyRef::steal(PyUnicode_FromOrdinal('.'));
  PyRef parts = PyRef::steal(PyUnicode_Split(name->obj.get(), dot.get(), -1));
  if (!parts) context.abort_python_error("attrgetter");
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts.get()); ++i) {
    obj = context.load_attr(obj, PyList_GET_ITEM(parts.get(), i));
  }
  return obj;
}

ValuePtr call_attrgetter(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  auto [names, kwargs] = getter_arguments(context, call.callee);
  if (names.size() == 1) return dotted_attr(context, call.args[0], names[0]);
  std::vector<ValuePtr> out;
  for (const ValuePtr& name : names) out.push_back(dotted_attr(context, call.args[0], name));
  return tracer::make_sequence(ValueKind::Tuple, std::move(out));
}

ValuePtr call_methodcaller(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  auto [args, kwargs] = getter_arguments(context, call.callee);
  const ValuePtr& name = args.at(0);
  if (!name->is(ValueKind::Constant) || !PyUnicode_Check(name->obj.get())) {
    context.abort(BreakCode::PythonException, "TypeError: method name must be a string");
  }
  ValuePtr method = context.load_attr(call.args[0], name->obj.get());
  return context.call(method, std::vector<ValuePtr>(args.begin() + 1, args.end()), std::move(kwargs));
}

}  // namespace

void register_operator_model(ModelRegistry& registry) {
#define KILN_ADD_BINARY(name, code) registry.add("operator", #name, binary<code>);
  KILN_OPERATOR_BINARY(KILN_ADD_BINARY)
#undef KILN_ADD_BINARY
#define KILN_ADD_COMPARE(name, code) registry.add("operator", #name, compare<code>);
  KILN_OPERATOR_COMPARE(KILN_ADD_COMPARE)
#undef KILN_ADD_COMPARE
  registry.add("operator", "concat", concat<0>);
  registry.add("operator", "iconcat", concat<13>);
  registry.add("operator", "neg", unary<Op::UnaryNegative>);
  registry.add("operator", "pos", unary<Op::UnaryPositive>);
  registry.add("operator", "invert", unary<Op::UnaryInvert>);
  registry.add("operator", "inv", unary<Op::UnaryInvert>);
  registry.add("operator", "not_", unary<Op::UnaryNot>);
  registry.add("operator", "truth", truth);
  registry.add("operator", "abs", tensor_or_fold);
  registry.add("operator", "index", tensor_or_fold);
  registry.add("operator", "contains", tensor_or_fold);
  registry.add("operator", "countOf", tensor_or_fold);
  registry.add("operator", "indexOf", tensor_or_fold);
  registry.add("operator", "is_", identity);
  registry.add("operator", "is_not", identity);
  registry.add("operator", "getitem", getitem);
  registry.add("operator", "setitem", setitem);
  for (const char* getter : {"itemgetter", "attrgetter", "methodcaller"}) {
    registry.add("operator", getter, make_getter);
  }
  registry.add_instances("operator", "itemgetter", call_itemgetter);
  registry.add_instances("operator", "attrgetter", call_attrgetter);
  registry.add_instances("operator", "methodcaller", call_methodcaller);
}

}  // namespace kiln::stdlib
