// Record types: namedtuples (Tuple values that remember their type) and
// dataclass instances the trace creates (Record values). Both are built
// symbolically, read field by field, and rebuilt with their real type when
// a frame returns them. See Note [Records].
#include "tracer/trace_state.h"
#include "runtime/class_dict.h"

namespace kiln::tracer {

// Note [Records]
// A namedtuple is a tuple: the tracer keeps it as a Tuple value whose
// tuple_type is the namedtuple class, so indexing, unpacking and iteration
// work unchanged; field reads go through the class's _fields. An input
// namedtuple is guarded by its exact type and its length; a returned one is
// rebuilt by `Type._make(items)`.
//
// A dataclass instance that comes in as an argument is an ordinary Object
// (attribute reads are guarded one by one). One the trace creates is a
// Record: its attributes live in the value (keys/items), written by the
// dataclass's own __init__, which is inlined like any method. Only plain
// dataclasses are modelled: not frozen (their __init__ goes through
// object.__setattr__), with a __dict__, object's __new__ and the generic
// __setattr__. A returned Record becomes a graph node that makes the object
// without running __init__ again and sets its __dict__ (rebuild_dataclass).

namespace {

PyRef intern(const char* text) { return PyRef::steal(PyUnicode_InternFromString(text)); }

PyRef type_attr(PyObject* type, const char* name) {
  PyRef value = PyRef::steal(PyObject_GetAttrString(type, name));
  if (!value) PyErr_Clear();
  return value;
}

// rebuild_dataclass(cls, fields): object.__new__(cls) with `fields` as its
// __dict__ contents; __init__ already ran during tracing.
PyObject* rebuild_dataclass(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyType_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "rebuild_dataclass(cls, dict)");
    return nullptr;
  }
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(args[0]);
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef obj = PyRef::steal(type->tp_new(type, empty.get(), nullptr));
  if (!obj) return nullptr;
  PyObject** dict = _PyObject_GetDictPtr(obj.get());
  if (!dict) {
    PyErr_SetString(PyExc_TypeError, "rebuild_dataclass: instances have no __dict__");
    return nullptr;
  }
  if (!*dict && !(*dict = PyDict_New())) return nullptr;
  if (PyDict_Update(*dict, args[1]) < 0) return nullptr;
  return obj.release();
}

PyObject* rebuild_dataclass_callable() {
  static PyMethodDef def = {"rebuild_dataclass", reinterpret_cast<PyCFunction>(rebuild_dataclass),
                            METH_FASTCALL, "Makes a dataclass instance from its fields without __init__."};
  static PyObject* callable = PyCFunction_New(&def, nullptr);
  return callable;
}

}  // namespace

bool is_namedtuple_type(PyObject* type) {
  if (!PyType_Check(type) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), &PyTuple_Type) ||
      type == reinterpret_cast<PyObject*>(&PyTuple_Type)) {
    return false;
  }
  PyRef fields = type_attr(type, "_fields");
  PyRef make = type_attr(type, "_make");
  if (!fields || !make || !PyTuple_Check(fields.get())) return false;
  // The fields must be the tuple's items: __new__ must be the one
  // collections.namedtuple generated (defined by a direct tuple subclass
  // that owns _fields), and no class may add an __init__.
  PyRef new_name = intern("__new__");
  PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    PyTypeObject* klass = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (!runtime::own_class_attr(klass, new_name.get())) continue;
    PyObject* bases = klass->tp_bases;
    const bool generated = PyTuple_GET_SIZE(bases) == 1 &&
                           PyTuple_GET_ITEM(bases, 0) == reinterpret_cast<PyObject*>(&PyTuple_Type) &&
                           runtime::own_class_attr(klass, "_fields");
    if (!generated) return false;
    break;
  }
  return reinterpret_cast<PyTypeObject*>(type)->tp_init == PyBaseObject_Type.tp_init;
}

