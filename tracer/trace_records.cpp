// Record types: namedtuples (Tuple values that remember their type) and
// instances of plain Python classes the trace creates (Record values). Both
// are built symbolically, read field by field, and rebuilt with their real
// type when they leave the trace. See Note [Records] and Note [User objects].
#include <cstring>

#include "tracer/frame_tracer.h"
#include "base/class_dict.h"
#include "base/dict_order.h"
#include "base/torch_api.h"

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
// Record (Note [User objects]).

// Note [User objects]
// An instance of a plain Python class the trace creates (a dataclass,
// transformers' ModelOutput, a cache object, a small helper class) is a
// Record: its instance __dict__ is a Dict value (attrs) and, for a subclass
// of dict or OrderedDict, its items are another (contents). Creating one
// inlines the class's __init__ on the Record. Attribute reads follow the
// generic lookup: a data descriptor of the class (a property's getter is
// inlined), then the instance dict, then the class (functions bind, dict
// methods the class does not override work on contents), then a Python
// __getattr__. Stores go through a Python __setattr__ when the class has
// one; object.__setattr__ and super().__setattr__ are the generic store
// into attrs. super() reaches dict's and OrderedDict's methods (__setitem__,
// get, ...) on contents, and item access, `in`, len() and iteration use the
// class's Python dunders or else contents. The class must make its
// instances without running Python code (the __new__ of object, dict or
// OrderedDict; no metaclass __call__) and have no finalizer (eager Python
// would run __del__ when the object dies; nothing runs it for a Record).
// A Record leaves the trace rebuilt without running __init__ again: at the
// frame's return by a graph node, at a graph break by the transformed
// code, both through rebuild_object(cls, attrs, contents), which writes
// contents through the C base's own item assignment (OrderedDict's keeps
// its order links; PyDict_SetItem under it would not) and never the
// class's __setitem__.
namespace {

PyRef intern(const char* text) { return PyRef::steal(PyUnicode_InternFromString(text)); }

PyRef type_attr(PyObject* type, const char* name) {
  PyRef value = PyRef::steal(PyObject_GetAttrString(type, name));
  if (!value) PyErr_Clear();
  return value;
}

// The C base whose __new__ makes a traceable class's instances: object,
// dict or OrderedDict (the first non-heap class of the MRO); null otherwise.
PyTypeObject* record_base(PyTypeObject* type) {
  PyObject* mro = type->tp_mro;
  if (!mro) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* klass = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (klass->tp_flags & Py_TPFLAGS_HEAPTYPE) continue;
    const bool known = klass == &PyBaseObject_Type || klass == &PyDict_Type ||
                       reinterpret_cast<PyObject*>(klass) == base::ordered_dict_type();
    return known ? klass : nullptr;
  }
  return nullptr;
}

// rebuild_object(cls, attrs, contents): an instance of `cls` made by its C
// base's __new__, `attrs` as its __dict__ contents and, for a dict subclass,
// `contents` written through the C base's item assignment (Note [User
// objects]). __init__ already ran during tracing.
PyObject* rebuild_object(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyType_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "rebuild_object(cls, attrs, contents)");
    return nullptr;
  }
  auto* type = reinterpret_cast<PyTypeObject*>(args[0]);
  PyTypeObject* base = record_base(type);
  if (!base) {
    PyErr_Format(PyExc_TypeError, "rebuild_object: %s is not a plain Python class", type->tp_name);
    return nullptr;
  }
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef obj = PyRef::steal(type->tp_new(type, empty.get(), nullptr));
  if (!obj) return nullptr;
  if (base != &PyBaseObject_Type && base->tp_init && base->tp_init(obj.get(), empty.get(), nullptr) < 0) {
    return nullptr;  // OrderedDict's order links are set up by its __init__
  }
  PyObject** dict = _PyObject_GetDictPtr(obj.get());
  if (!dict) {
    PyErr_SetString(PyExc_TypeError, "rebuild_object: instances have no __dict__");
    return nullptr;
  }
  if (!*dict && !(*dict = PyDict_New())) return nullptr;
  if (PyDict_Update(*dict, args[1]) < 0) return nullptr;
  if (args[2] != Py_None) {
    if (!PyDict_Check(args[2]) || base == &PyBaseObject_Type) {
      PyErr_SetString(PyExc_TypeError, "rebuild_object: contents for a class that is no dict");
      return nullptr;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(args[2], &pos, &key, &value)) {
      if (base->tp_as_mapping->mp_ass_subscript(obj.get(), key, value) < 0) return nullptr;
    }
  }
  return obj.release();
}

