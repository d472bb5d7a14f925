// `match` statements: the opcodes pattern matching compiles to (GET_LEN,
// MATCH_SEQUENCE, MATCH_MAPPING, MATCH_KEYS, MATCH_CLASS), evaluated on
// symbolic values. Literal and value patterns are COMPARE_OP/IS_OP, and
// captures are stores, which the frame loop already traces.
#include "base/torch_api.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {
namespace {

// The Python type of a value whose type the trace knows (null otherwise).
// `exact` says whether it is the object's exact type or only a base.
PyObject* known_type(const ValuePtr& value) {
  if (value->tuple_type) return value->tuple_type.get();
  switch (value->kind) {
    case ValueKind::Tensor:
      return value->obj ? value->obj.get() : base::torch_api()->tensor_type;
    case ValueKind::Tuple:
      return value->obj ? reinterpret_cast<PyObject*>(Py_TYPE(value->obj.get()))
                        : reinterpret_cast<PyObject*>(&PyTuple_Type);
    case ValueKind::List:
      return reinterpret_cast<PyObject*>(&PyList_Type);
    case ValueKind::Dict:
      return reinterpret_cast<PyObject*>(&PyDict_Type);
    case ValueKind::Constant:
    case ValueKind::Object:
    case ValueKind::Module:
    case ValueKind::Function:
    case ValueKind::PyModule:
      return reinterpret_cast<PyObject*>(Py_TYPE(value->obj.get()));
    default:
      return nullptr;
  }
}

// Builtin types whose class pattern `C(x)` matches the subject itself
// (CPython's MATCH_SELF types).
bool matches_self(PyTypeObject* type) {
  static const unsigned long kFlags = Py_TPFLAGS_LONG_SUBCLASS | Py_TPFLAGS_LIST_SUBCLASS |
                                      Py_TPFLAGS_TUPLE_SUBCLASS | Py_TPFLAGS_BYTES_SUBCLASS |
                                      Py_TPFLAGS_UNICODE_SUBCLASS | Py_TPFLAGS_DICT_SUBCLASS;
  PyTypeObject* self_types[] = {&PyBool_Type, &PyByteArray_Type, &PyFloat_Type, &PyFrozenSet_Type, &PySet_Type};
  for (PyTypeObject* t : self_types) {
    if (PyType_IsSubtype(type, t)) return true;
  }
  return (type->tp_flags & kFlags) != 0;
}

}  // namespace

void FrameTracer::step_match(const cpython::Instruction& ins) {
  using cpython::Op;
  switch (ins.op) {
    case Op::GetLen: {
      const ValuePtr& subject = top();
      Py_ssize_t n = -1;
      if (subject->is(ValueKind::Tuple) || subject->is(ValueKind::List) || subject->is(ValueKind::Dict)) {
        n = static_cast<Py_ssize_t>(subject->items.size());
      } else if (subject->is(ValueKind::Constant)) {
        n = PyObject_Length(subject->obj.get());
        if (n < 0) abort_trace(BreakCode::PythonException, take_python_error());
      } else {
        abort_trace(BreakCode::UnsupportedValue, "len() of " + describe_value(*subject));
      }
      PyRef length = PyRef::steal(PyLong_FromSsize_t(n));
      push(state_.wrap_unguarded(length.get()));
      return;
    }
    case Op::MatchSequence:
    case Op::MatchMapping: {
      const ValuePtr& subject = top();
      PyObject* type = known_type(subject);
      if (!type) abort_trace(BreakCode::UnsupportedValue, "match on " + describe_value(*subject));
      // The same type flags CPython tests (collections.abc registration sets them).
      const unsigned long flag = ins.op == Op::MatchSequence ? Py_TPFLAGS_SEQUENCE : Py_TPFLAGS_MAPPING;
      const bool matches = (reinterpret_cast<PyTypeObject*>(type)->tp_flags & flag) != 0;
      push(state_.wrap_unguarded(matches ? Py_True : Py_False));
      return;
    }
    case Op::MatchKeys: {
      // [subject, keys] -> [subject, keys, values-or-None]
      const ValuePtr& keys = top(1);
      const ValuePtr& subject = top(2);
      if (!subject->is(ValueKind::Dict)) abort_trace(BreakCode::UnsupportedValue, "mapping pattern on " + describe_value(*subject));
      PyRef key_tuple = constant_to_python(keys);
      if (!key_tuple || !PyTuple_Check(key_tuple.get())) abort_trace(BreakCode::UnsupportedValue, "mapping pattern keys");
      std::vector<ValuePtr> values;
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(key_tuple.get()); ++k) {
        PyObject* key = PyTuple_GET_ITEM(key_tuple.get(), k);
        ValuePtr found;
        for (size_t i = 0; i < subject->keys.size() && !found; ++i) {
          const int equal = PyObject_RichCompareBool(subject->keys[i].get(), key, Py_EQ);
          if (equal < 0) abort_trace(BreakCode::PythonException, take_python_error());
          if (equal) found = subject->items[i];
        }
        if (!found) {
          push(state_.wrap_unguarded(Py_None));
          return;
        }
        values.push_back(found);
      }
      push(make_sequence(ValueKind::Tuple, std::move(values)));
      return;
    }
    case Op::MatchClass: {
      ValuePtr names = pop();
      ValuePtr cls = pop();
      ValuePtr subject = pop();
      push(match_class(subject, cls, names, ins.arg));
      return;
    }
    default:
      abort_trace(BreakCode::UnsupportedOpcode, std::string("opcode ") + ins.raw_name);
  }
}