bool is_plain_dataclass_type(PyObject* type) {
  if (!PyType_Check(type)) return false;
  PyTypeObject* t = reinterpret_cast<PyTypeObject*>(type);
  PyRef fields = type_attr(type, "__dataclass_fields__");
  PyRef params = type_attr(type, "__dataclass_params__");
  if (!fields || !params) return false;
  PyRef frozen = type_attr(params.get(), "frozen");
  if (!frozen || PyObject_IsTrue(frozen.get()) != 0) return false;
  PyRef init_name = intern("__init__");
  PyObject* init = _PyType_Lookup(t, init_name.get());
  return t->tp_dictoffset != 0 && t->tp_new == PyBaseObject_Type.tp_new &&
         t->tp_setattro == PyObject_GenericSetAttr && t->tp_getattro == PyObject_GenericGetAttr &&
         init && PyFunction_Check(init);
}

ValuePtr FrameTracer::make_namedtuple(PyObject* type, std::vector<ValuePtr> args, const KwArgs& kwargs) {
  PyRef fields = type_attr(type, "_fields");
  PyRef defaults = type_attr(type, "_field_defaults");
  const Py_ssize_t n = PyTuple_GET_SIZE(fields.get());
  const std::string type_name = reinterpret_cast<PyTypeObject*>(type)->tp_name;
  if (static_cast<Py_ssize_t>(args.size()) > n) {
    abort_trace(BreakCode::PythonException, "TypeError: " + type_name + "() takes too many arguments");
  }
  std::vector<ValuePtr> items(n);
  for (size_t i = 0; i < args.size(); ++i) items[i] = args[i];
  for (const auto& [key, value] : kwargs) {
    Py_ssize_t k = 0;
    while (k < n && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(fields.get(), k), key.c_str()) != 0) ++k;
    if (k == n || items[k]) {
      abort_trace(BreakCode::PythonException, "TypeError: " + type_name + "() got a bad argument '" + key + "'");
    }
    items[k] = value;
  }
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (items[k]) continue;
    PyObject* fallback = defaults && PyDict_Check(defaults.get())
                             ? PyDict_GetItem(defaults.get(), PyTuple_GET_ITEM(fields.get(), k))
                             : nullptr;
    if (!fallback) {
      abort_trace(BreakCode::PythonException, "TypeError: " + type_name + "() missing argument '" +
                                                  PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.get(), k)) + "'");
    }
    items[k] = state_.wrap_unguarded(fallback);
  }
  ValuePtr value = make_sequence(ValueKind::Tuple, std::move(items));
  value->tuple_type = PyRef::borrow(type);
  return value;
}

ValuePtr FrameTracer::namedtuple_attr(const ValuePtr& base, PyObject* name) {
  PyObject* type = base->tuple_type.get();
  if (!is_namedtuple_type(type)) return nullptr;
  const std::string attr = PyUnicode_AsUTF8(name);
  if (attr == "_replace" || attr == "_asdict") {
    auto method = std::make_shared<Value>();
    method->kind = ValueKind::ContainerMethod;
    method->self = base;
    method->name = attr;
    return method;
  }
  PyObject* class_attr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), name);
  if (!class_attr) return nullptr;
  if (PyFunction_Check(class_attr)) {
    // A method a subclass defines on the namedtuple.
    ValuePtr method = make_object(ValueKind::Method, PyRef::borrow(class_attr));
    method->self = base;
    return method;
  }
  if (Py_TYPE(class_attr)->tp_descr_get && !PyType_Check(class_attr)) {
    if (PyObject_TypeCheck(class_attr, &PyProperty_Type)) return class_descriptor(base, class_attr);
  }
  return nullptr;
}

ValuePtr FrameTracer::call_namedtuple_method(const ValuePtr& method, std::vector<ValuePtr> args,
                                             KwArgs kwargs) {
  const ValuePtr& self = method->self;
  PyObject* type = self->tuple_type.get();
  PyRef fields = type_attr(type, "_fields");
  const Py_ssize_t n = PyTuple_GET_SIZE(fields.get());
  if (method->name == "_replace" && args.empty()) {
    KwArgs all;
    for (Py_ssize_t k = 0; k < n && k < static_cast<Py_ssize_t>(self->items.size()); ++k) {
      all.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.get(), k)), self->items[k]);
    }
    for (const auto& [key, value] : kwargs) {
      bool found = false;
      for (auto& field : all) {
        if (field.first == key) {
          field.second = value;
          found = true;
        }
      }
      if (!found) abort_trace(BreakCode::PythonException, "ValueError: _replace() got an unexpected field '" + key + "'");
    }
    return make_namedtuple(type, {}, all);
  }
  if (method->name == "_asdict" && args.empty() && kwargs.empty()) {
    ValuePtr dict = make_sequence(ValueKind::Dict, {});
    for (Py_ssize_t k = 0; k < n && k < static_cast<Py_ssize_t>(self->items.size()); ++k) {
      dict->keys.push_back(PyRef::borrow(PyTuple_GET_ITEM(fields.get(), k)));
      dict->items.push_back(self->items[k]);
    }
    return dict;
  }
  abort_trace(BreakCode::UnsupportedCall, "namedtuple method " + method->name + "() is not traced");
}