PyObject* rebuild_object_callable() {
  static PyMethodDef def = {"rebuild_object", reinterpret_cast<PyCFunction>(rebuild_object), METH_FASTCALL,
                            "Makes an instance from its __dict__ (and dict items) without __init__."};
  static PyObject* callable = PyCFunction_New(&def, nullptr);
  return callable;
}

// A Python function the class (or a base) defines under `name`, or null.
PyObject* python_method(PyTypeObject* type, const char* name) {
  PyRef key = intern(name);
  PyObject* found = _PyType_Lookup(type, key.get());
  return found && PyFunction_Check(found) ? found : nullptr;
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
    if (!base::own_class_attr(klass, new_name.get())) continue;
    PyObject* bases = klass->tp_bases;
    const bool generated = PyTuple_GET_SIZE(bases) == 1 &&
                           PyTuple_GET_ITEM(bases, 0) == reinterpret_cast<PyObject*>(&PyTuple_Type) &&
                           base::own_class_attr(klass, "_fields");
    if (!generated) return false;
    break;
  }
  return reinterpret_cast<PyTypeObject*>(type)->tp_init == PyBaseObject_Type.tp_init;
}

bool is_record_class(PyObject* type) {
  if (!PyType_Check(type)) return false;
  auto* t = reinterpret_cast<PyTypeObject*>(type);
  if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_dictoffset == 0) return false;
  // A metaclass __call__ (pybind11's, a singleton's) decides what calling
  // the class does.
  if (Py_TYPE(type)->tp_call != PyType_Type.tp_call) return false;
  PyTypeObject* base = record_base(t);
  if (!base || t->tp_new != base->tp_new) return false;  // a Python __new__
  if (t->tp_finalize || t->tp_del) return false;          // __del__
  const base::TorchApi* api = base::torch_api();
  if (api && (PyObject_IsSubclass(type, api->module_type) == 1 || PyObject_IsSubclass(type, api->tensor_type) == 1)) {
    return false;  // modules and tensors have their own kinds
  }
  PyErr_Clear();
  // torch's own classes (grad-mode and autocast contexts, autograd
  // Functions, distributions) mean more than their Python code says: they
  // are modelled one by one or not at all.
  PyRef module = type_attr(type, "__module__");
  if (module && PyUnicode_Check(module.get())) {
    const char* text = PyUnicode_AsUTF8(module.get());
    if (text && (std::strcmp(text, "torch") == 0 || std::strncmp(text, "torch.", 6) == 0)) return false;
  }
  if (t->tp_getattro != PyObject_GenericGetAttr) {
    // Only a Python __getattr__ beside the generic __getattribute__.
    PyRef getattribute = intern("__getattribute__");
    if (!is_object_getattribute(_PyType_Lookup(t, getattribute.get())) || !python_method(t, "__getattr__")) {
      return false;
    }
  }
  if (t->tp_setattro != PyObject_GenericSetAttr && !python_method(t, "__setattr__")) return false;
  PyRef init_name = intern("__init__");
  PyObject* init = _PyType_Lookup(t, init_name.get());
  return init && (PyFunction_Check(init) || init == _PyType_Lookup(base, init_name.get()));
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

