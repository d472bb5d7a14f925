// Python operators on symbolic values: folded on Python values, graph nodes
// (through the operator module) when a tensor is involved.
#include "base/torch_api.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {
namespace {

// BINARY_OP's NB_* codes (identical on 3.11 and 3.12) and their operator
// module functions; in-place forms follow at 13 + code.
constexpr const char* kBinaryNames[] = {"add", "and_", "floordiv", "lshift", "matmul", "mul", "mod",
                                        "or_", "pow", "rshift", "sub", "truediv", "xor"};
constexpr const char* kInplaceNames[] = {"iadd", "iand", "ifloordiv", "ilshift", "imatmul",
                                         "imul", "imod", "ior", "ipow", "irshift", "isub",
                                         "itruediv", "ixor"};
constexpr int kBinaryCount = 13;

// Rich comparison codes Py_LT..Py_GE and their operator functions.
constexpr const char* kCompareNames[] = {"lt", "le", "eq", "ne", "gt", "ge"};

PyRef operator_function(const char* name) {
  return PyRef::steal(PyObject_GetAttrString(base::torch_api()->operator_module, name));
}

}  // namespace

ValuePtr FrameTracer::binary_op(int nb_op, const ValuePtr& a, const ValuePtr& b) {
  if (nb_op < 0 || nb_op >= 2 * kBinaryCount) {
    abort_trace(BreakCode::UnsupportedOperator, "binary operator " + std::to_string(nb_op));
  }
  const bool inplace = nb_op >= kBinaryCount;
  const char* name = inplace ? kInplaceNames[nb_op - kBinaryCount] : kBinaryNames[nb_op];
  PyRef fn = operator_function(name);
  if (a->is(ValueKind::Tensor) || b->is(ValueKind::Tensor)) {
    if (inplace && a->is(ValueKind::Tensor) && a->source >= 0) {
      // x += y on an input mutates it: still exact under eager replay, since
      // the node runs on the very tensor object the caller passed.
    }
    return state_.call_torch(std::string("operator.") + name, fn.get(), {a, b}, {}, false);
  }
  if (a->is(ValueKind::SymInt) || b->is(ValueKind::SymInt)) {
    return state_.sym_arithmetic(std::string("operator.") + name, fn.get(), {a, b});
  }
  const bool a_seq = a->is(ValueKind::Tuple) || a->is(ValueKind::List);
  const bool b_seq = b->is(ValueKind::Tuple) || b->is(ValueKind::List);
  const int base_op = inplace ? nb_op - kBinaryCount : nb_op;
  if (a_seq && b_seq && base_op == 0 /* add */) {
    if (inplace && a->is(ValueKind::List) && a->source >= 0) state_.note_container_write(a);
    std::vector<ValuePtr> items = a->items;
    items.insert(items.end(), b->items.begin(), b->items.end());
    if (inplace && a->is(ValueKind::List)) {
      state_.note_mutation(a);
      a->items = std::move(items);
      return a;
    }
    return make_sequence(a->kind, std::move(items));
  }
  if (a->is(ValueKind::Dict) && b->is(ValueKind::Dict) && base_op == 7 /* or */) {
    // d | other is a copy of d updated by other (an OrderedDict's an
    // OrderedDict); d |= other updates d: transformers merges kwargs so.
    ValuePtr merged = inplace ? a : copy_dict(*a);
    for (size_t i = 0; i < b->items.size(); ++i) {
      store_subscript(merged, state_.wrap_unguarded(b->keys[i].get()), b->items[i]);
    }
    return merged;
  }
  if (a_seq && b->is(ValueKind::Constant) && PyLong_Check(b->obj.get()) && base_op == 5 /* mul */) {
    std::vector<ValuePtr> items;
    const long times = PyLong_AsLong(b->obj.get());
    for (long t = 0; t < times; ++t) items.insert(items.end(), a->items.begin(), a->items.end());
    return make_sequence(a->kind, std::move(items));
  }
  PyRef left = constant_to_python(a);
  PyRef right = constant_to_python(b);
  if (!left || !right) {
    abort_trace(BreakCode::UnsupportedOperator, std::string("operator.") + name + " on " +
                                                    describe_value(*a) + " and " + describe_value(*b));
  }
  PyRef result = PyRef::steal(PyObject_CallFunctionObjArgs(fn.get(), left.get(), right.get(), nullptr));
  if (!result) abort_trace(BreakCode::PythonException, take_python_error());
  return state_.wrap_unguarded(result.get());
}

