#include "tracer/value.h"

namespace kiln::tracer {

namespace {

// enum.Enum, looked up once; null if `enum` fails to import.
PyObject* enum_base() {
  static PyObject* base = [] {
    PyRef module = PyRef::steal(PyImport_ImportModule("enum"));
    PyObject* found = module ? PyObject_GetAttrString(module.get(), "Enum") : nullptr;
    if (!found) PyErr_Clear();
    return found;  // kept for the process
  }();
  return base;
}

}  // namespace

bool is_enum_class(PyObject* obj) {
  PyObject* base = enum_base();
  return base && PyType_Check(obj) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(obj), reinterpret_cast<PyTypeObject*>(base));
}

bool is_enum_member(PyObject* obj) { return obj && is_enum_class(reinterpret_cast<PyObject*>(Py_TYPE(obj))); }

bool native_equality(PyTypeObject* type) {
  for (const char* name : {"__eq__", "__ne__"}) {
    PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
    PyObject* found = _PyType_Lookup(type, key.get());
    if (found && PyFunction_Check(found)) return false;
  }
  return true;
}

bool identity_equality(PyTypeObject* type) {
  return type->tp_richcompare == PyBaseObject_Type.tp_richcompare && type->tp_hash == PyBaseObject_Type.tp_hash;
}

bool any_requires_grad(const std::vector<ValuePtr>& values) {
  for (const ValuePtr& value : values) {
    if (!value) continue;
    if (value->is(ValueKind::Tensor) && value->meta.requires_grad) return true;
    const bool sequence = value->is(ValueKind::Tuple) || value->is(ValueKind::List);
    if (sequence && any_requires_grad(value->items)) return true;
  }
  return false;
}

bool is_key_value(const Value& value) {
  if (value.kind == ValueKind::Constant) return true;
  if (value.kind != ValueKind::Object || value.identity_deferred) return false;
  PyTypeObject* type = Py_TYPE(value.obj.get());
  return (is_enum_member(value.obj.get()) && native_equality(type)) || identity_equality(type);
}

uint64_t next_value_birth() {
  // Traces run under the GIL, one at a time per interpreter.
  static uint64_t births = 0;
  return ++births;
}


const char* value_kind_name(ValueKind kind) {
  switch (kind) {
#define KILN_VALUE_NAME(name, doc) \
  case ValueKind::name: return #name;
    KILN_VALUE_KINDS(KILN_VALUE_NAME)
#undef KILN_VALUE_NAME
  }
  return "?";
}

ValuePtr make_null() { return std::make_shared<Value>(); }

ValuePtr make_constant(PyRef obj, int source) {
  auto value = std::make_shared<Value>();
  value->kind = ValueKind::Constant;
  value->obj = std::move(obj);
  value->source = source;
  return value;
}

ValuePtr make_sequence(ValueKind kind, std::vector<ValuePtr> items, int source) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  value->items = std::move(items);
  value->source = source;
  return value;
}

ValuePtr copy_dict(const Value& dict) {
  ValuePtr copy = make_sequence(ValueKind::Dict, dict.items);
  copy->keys = dict.keys;
  copy->tuple_type = dict.tuple_type;
  copy->self = dict.self;
  return copy;
}

ValuePtr make_object(ValueKind kind, PyRef obj, int source) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  value->obj = std::move(obj);
  value->source = source;
  return value;
}

std::string describe_value(const Value& value) {
  std::string out = value_kind_name(value.kind);
  if (value.kind == ValueKind::Tensor) return out + " " + graph::format_tensor_meta(value.meta);
  if (value.kind == ValueKind::TensorMethod) return "Tensor." + value.name;
  if (value.kind == ValueKind::SymInt) {
    return out + " (" + std::to_string(value.sym_points.empty() ? 0 : value.sym_points[0]) + " here)";
  }
  if (value.obj) {
    PyObject* text = PyObject_Repr(value.obj.get());
    if (text) {
      std::string repr = PyUnicode_AsUTF8(text);
      Py_DECREF(text);
      if (repr.size() > 60) repr = repr.substr(0, 57) + "...";
      return out + " " + repr;
    }
    PyErr_Clear();
  }
  return out;
}

}  // namespace kiln::tracer