ValuePtr FrameTracer::make_record(const ValuePtr& cls, std::vector<ValuePtr> args, KwArgs kwargs) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls->obj.get());
  auto record = std::make_shared<Value>();
  record->kind = ValueKind::Record;
  record->tuple_type = cls->obj;
  record->self = cls;
  record->attrs = make_sequence(ValueKind::Dict, {});
  PyTypeObject* base = record_base(type);
  if (base != &PyBaseObject_Type) {
    record->contents = make_sequence(ValueKind::Dict, {});
    if (base != &PyDict_Type) record->contents->tuple_type = PyRef::borrow(reinterpret_cast<PyObject*>(base));
  }
  PyRef init_name = intern("__init__");
  PyObject* init = _PyType_Lookup(type, init_name.get());
  if (!PyFunction_Check(init)) {
    // The C base's __init__: object's takes nothing, dict's fills contents.
    if (!record->contents) {
      if (!args.empty() || !kwargs.empty()) {
        PyErr_Format(PyExc_TypeError, "%s() takes no arguments", type->tp_name);
        raise_python_error();
      }
      return record;
    }
    if (!args.empty() || !kwargs.empty()) call_value(load_attr(record->contents, intern("update").get()), args, kwargs);
    return record;
  }
  args.insert(args.begin(), record);
  // A generated dataclass __init__ closes over the field defaults and
  // types; with the class's source its cells are re-fetched (and guarded)
  // through it.
  const int init_source = cls->source >= 0 ? state_.sources().attr(cls->source, init_name.get()) : -1;
  ValuePtr result = inline_function(init, init_source, std::move(args), std::move(kwargs));
  if (!result->is(ValueKind::Constant) || result->obj.get() != Py_None) {
    PyErr_SetString(PyExc_TypeError, "__init__() should return None");
    raise_python_error();
  }
  return record;
}

namespace {

// The index of `name` among a Dict value's keys, or -1.
int dict_index(const Value& dict, PyObject* name) {
  for (size_t i = 0; i < dict.keys.size(); ++i) {
    if (PyUnicode_Check(dict.keys[i].get()) && PyUnicode_Compare(dict.keys[i].get(), name) == 0) {
      return static_cast<int>(i);
    }
  }
  PyErr_Clear();
  return -1;
}

}  // namespace

bool is_dict_descriptor(PyObject* found) {
  if (!PyObject_TypeCheck(found, &PyMethodDescr_Type) && !PyObject_TypeCheck(found, &PyWrapperDescr_Type)) {
    return false;
  }
  PyTypeObject* owner = reinterpret_cast<PyDescrObject*>(found)->d_type;
  return owner == &PyDict_Type || reinterpret_cast<PyObject*>(owner) == base::ordered_dict_type();
}

bool is_object_slot(PyObject* obj, const char* name) {
  PyRef key = intern(name);
  return obj && obj == _PyType_Lookup(&PyBaseObject_Type, key.get());
}

ValuePtr FrameTracer::call_dict_dunder(const ValuePtr& method, std::vector<ValuePtr> args, const KwArgs& kwargs) {
  const ValuePtr& dict = method->self;
  const std::string& name = method->name;
  auto expect = [&](size_t n) {
    if (args.size() != n || !kwargs.empty()) {
      abort_trace(BreakCode::UnsupportedCall, "dict." + name + "() with " + std::to_string(args.size()) + " arguments");
    }
  };
  if (name == "__setitem__") {
    expect(2);
    store_subscript(dict, args[0], args[1]);
    return state_.wrap_unguarded(Py_None);
  }
  if (name == "__getitem__") {
    expect(1);
    return subscript(dict, args[0]);
  }
  if (name == "__delitem__") {
    expect(1);
    delete_subscript(dict, args[0]);
    return state_.wrap_unguarded(Py_None);
  }
  if (name == "__contains__") {
    expect(1);
    if (!args[0]->is(ValueKind::Constant)) abort_trace(BreakCode::UnsupportedOperator, "'in' with key " + describe_value(*args[0]));
    bool found = false;
    for (const PyRef& key : dict->keys) found = found || PyObject_RichCompareBool(key.get(), args[0]->obj.get(), Py_EQ) == 1;
    PyErr_Clear();
    return state_.wrap_unguarded(found ? Py_True : Py_False);
  }
  if (name == "__len__") {
    expect(0);
    PyRef n = PyRef::steal(PyLong_FromSsize_t(static_cast<Py_ssize_t>(dict->items.size())));
    return state_.wrap_unguarded(n.get());
  }
  if (name == "__iter__") {
    expect(0);
    return get_iter(dict);
  }
  if (name == "__init__") {
    // dict.__init__(self, *args, **kwargs) adds to the items, like update.
    if (!args.empty() || !kwargs.empty()) call_value(load_attr(dict, intern("update").get()), args, kwargs);
    return state_.wrap_unguarded(Py_None);
  }
  abort_trace(BreakCode::UnsupportedCall, "dict." + name + "() is not traced yet");
}