ValuePtr FrameTracer::compare_op(int cmp, const ValuePtr& a, const ValuePtr& b) {
  if (cmp < Py_LT || cmp > Py_GE) abort_trace(BreakCode::UnsupportedOperator, "comparison " + std::to_string(cmp));
  if (a->is(ValueKind::Tensor) || b->is(ValueKind::Tensor)) {
    PyRef fn = operator_function(kCompareNames[cmp]);
    return state_.call_torch(std::string("operator.") + kCompareNames[cmp], fn.get(), {a, b}, {}, false);
  }
  if (a->is(ValueKind::SymInt) || b->is(ValueKind::SymInt)) {
    return state_.sym_compare(cmp, a, b);
  }
  if (ValuePtr result = compare_enum(cmp, a, b)) return result;
  if (ValuePtr result = compare_objects(cmp, a, b)) return result;
  // A tuple, list or dict never equals a scalar constant (neither side's
  // __eq__ knows the other): `match` tries literal patterns on any subject.
  auto container = [](const ValuePtr& v) {
    return v->is(ValueKind::Tuple) || v->is(ValueKind::List) || v->is(ValueKind::Dict);
  };
  if ((cmp == Py_EQ || cmp == Py_NE) && ((container(a) && b->is(ValueKind::Constant)) ||
                                         (container(b) && a->is(ValueKind::Constant)))) {
    return state_.wrap_unguarded(cmp == Py_NE ? Py_True : Py_False);
  }
  PyRef left = constant_to_python(a);
  PyRef right = constant_to_python(b);
  if (!left || !right) {
    abort_trace(BreakCode::UnsupportedOperator, "comparison of " + describe_value(*a) + " and " + describe_value(*b));
  }
  PyRef result = PyRef::steal(PyObject_RichCompare(left.get(), right.get(), cmp));
  if (!result) abort_trace(BreakCode::PythonException, take_python_error());
  return state_.wrap_unguarded(result.get());
}

namespace {

// True when `type` inherits __eq__ and __hash__ from one of the immutable
// builtin value types (str, int, float, bytes, tuple, frozenset), as an
// Enum with such a mixin does: comparing its instances runs no Python code.
bool has_value_equality(PyTypeObject* type) {
  static PyTypeObject* const kValueTypes[] = {&PyUnicode_Type, &PyLong_Type,  &PyFloat_Type,
                                              &PyBytes_Type,   &PyTuple_Type, &PyFrozenSet_Type};
  PyRef eq_name = PyRef::steal(PyUnicode_InternFromString("__eq__"));
  PyObject* eq = _PyType_Lookup(type, eq_name.get());
  for (PyTypeObject* value_type : kValueTypes) {
    if (eq && eq == _PyType_Lookup(value_type, eq_name.get()) && PyType_IsSubtype(type, value_type)) return true;
  }
  return false;
}

}  // namespace

ValuePtr FrameTracer::compare_objects(int cmp, const ValuePtr& a, const ValuePtr& b) {
  if (cmp != Py_EQ && cmp != Py_NE) return nullptr;
  const bool a_object = a->is(ValueKind::Object);
  if (!a_object && !b->is(ValueKind::Object)) return nullptr;
  const ValuePtr& self = a_object ? a : b;
  const ValuePtr& other = a_object ? b : a;
  // The other side must not have an __eq__ of its own that could answer
  // first (or be asked back): a Python constant or another Object.
  if (!other->is(ValueKind::Constant) && !other->is(ValueKind::Object)) return nullptr;
  if (other->is(ValueKind::Object) && Py_TYPE(other->obj.get()) != Py_TYPE(self->obj.get())) return nullptr;
  PyTypeObject* type = Py_TYPE(self->obj.get());
  PyRef eq_name = PyRef::steal(PyUnicode_InternFromString("__eq__"));
  PyRef ne_name = PyRef::steal(PyUnicode_InternFromString("__ne__"));
  PyObject* eq = _PyType_Lookup(type, eq_name.get());
  PyObject* ne = _PyType_Lookup(type, ne_name.get());
  if (ne && PyFunction_Check(ne)) return nullptr;  // a custom != is not modelled
  bool equal;
  if (eq && PyFunction_Check(eq)) {
    // The class's own __eq__ (a dataclass's, say) is Python code: inline it.
    ValuePtr result = inline_function(eq, -1, {self, other}, {});
    if (!result->is(ValueKind::Constant)) return nullptr;
    if (result->obj.get() == Py_NotImplemented) {
      state_.pin_identity(self, "compared by identity");  // Note [Objects guarded by type]
      state_.pin_identity(other, "compared by identity");
      equal = self->obj.get() == other->obj.get();  // CPython's last resort: identity
    } else {
      equal = truthiness(result);
    }
  } else if (eq == _PyType_Lookup(&PyBaseObject_Type, eq_name.get())) {
    state_.pin_identity(self, "compared by identity");  // Note [Objects guarded by type]
    state_.pin_identity(other, "compared by identity");
    equal = self->obj.get() == other->obj.get();  // object.__eq__ is identity
  } else if (has_value_equality(type)) {
    // An Object of an immutable builtin value type's subclass (a str or int
    // Enum member): its C __eq__ runs no user code and its value is fixed.
    const int result = PyObject_RichCompareBool(self->obj.get(), other->obj.get(), Py_EQ);
    if (result < 0) abort_trace(BreakCode::PythonException, take_python_error());
    equal = result == 1;
  } else {
    return nullptr;
  }
  return state_.wrap_unguarded(equal == (cmp == Py_EQ) ? Py_True : Py_False);
}