ValuePtr FrameTracer::match_class(const ValuePtr& subject, const ValuePtr& cls, const ValuePtr& names, int positional) {
  if (!cls->obj || !PyType_Check(cls->obj.get())) {
    abort_trace(BreakCode::PythonException, "TypeError: called match pattern must be a class");
  }
  PyTypeObject* pattern = reinterpret_cast<PyTypeObject*>(cls->obj.get());
  PyObject* type = subject->is(ValueKind::Record) ? subject->tuple_type.get() : known_type(subject);
  if (!type) abort_trace(BreakCode::UnsupportedValue, "class pattern on " + describe_value(*subject));
  // A tensor input's exact type is guarded (a Parameter is not a Tensor).
  if (subject->is(ValueKind::Tensor) && subject->source >= 0) state_.guards().add_type_match(subject->source, type);
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), pattern)) return state_.wrap_unguarded(Py_None);
  std::vector<ValuePtr> attrs;
  if (positional > 0) {
    if (matches_self(pattern) && positional == 1 && !PyObject_HasAttrString(cls->obj.get(), "__match_args__")) {
      attrs.push_back(subject);
    } else {
      PyRef match_args = PyRef::steal(PyObject_GetAttrString(cls->obj.get(), "__match_args__"));
      if (!match_args || !PyTuple_Check(match_args.get()) || PyTuple_GET_SIZE(match_args.get()) < positional) {
        PyErr_Clear();
        abort_trace(BreakCode::PythonException, std::string("TypeError: ") + pattern->tp_name +
                                                    "() accepts fewer positional sub-patterns");
      }
      for (int k = 0; k < positional; ++k) attrs.push_back(load_attr(subject, PyTuple_GET_ITEM(match_args.get(), k)));
    }
  }
  PyRef keywords = constant_to_python(names);
  if (!keywords || !PyTuple_Check(keywords.get())) abort_trace(BreakCode::UnsupportedValue, "class pattern keywords");
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keywords.get()); ++k) {
    // A missing attribute makes the pattern fail; only modelled values
    // answer that question without running code.
    PyObject* name = PyTuple_GET_ITEM(keywords.get(), k);
    if (subject->obj && !subject->is(ValueKind::Tensor) && !PyObject_HasAttr(subject->obj.get(), name)) {
      return state_.wrap_unguarded(Py_None);
    }
    attrs.push_back(load_attr(subject, name));
  }
  return make_sequence(ValueKind::Tuple, std::move(attrs));
}

}  // namespace kiln::tracer