ValuePtr FrameTracer::call_object_slot(const ValuePtr& callable, std::vector<ValuePtr> args, const KwArgs& kwargs) {
  PyObject* slot = callable->obj.get();
  const bool setattr = is_object_slot(slot, "__setattr__");
  if (!setattr && !is_object_slot(slot, "__init__")) return nullptr;
  if (callable->self) args.insert(args.begin(), callable->self);
  if (args.empty() || !args[0]->is(ValueKind::Record) || !kwargs.empty()) {
    abort_trace(BreakCode::UnsupportedCall, std::string("object.") + (setattr ? "__setattr__" : "__init__") +
                                                "() on " + (args.empty() ? std::string("nothing") : describe_value(*args[0])));
  }
  if (setattr) {
    if (args.size() != 3 || !args[1]->is(ValueKind::Constant) || !PyUnicode_Check(args[1]->obj.get())) {
      abort_trace(BreakCode::UnsupportedCall, "object.__setattr__() needs (obj, name, value)");
    }
    store_record_attr(args[0], args[1]->obj.get(), args[2], /*generic=*/true);
    return state_.wrap_unguarded(Py_None);
  }
  if (args.size() != 1) {
    PyErr_SetString(PyExc_TypeError, "object.__init__() takes exactly one argument (the instance to initialize)");
    raise_python_error();
  }
  return state_.wrap_unguarded(Py_None);
}

ValuePtr FrameTracer::record_method(const ValuePtr& record, PyObject* name, PyObject* descriptor) {
  // Bound to the record (a graph break rebuilds the method on the rebuilt
  // object); a call works on its contents.
  auto method = std::make_shared<Value>();
  method->kind = ValueKind::ContainerMethod;
  method->self = record;
  method->name = PyUnicode_AsUTF8(name);
  method->obj = PyRef::borrow(descriptor);
  return method;
}

ValuePtr FrameTracer::record_attr(const ValuePtr& record, PyObject* name, bool generic) {
  auto* type = reinterpret_cast<PyTypeObject*>(record->tuple_type.get());
  if (!generic) {
    // A Python __getattribute__ (a deep copy of a transformers config maps
    // attribute aliases so); object.__getattribute__ inside it comes back
    // here as the generic lookup (Note [Custom getattr]).
    PyRef getattribute_name = intern("__getattribute__");
    PyObject* getattribute = _PyType_Lookup(type, getattribute_name.get());
    if (getattribute && PyFunction_Check(getattribute)) {
      return inline_function(getattribute, class_entry_source(type, getattribute_name.get(), getattribute),
                             {record, state_.wrap_unguarded(name)}, {});
    }
  }
  const std::string attr = PyUnicode_AsUTF8(name);
  if (attr == "__class__") return record->self;
  if (attr == "__dict__") return record->attrs;
  PyObject* class_attr = _PyType_Lookup(type, name);
  // Data descriptors of the class come before the instance dict.
  if (class_attr && PyObject_TypeCheck(class_attr, &PyProperty_Type)) {
    if (ValuePtr value = class_descriptor(record, class_attr, class_entry_source(type, name, class_attr))) {
      return value;
    }
    abort_trace(BreakCode::UnsupportedAttribute, std::string(type->tp_name) + "." + attr + " is a property without a Python getter");
  }
  const int own = dict_index(*record->attrs, name);
  if (own >= 0) return record->attrs->items[own];
  if (class_attr && PyFunction_Check(class_attr)) {
    ValuePtr method = make_object(ValueKind::Method, PyRef::borrow(class_attr));
    method->self = record;
    method->func_source = class_entry_source(type, name, class_attr);
    return method;
  }
  if (class_attr && record->contents && is_dict_descriptor(class_attr)) return record_method(record, name, class_attr);
  if (class_attr && Py_TYPE(class_attr)->tp_descr_get && !PyType_Check(class_attr)) {
    if (ValuePtr value = class_descriptor(record, class_attr, class_entry_source(type, name, class_attr))) {
      return value;
    }
    abort_trace(BreakCode::UnsupportedAttribute,
                std::string(type->tp_name) + "." + attr + " is a descriptor kiln does not trace yet");
  }
  if (class_attr) return load_attr(record->self, name);  // read and guarded through the class
  if (PyObject* getattr = python_method(type, "__getattr__")) {
    return inline_function(getattr, -1, {record, state_.wrap_unguarded(name)}, {});
  }
  PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%U'", type->tp_name, name);
  raise_python_error();
}