ValuePtr FrameTracer::unary_op(cpython::Op op, const ValuePtr& a) {
  if (op == cpython::Op::UnaryNot) {
    return state_.wrap_unguarded(truthiness(a) ? Py_False : Py_True);
  }
  const char* name = op == cpython::Op::UnaryNegative   ? "neg"
                     : op == cpython::Op::UnaryPositive ? "pos"
                                                            : "invert";
  PyRef fn = operator_function(name);
  if (a->is(ValueKind::Tensor) && op == cpython::Op::UnaryPositive && a->meta.dtype != graph::DType::Bool) {
    return a;  // +t is t itself in torch (torch.positive aliases), which `is` can observe
  }
  if (a->is(ValueKind::Tensor)) {
    return state_.call_torch(std::string("operator.") + name, fn.get(), {a}, {}, false);
  }
  if (a->is(ValueKind::SymInt)) return state_.sym_arithmetic(std::string("operator.") + name, fn.get(), {a});
  if (!a->is(ValueKind::Constant)) {
    abort_trace(BreakCode::UnsupportedOperator, std::string("operator.") + name + " on " + describe_value(*a));
  }
  PyRef result = PyRef::steal(PyObject_CallOneArg(fn.get(), a->obj.get()));
  if (!result) abort_trace(BreakCode::PythonException, take_python_error());
  return state_.wrap_unguarded(result.get());
}

bool FrameTracer::truthiness(const ValuePtr& value) {
  switch (value->kind) {
    case ValueKind::Constant: {
      int truth = PyObject_IsTrue(value->obj.get());
      if (truth < 0) abort_trace(BreakCode::PythonException, take_python_error());
      return truth == 1;
    }
    case ValueKind::Tuple:
    case ValueKind::List:
    case ValueKind::Dict:
      return !value->items.empty();
    case ValueKind::Set:
      return PySet_GET_SIZE(value->obj.get()) > 0 || !value->items.empty();
    case ValueKind::Tensor:
      abort_trace(BreakCode::DataDependent, "branching on the value of a tensor");
    case ValueKind::SymInt: {
      if (value->sym_slice) return true;  // a slice is always true
      // `if n:` is `n != 0`, a size relation like any comparison.
      PyRef zero = PyRef::steal(PyLong_FromLong(0));
      return truthiness(state_.sym_compare(Py_NE, value, state_.wrap_unguarded(zero.get())));
    }
    case ValueKind::Module: {
      PyTypeObject* type = Py_TYPE(value->obj.get());
      const bool sized = type->tp_as_sequence && type->tp_as_sequence->sq_length;
      if (!sized) return true;
      return !unpack(get_iter(value), -1).empty();
    }
    case ValueKind::Object:
      if (!value->contents) abort_trace(BreakCode::UnsupportedValue, "truth value of " + describe_value(*value));
      [[fallthrough]];  // a dict-backed Object (Note [Dict-backed objects]) reads as a Record does
    case ValueKind::Record: {
      // The class's __bool__ or __len__, else a dict's items, else true.
      if (ValuePtr truth = call_python_special(value, "__bool__", {})) return truthiness(truth);
      if (ValuePtr n = call_python_special(value, "__len__", {})) return truthiness(n);
      return !value->contents || !value->contents->items.empty();
    }
    case ValueKind::Function:
    case ValueKind::Method:
    case ValueKind::TensorMethod:
    case ValueKind::TorchCallable:
    case ValueKind::Builtin:
    case ValueKind::PyModule:
      return true;
    default:
      abort_trace(BreakCode::UnsupportedValue, "truth value of " + describe_value(*value));
  }
}

}  // namespace kiln::tracer