ValuePtr FrameTracer::make_dataclass(const ValuePtr& cls, std::vector<ValuePtr> args, KwArgs kwargs) {
  auto record = std::make_shared<Value>();
  record->kind = ValueKind::Record;
  record->tuple_type = cls->obj;
  record->self = cls;
  PyRef init_name = intern("__init__");
  PyObject* init = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls->obj.get()), init_name.get());
  args.insert(args.begin(), record);
  // The generated __init__ closes over the field defaults and types; with
  // the class's source its cells are re-fetched (and guarded) through it.
  const int init_source = cls->source >= 0 ? state_.sources().attr(cls->source, init_name.get()) : -1;
  ValuePtr result = inline_function(init, init_source, std::move(args), std::move(kwargs));
  if (!result->is(ValueKind::Constant) || result->obj.get() != Py_None) {
    abort_trace(BreakCode::PythonException, "TypeError: __init__() should return None");
  }
  return record;
}

ValuePtr FrameTracer::record_attr(const ValuePtr& record, PyObject* name) {
  for (size_t i = 0; i < record->keys.size(); ++i) {
    if (PyUnicode_Compare(record->keys[i].get(), name) == 0) return record->items[i];
  }
  PyErr_Clear();
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(record->tuple_type.get());
  if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return record->self;
  PyObject* class_attr = _PyType_Lookup(type, name);
  if (class_attr && PyFunction_Check(class_attr)) {
    ValuePtr method = make_object(ValueKind::Method, PyRef::borrow(class_attr));
    method->self = record;
    return method;
  }
  if (class_attr && Py_TYPE(class_attr)->tp_descr_get && !PyType_Check(class_attr)) {
    if (PyObject_TypeCheck(class_attr, &PyProperty_Type)) {
      if (ValuePtr value = class_descriptor(record, class_attr)) return value;
    }
    abort_trace(BreakCode::UnsupportedAttribute,
                std::string(type->tp_name) + "." + PyUnicode_AsUTF8(name) + " is a descriptor kiln does not trace yet");
  }
  if (class_attr) return load_attr(record->self, name);  // read and guarded through the class
  abort_trace(BreakCode::PythonException, std::string("AttributeError: '") + type->tp_name +
                                              "' object has no attribute '" + PyUnicode_AsUTF8(name) + "'");
}

void FrameTracer::store_record_attr(const ValuePtr& record, PyObject* name, const ValuePtr& value) {
  state_.note_mutation();
  for (size_t i = 0; i < record->keys.size(); ++i) {
    if (PyUnicode_Compare(record->keys[i].get(), name) == 0) {
      record->items[i] = value;
      return;
    }
  }
  record->keys.push_back(PyRef::borrow(name));
  record->items.push_back(value);
}

graph::Arg TraceState::lower_record(const ValuePtr& record) {
  graph::Arg fields;
  fields.kind = graph::Arg::Kind::Dict;
  for (size_t i = 0; i < record->items.size(); ++i) {
    Py_INCREF(record->keys[i].get());
    fields.keys.push_back(record->keys[i].get());
    fields.items.push_back(lower_output(record->items[i]));
  }
  std::vector<graph::Arg> args;
  args.push_back(graph::Arg::of_constant(record->tuple_type.get()));
  args.push_back(std::move(fields));
  return graph::Arg::of_node(graph_->add_call("kiln.rebuild_dataclass", rebuild_dataclass_callable(),
                                              std::move(args), {}));
}

PyRef namedtuple_rebuilder(PyObject* type) {
  if (!is_namedtuple_type(type)) return PyRef::borrow(type);  // torch.return_types take one sequence
  return type_attr(type, "_make");
}

}  // namespace kiln::tracer