void FrameTracer::store_record_attr(const ValuePtr& record, PyObject* name, const ValuePtr& value, bool generic) {
  auto* type = reinterpret_cast<PyTypeObject*>(record->tuple_type.get());
  PyObject* class_attr = _PyType_Lookup(type, name);
  if (!generic) {
    if (PyObject* setattr = python_method(type, "__setattr__")) {
      // Through the class's dict, so that a closure (a decorator's
      // __setattr__, huggingface_hub's strict dataclasses) is re-fetched.
      PyRef setattr_name = intern("__setattr__");
      inline_function(setattr, class_entry_source(type, setattr_name.get(), setattr),
                      {record, state_.wrap_unguarded(name), value}, {});
      return;
    }
  }
  if (class_attr && Py_TYPE(class_attr)->tp_descr_set) {
    // A property's setter (or a slot): the class decides what a store does.
    if (PyObject_TypeCheck(class_attr, &PyProperty_Type)) {
      PyRef setter = PyRef::steal(PyObject_GetAttrString(class_attr, "fset"));
      if (setter && PyFunction_Check(setter.get())) {
        inline_function(setter.get(), -1, {record, value}, {});
        return;
      }
      PyErr_Clear();
      if (!setter || setter.get() == Py_None) {
        PyErr_Format(PyExc_AttributeError, "property '%U' of '%s' object has no setter", name, type->tp_name);
        raise_python_error();
      }
    }
    abort_trace(BreakCode::UnsupportedAttribute, std::string("assignment to the descriptor ") + type->tp_name + "." +
                                                     PyUnicode_AsUTF8(name));
  }
  state_.note_mutation(record);
  ValuePtr& attrs = record->attrs;
  const int own = dict_index(*attrs, name);
  if (own >= 0) {
    attrs->items[own] = value;
    return;
  }
  attrs->keys.push_back(PyRef::borrow(name));
  attrs->items.push_back(value);
}

void FrameTracer::delete_record_attr(const ValuePtr& record, PyObject* name) {
  auto* type = reinterpret_cast<PyTypeObject*>(record->tuple_type.get());
  PyObject* class_attr = _PyType_Lookup(type, name);
  if (python_method(type, "__delattr__") || (class_attr && Py_TYPE(class_attr)->tp_descr_set)) {
    abort_trace(BreakCode::UnsupportedAttribute, std::string("deletion of attribute '") + PyUnicode_AsUTF8(name) +
                                                     "' of " + type->tp_name + ", which customizes it");
  }
  ValuePtr& attrs = record->attrs;
  const int own = dict_index(*attrs, name);
  if (own < 0) {
    PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%U'", type->tp_name, name);
    raise_python_error();
  }
  state_.note_mutation(record);
  attrs->keys.erase(attrs->keys.begin() + own);
  attrs->items.erase(attrs->items.begin() + own);
}

graph::Arg TraceState::lower_record(const ValuePtr& record) {
  auto lower_dict = [&](const ValuePtr& dict) {
    graph::Arg out;
    out.kind = graph::Arg::Kind::Dict;
    for (size_t i = 0; i < dict->items.size(); ++i) {
      Py_INCREF(dict->keys[i].get());
      out.keys.push_back(dict->keys[i].get());
      out.items.push_back(lower_output(dict->items[i]));
    }
    return out;
  };
  std::vector<graph::Arg> args;
  args.push_back(graph::Arg::of_constant(record->tuple_type.get()));
  args.push_back(lower_dict(record->attrs));
  args.push_back(record->contents ? lower_dict(record->contents) : graph::Arg::of_constant(Py_None));
  return graph::Arg::of_node(graph_->add_call("kiln.rebuild_object", rebuild_object_callable(), std::move(args), {}));
}

PyObject* record_rebuilder() { return rebuild_object_callable(); }

PyRef namedtuple_rebuilder(PyObject* type) {
  if (!is_namedtuple_type(type)) return PyRef::borrow(type);  // torch.return_types take one sequence
  return type_attr(type, "_make");
}

}  // namespace kiln::tracer
