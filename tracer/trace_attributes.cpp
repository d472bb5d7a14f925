// Attribute loads, subscripts, iteration and unpacking on symbolic values,
// including nn.Module's attribute rules (parameters, buffers, submodules).
#include "base/dict_order.h"
#include "base/torch_api.h"
#include "stdlib/torch_callables.h"
#include "tracer/frame_tracer.h"
#include "base/module_attr.h"

namespace kiln::tracer {
namespace {

PyRef intern(const char* text) { return PyRef::steal(PyUnicode_InternFromString(text)); }

bool is_module_container(PyObject* module, const base::TorchApi& api) {
  return PyObject_TypeCheck(module, reinterpret_cast<PyTypeObject*>(api.module_list_type)) ||
         PyObject_TypeCheck(module, reinterpret_cast<PyTypeObject*>(api.sequential_type));
}

}  // namespace

ValuePtr FrameTracer::load_attr(const ValuePtr& base, PyObject* name) {
  if (base->source >= 0 && (base->is(ValueKind::Module) || base->is(ValueKind::Object))) {
    if (ValuePtr stored = state_.stored_attr(base, name)) return stored;
  }
  const base::TorchApi* api = base::torch_api();
  const std::string attr = PyUnicode_AsUTF8(name);
  switch (base->kind) {
    case ValueKind::Tensor: {
      switch (stdlib::classify_tensor_attribute(attr)) {
        case stdlib::TensorAttrClass::Metadata: {
          if (attr == "device" || attr == "is_cuda" || attr == "is_cpu" || attr == "is_meta") {
            const graph::TensorMeta& meta = base->meta;
            if (attr == "is_cuda") return state_.wrap_unguarded(meta.device_type == graph::DeviceType::CUDA ? Py_True : Py_False);
            if (attr == "is_cpu") return state_.wrap_unguarded(meta.device_type == graph::DeviceType::CPU ? Py_True : Py_False);
            if (attr == "is_meta") return state_.wrap_unguarded(meta.device_type == graph::DeviceType::Meta ? Py_True : Py_False);
            PyRef spec = PyRef::steal(PyUnicode_FromString(graph::device_name(meta.device_type, meta.device_index).c_str()));
            PyRef device = PyRef::steal(PyObject_CallOneArg(api->device_type, spec.get()));
            if (!device) abort_trace(BreakCode::PythonException, take_python_error());
            return state_.wrap_unguarded(device.get());
          }
          return state_.query_fake(base, attr, {}, true);
        }
        case stdlib::TensorAttrClass::GraphOp: {
          PyRef attr_name = PyRef::borrow(name);
          return state_.call_torch("getattr", api->builtin_getattr,
                                   {base, state_.wrap_unguarded(attr_name.get())}, {}, false);
        }
        case stdlib::TensorAttrClass::Method: {
          // Not a method after all (is_nested, itemsize, ...): a fact about
          // the tensor's metadata, which its fake answers.
          PyRef probe = PyRef::steal(PyObject_GetAttr(base->fake.get(), name));
          if (!probe) abort_trace(BreakCode::UnsupportedAttribute, "Tensor." + attr + ": " + take_python_error());
          if (!PyCallable_Check(probe.get())) {
            ValuePtr value = state_.wrap_unguarded(probe.get());
            if (!value->is(ValueKind::Constant)) {
              abort_trace(BreakCode::UnsupportedAttribute, "Tensor." + attr + " is not a constant");
            }
            return value;
          }
          auto method = std::make_shared<Value>();
          method->kind = ValueKind::TensorMethod;
          method->self = base;
          method->name = attr;
          return method;
        }
        case stdlib::TensorAttrClass::Refused:
          abort_trace(BreakCode::UnsupportedAttribute, "Tensor." + attr + " is not traced");
      }
      break;
    }
    case ValueKind::List:
    case ValueKind::Dict:
    case ValueKind::Tuple: {
      if (base->tuple_type) {
        // A field of a namedtuple or torch.return_types structseq.
        PyObject* type = base->tuple_type.get();
        PyRef fields = PyRef::steal(PyObject_GetAttrString(type, "_fields"));
        if (!fields) {
          PyErr_Clear();
          fields = PyRef::steal(PyObject_GetAttrString(type, "__match_args__"));
        }
        if (!fields) PyErr_Clear();
        if (fields && PyTuple_Check(fields.get())) {
          for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(fields.get()); ++k) {
            if (PyUnicode_Compare(PyTuple_GET_ITEM(fields.get(), k), name) == 0 &&
                k < static_cast<Py_ssize_t>(base->items.size())) {
              return base->items[k];
            }
          }
        }
        if (ValuePtr value = namedtuple_attr(base, name)) return value;
      }
      if (base->obj) break;  // torch.Size and other tuple subclasses
      auto method = std::make_shared<Value>();
      method->kind = ValueKind::ContainerMethod;
      method->self = base;
      method->name = attr;
      // The descriptor (list.append...) is what the stdlib models are keyed
      // by, looked up on the value's own type: an OrderedDict's move_to_end
      // or popitem(last=) is not dict's, and has a model of its own or none.
      PyTypeObject* type = base->is(ValueKind::List) ? &PyList_Type
                           : base->is(ValueKind::Dict)
                               ? (base->tuple_type ? reinterpret_cast<PyTypeObject*>(base->tuple_type.get())
                                                   : &PyDict_Type)
                               : &PyTuple_Type;
      method->obj = PyRef::borrow(_PyType_Lookup(type, name));
      return method;
    }
    case ValueKind::Module: {
      PyObject* module = base->obj.get();
      PyTypeObject* type = Py_TYPE(module);
      if (attr == "__class__") {
        // The module is guarded by identity; its class is guarded too, in
        // case the code assigns __class__ between calls.
        PyObject* cls = reinterpret_cast<PyObject*>(type);
        return base->source >= 0 ? state_.wrap(cls, state_.sources().attr(base->source, name))
                                 : state_.wrap_unguarded(cls);
      }
      PyObject* class_attr = _PyType_Lookup(type, name);
      if (class_attr && PyFunction_Check(class_attr)) {
        auto method = make_object(ValueKind::Method, PyRef::borrow(class_attr));
        method->self = base;
        method->func_source = class_entry_source(type, name, class_attr);
        return method;
      }
      if (class_attr && Py_TYPE(class_attr)->tp_descr_get && !PyFunction_Check(class_attr) &&
          !PyType_Check(class_attr)) {
        if (ValuePtr value = class_descriptor(base, class_attr, class_entry_source(type, name, class_attr))) {
          return value;
        }
        abort_trace(BreakCode::UnsupportedAttribute,
                    std::string(type->tp_name) + "." + attr + " is a descriptor kiln does not trace yet");
      }
      PyObject** dict_ptr = _PyObject_GetDictPtr(module);
      PyObject* instance_dict = dict_ptr ? *dict_ptr : nullptr;
      if (instance_dict) {
        PyObject* value = PyDict_GetItemWithError(instance_dict, name);
        if (value) {
          int source = base->source >= 0 ? state_.sources().attr(base->source, name) : -1;
          return source >= 0 ? state_.wrap(value, source) : state_.wrap_unguarded(value);
        }
        // nn.Module keeps parameters, buffers and submodules in three dicts.
        for (const char* store : {"_parameters", "_buffers", "_modules"}) {
          PyRef store_name = intern(store);
          PyObject* table = PyDict_GetItemWithError(instance_dict, store_name.get());
          if (!table || !PyDict_Check(table)) continue;
          PyObject* item = PyDict_GetItemWithError(table, name);
          if (!item) continue;
          // A module made while tracing holds no tensors (Note [Torch modules made in forward]).
          if (base->source < 0 && item == Py_None) return state_.wrap_unguarded(item);
          if (base->source < 0) abort_trace(BreakCode::UnsupportedValue, "module without a source");
          int source = state_.sources().dict_item(state_.sources().attr(base->source, store_name.get()), name);
          return state_.wrap(item, source);
        }
      }
      if (class_attr) {
        int source = base->source >= 0 ? state_.sources().attr(base->source, name) : -1;
        return source >= 0 ? state_.wrap(class_attr, source) : state_.wrap_unguarded(class_attr);
      }
      PyErr_Clear();
      // Module.__getattr__ raises AttributeError: the real one, raised as
      // eager would (Note [Exceptions in inlined frames]), with a guard
      // that the attribute stays missing.
      PyRef probe = PyRef::steal(PyObject_GetAttr(base->obj.get(), name));
      if (probe) abort_trace(BreakCode::UnsupportedAttribute, std::string(type->tp_name) + "." + attr);
      if (base->source >= 0 && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        state_.guards().add_has_attr(base->source, name, false);
      }
      raise_python_error();
    }
    case ValueKind::PyModule: {
      PyRef value = PyRef::steal(PyObject_GetAttr(base->obj.get(), name));
      if (!value) abort_trace(BreakCode::PythonException, take_python_error());
      if (stdlib::is_fixed_module(base->obj.get())) return state_.wrap_unguarded(value.get());
      if (base->source >= 0) return state_.wrap(value.get(), state_.sources().attr(base->source, name));
      // A module the trace imported (Note [Imports]): its names are guarded
      // in its dict, like the globals of an inlined function.
      PyObject* dict = PyModule_GetDict(base->obj.get());
      if (dict && PyDict_GetItemWithError(dict, name) == value.get()) {
        return state_.wrap(value.get(), state_.sources().global_in(dict, name));
      }
      PyErr_Clear();
      return state_.wrap_unguarded(value.get());
    }
    case ValueKind::Super:
      return super_attr(base, name);
    case ValueKind::Record:
      return record_attr(base, name);
    case ValueKind::Set: {
      auto method = std::make_shared<Value>();
      method->kind = ValueKind::ContainerMethod;
      method->self = base;
      method->name = attr;
      return method;
    }
    case ValueKind::Object:
      if (is_environ(base)) {
        if (ValuePtr method = environ_method(base, name)) return method;
      }
      if (ValuePtr member = enum_attr(base, name)) return member;
      if (base->source >= 0) return load_object_attr(base, name);
      [[fallthrough]];
    case ValueKind::Constant:
    case ValueKind::Function:
    case ValueKind::TorchCallable:
    case ValueKind::Builtin: {
      if (is_constant_method(base, attr)) {
        auto method = std::make_shared<Value>();
        method->kind = ValueKind::ContainerMethod;
        method->self = base;
        method->name = attr;
        return method;
      }
      if (base->is(ValueKind::Constant) && attr == "__class__") {
        return state_.wrap_unguarded(reinterpret_cast<PyObject*>(Py_TYPE(base->obj.get())));  // fixed with the value
      }
      PyRef value = PyRef::steal(PyObject_GetAttr(base->obj.get(), name));
      if (!value) raise_python_error();  // a fixed object: exact
      if (base->is(ValueKind::Object) && base->source >= 0) {
        return state_.wrap(value.get(), state_.sources().attr(base->source, name));
      }
      if (base->is(ValueKind::Object) && PyType_Check(base->obj.get())) {
        // A class reached without a source (type(self), an object's
        // __class__): a name its own dict or a base's holds is guarded in
        // that dict, like a global (a later patch of the class recompiles).
        const int source = class_entry_source(reinterpret_cast<PyTypeObject*>(base->obj.get()), name, value.get());
        if (source >= 0) return state_.wrap(value.get(), source);
      }
      ValuePtr wrapped = state_.wrap_unguarded(value.get());
      // What an immutable constant holds is fixed with it (a Signature's
      // parameters mapping), unless it is something to call.
      if (base->is(ValueKind::Constant) && !wrapped->is(ValueKind::Constant) && !PyCallable_Check(value.get())) {
        wrapped = make_constant(value);
      }
      // An exception's cause or context is another exception the trace holds.
      const bool exception = PyExceptionInstance_Check(base->obj.get()) && PyExceptionInstance_Check(value.get());
      // A fixed object's class (a function's __class__) is fixed with it.
      const bool cls = PyType_Check(value.get());
      if (!wrapped->is(ValueKind::Constant) && !wrapped->is(ValueKind::Tuple) && !exception && !cls) {
        abort_trace(BreakCode::UnsupportedAttribute,
                    "attribute " + attr + " of " + describe_value(*base) + " is not a constant");
      }
      return wrapped;
    }
    default:
      break;
  }
  abort_trace(BreakCode::UnsupportedAttribute, "attribute " + attr + " of " + describe_value(*base));
}

ValuePtr FrameTracer::class_descriptor(const ValuePtr& base, PyObject* class_attr, int entry_source) {
  // property: its getter is plain Python code; inline it on `base`. With
  // the class dict's entry as its source, a getter that is a closure
  // (torch's parametrizations make one per parametrized tensor) reads its
  // cells through it.
  if (PyObject_TypeCheck(class_attr, &PyProperty_Type)) {
    PyRef getter = PyRef::steal(PyObject_GetAttrString(class_attr, "fget"));
    if (!getter) PyErr_Clear();
    if (!getter || !PyFunction_Check(getter.get())) return nullptr;
    PyRef fget = intern("fget");
    const int getter_source = entry_source >= 0 ? state_.sources().attr(entry_source, fget.get()) : -1;
    return inline_function(getter.get(), getter_source, {base}, {});
  }
  const bool is_static = Py_TYPE(class_attr) == &PyStaticMethod_Type;
  const bool is_class = Py_TYPE(class_attr) == &PyClassMethod_Type;
  if (!is_static && !is_class) return nullptr;
  PyRef func = PyRef::steal(PyObject_GetAttrString(class_attr, "__func__"));
  if (!func) PyErr_Clear();
  if (!func || !PyFunction_Check(func.get())) return nullptr;
  if (is_static) {
    if (entry_source < 0) return make_object(ValueKind::Function, func);
    PyRef func_name = intern("__func__");
    return state_.wrap(func.get(), state_.sources().attr(entry_source, func_name.get()));
  }
  auto method = make_object(ValueKind::Method, func);
  if (PyType_Check(base->obj.get())) {
    method->self = base;  // Class.method(...)
  } else {
    // The class, read as obj.__class__ so that class attributes the method
    // reads are guarded through it.
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(base->obj.get()));
    PyRef class_name = PyRef::steal(PyUnicode_InternFromString("__class__"));
    method->self = base->source >= 0 ? state_.wrap(type, state_.sources().attr(base->source, class_name.get()))
                                     : state_.wrap_unguarded(type);
  }
  return method;
}

int FrameTracer::class_entry_source(PyTypeObject* type, PyObject* name, PyObject* entry) {
  PyObject* mro = type->tp_mro;
  for (Py_ssize_t k = 0; mro && k < PyTuple_GET_SIZE(mro); ++k) {
    PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, k))->tp_dict;
    PyObject* found = dict ? PyDict_GetItemWithError(dict, name) : nullptr;
    if (!found) continue;
    const int source = state_.sources().global_in(dict, name);
    if (found == entry) return source;
    if (Py_IS_TYPE(found, &PyStaticMethod_Type)) {
      // What reading the name gives is the static method's function.
      PyRef func_name = intern("__func__");
      PyRef func = PyRef::steal(PyObject_GetAttr(found, func_name.get()));
      if (!func) PyErr_Clear();
      if (func.get() == entry) return state_.sources().attr(source, func_name.get());
    }
    return -1;  // another descriptor: what it produced is not the dict's entry
  }
  PyErr_Clear();
  return -1;
}

bool is_object_getattribute(PyObject* obj) {
  static PyObject* const generic = [] {
    PyRef name = PyRef::steal(PyUnicode_InternFromString("__getattribute__"));
    return _PyType_Lookup(&PyBaseObject_Type, name.get());  // object's dict keeps it alive
  }();
  return obj == generic;
}

ValuePtr FrameTracer::call_python_special(const ValuePtr& self, const char* name, std::vector<ValuePtr> args) {
  PyTypeObject* type = nullptr;
  if (self->is(ValueKind::Record)) {
    type = reinterpret_cast<PyTypeObject*>(self->tuple_type.get());
  } else if (self->is(ValueKind::Object) && self->obj && !PyType_Check(self->obj.get())) {
    type = Py_TYPE(self->obj.get());
  } else {
    return nullptr;
  }
  PyRef key = intern(name);
  PyObject* method = _PyType_Lookup(type, key.get());
  if (!method || !PyFunction_Check(method)) return nullptr;
  args.insert(args.begin(), self);
  // Sourced through the class dict, a special method that is a closure (a
  // decorated __getitem__: typing's cached List[...]) reads its cells.
  return inline_function(method, class_entry_source(type, key.get(), method), std::move(args), {});
}

// Note [Custom getattr]
// Library objects customize attribute reads in Python: transformers'
// configs map aliases in __getattribute__, others compute missing names in
// __getattr__. A read of such an object inlines the class's own function
// as CPython would call it (__getattribute__ first; __getattr__ only for a
// name the generic lookup does not find), and super().__getattribute__ /
// object.__getattribute__ inside it is the generic lookup, read and
// guarded through the object's source with the generic lookup too
// (guards::SourceKind::GenericAttr): a guard reads what the trace's
// innermost read did without running the override again (an
// attribute_map-style override computes a mapping from tables the trace
// read and guarded). A C-level tp_getattro other than the generic one is
// not inlined (the trace breaks).
ValuePtr FrameTracer::generic_getattr(const ValuePtr& base, const ValuePtr& name) {
  if (!name->is(ValueKind::Constant) || !PyUnicode_Check(name->obj.get())) {
    abort_trace(BreakCode::UnsupportedAttribute, "object.__getattribute__ with a non-constant name");
  }
  if (base->is(ValueKind::Record)) return record_attr(base, name->obj.get(), /*generic=*/true);
  if (!base->is(ValueKind::Object) || base->source < 0) return load_attr(base, name->obj.get());
  return load_object_attr(base, name->obj.get(), /*generic=*/true);
}

// Note [Assignments to requires_grad]
// `t.requires_grad = flag` is Tensor.requires_grad_(flag) spelled as an
// assignment (transformers' wav2vec2 feature encoder marks a view of its
// input so gradient checkpointing sees a tensor that requires grad): it is
// traced as that call, whose rules decide what the graph does with it
// (trace_calls.cpp: a no-op on a tensor already requiring grad;
// interpreter/graph_executors.cpp: a leaf no one can observe). Other
// attributes of tensors stay breaks.
void FrameTracer::store_tensor_attr(const ValuePtr& tensor, const std::string& name, const ValuePtr& value) {
  if (name != "requires_grad") {
    abort_trace(BreakCode::SideEffect, "assignment to attribute '" + name + "' of " + describe_value(*tensor));
  }
  static PyObject* method_name = PyUnicode_InternFromString("requires_grad_");
  call_value(load_attr(tensor, method_name), {value}, {});
}

ValuePtr FrameTracer::call_attribute_builtin(bool store, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  const char* what = store ? "setattr" : "delattr";
  if (args.size() != (store ? 3u : 2u) || !kwargs.empty()) {
    abort_trace(BreakCode::PythonException,
                std::string("TypeError: ") + what + "() takes " + (store ? "3" : "2") + " positional arguments");
  }
  if (!args[1]->is(ValueKind::Constant) || !PyUnicode_Check(args[1]->obj.get())) {
    abort_trace(BreakCode::UnsupportedAttribute, std::string(what) + "() with the name " + describe_value(*args[1]));
  }
  // The STORE_ATTR / DELETE_ATTR the name spells, with their rules.
  PyObject* name = args[1]->obj.get();
  if (store) {
    store_attr(args[0], name, args[2]);
  } else {
    delete_attr(args[0], name);
  }
  return state_.wrap_unguarded(Py_None);
}

ValuePtr FrameTracer::load_object_attr(const ValuePtr& base, PyObject* name, bool generic) {
  // Only reads that run no user code are traced: the guards re-read the
  // attribute on every call, so a property or __getattr__ would run a
  // different number of times than in eager Python.
  PyObject* obj = base->obj.get();
  PyTypeObject* type = Py_TYPE(obj);
  const std::string attr = PyUnicode_AsUTF8(name);
  const std::string where = std::string(type->tp_name) + "." + attr;
  if (ValuePtr method = logger_method(base, name)) return method;
  // typing's C objects (`int | None`, `list[int]`) never change: guarded by
  // identity, what they hold is fixed (a strict dataclass's type
  // validators read a field type's __args__ and __origin__).
  static PyObject* union_type = base::import_attr("types", "UnionType");
  static PyObject* generic_alias = base::import_attr("types", "GenericAlias");
  const PyObject* exact_type = reinterpret_cast<PyObject*>(type);
  if (!base->identity_deferred && (exact_type == union_type || exact_type == generic_alias)) {
    PyRef value = PyRef::steal(PyObject_GetAttr(obj, name));
    if (!value) raise_python_error();
    return state_.wrap_unguarded(value.get());
  }
  // A metaclass that keeps type's attribute lookup (one that only
  // customizes class creation or __setattr__, like transformers'
  // ModelOutput's) reads class attributes as type does, unless it defines
  // a data descriptor of that name itself.
  const bool plain_metaclass =
      PyType_Check(obj) && (Py_TYPE(obj) == &PyType_Type || (type->tp_getattro == PyType_Type.tp_getattro && [&] {
                              PyObject* meta_attr = _PyType_Lookup(type, name);
                              return !meta_attr || !Py_TYPE(meta_attr)->tp_descr_set;
                            }()));
  if (plain_metaclass) {
    // A class attribute: plain values and functions are read (and guarded)
    // through the class; static and class methods are unwrapped.
    PyObject* found = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(obj), name);
    if (found && (PyFunction_Check(found) || !Py_TYPE(found)->tp_descr_get || PyType_Check(found))) {
      return state_.wrap(found, state_.sources().attr(base->source, name));
    }
    if (found && is_object_getattribute(found)) return state_.wrap_unguarded(found);  // builtin, fixed
    if (found && (is_object_slot(found, "__setattr__") || is_object_slot(found, "__init__"))) {
      return state_.wrap_unguarded(found);  // object.__setattr__(self, ...) (Note [User objects])
    }
    if (found) {
      if (ValuePtr value = class_descriptor(base, found)) return value;
    }
    if (!found && (attr == "__name__" || attr == "__qualname__")) {
      // Data descriptors of the metaclass: plain strings, guarded by value.
      PyRef value = PyRef::steal(PyObject_GetAttr(obj, name));
      if (!value) abort_trace(BreakCode::PythonException, take_python_error());
      return state_.wrap(value.get(), state_.sources().attr(base->source, name));
    }
    if (found && Py_IS_TYPE(found, &PyClassMethodDescr_Type) &&
        PyType_HasFeature(reinterpret_cast<PyTypeObject*>(obj), Py_TPFLAGS_IMMUTABLETYPE)) {
      // A C class method of an immutable (id-guarded) type, e.g.
      // itertools.chain.from_iterable: fixed, though each read binds anew.
      PyRef bound = PyRef::steal(PyObject_GetAttr(obj, name));
      if (!bound) abort_trace(BreakCode::PythonException, take_python_error());
      return state_.wrap_unguarded(bound.get());
    }
    abort_trace(BreakCode::UnsupportedAttribute, std::string("class attribute ") +
                                                     reinterpret_cast<PyTypeObject*>(obj)->tp_name + "." + attr);
  }
  if (!generic && type->tp_getattro != PyObject_GenericGetAttr) {
    PyRef getattribute_name = intern("__getattribute__");
    PyRef getattr_name = intern("__getattr__");
    PyObject* getattribute = _PyType_Lookup(type, getattribute_name.get());
    PyObject* getattr = _PyType_Lookup(type, getattr_name.get());
    ValuePtr key = state_.wrap_unguarded(name);
    if (getattribute && PyFunction_Check(getattribute)) {
      // Note [Custom getattr]. (A __getattr__ beside it, called when this
      // raises AttributeError, is not modelled: that raise breaks the trace.)
      return inline_function(getattribute, -1, {base, key}, {});
    }
    const bool generic_first = getattribute == _PyType_Lookup(&PyBaseObject_Type, getattribute_name.get());
    if (generic_first && getattr && PyFunction_Check(getattr)) {
      PyObject** dict_ptr = _PyObject_GetDictPtr(obj);
      const bool in_instance = dict_ptr && *dict_ptr && PyDict_GetItemWithError(*dict_ptr, name);
      PyErr_Clear();
      if (in_instance || _PyType_Lookup(type, name)) return load_object_attr(base, name, /*generic=*/true);
      return inline_function(getattr, -1, {base, key}, {});
    }
    abort_trace(BreakCode::UnsupportedAttribute, where + ": " + type->tp_name +
                                                     " customizes attribute access in C (tp_getattro)");
  }
  // A generic read (super().__getattribute__ inside a class's own) reads
  // and is guarded through the generic lookup, so the guards never run
  // the class's function again (transformers' configs: ~50 Python calls a
  // decode step's guards made).
  const bool custom = generic && type->tp_getattro != PyObject_GenericGetAttr;
  auto source_of = [&](PyObject* attr_name) {
    return custom ? state_.sources().generic_attr(base->source, attr_name)
                  : state_.sources().attr(base->source, attr_name);
  };
  if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) {
    return state_.wrap(reinterpret_cast<PyObject*>(type), source_of(name));
  }
  if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) {
    // The instance dict: a dict read (and guarded) item by item, like any
    // dict argument; a write to it is a write to the object.
    PyObject** dict_ptr = _PyObject_GetDictPtr(obj);
    if (dict_ptr && *dict_ptr && PyDict_CheckExact(*dict_ptr)) {
      return state_.wrap(*dict_ptr, source_of(name));
    }
  }
  PyObject* class_attr = _PyType_Lookup(type, name);
  if (class_attr && PyFunction_Check(class_attr)) {
    auto method = make_object(ValueKind::Method, PyRef::borrow(class_attr));
    method->self = base;
    method->func_source = class_entry_source(type, name, class_attr);
    return method;
  }
  // dict's own methods on a dict-backed object's items (Note [Dict-backed objects]).
  if (class_attr && base->contents && is_dict_descriptor(class_attr)) return record_method(base, name, class_attr);
  // A __slots__ member reads a field stored in the object: no user code.
  const bool slot_member = class_attr && Py_TYPE(class_attr) == &PyMemberDescr_Type;
  if (class_attr && Py_TYPE(class_attr)->tp_descr_get && !PyType_Check(class_attr) && !slot_member) {
    if (ValuePtr value = class_descriptor(base, class_attr)) return value;
    abort_trace(BreakCode::UnsupportedAttribute, where + " is a descriptor kiln does not trace yet");
  }
  PyRef value = PyRef::steal(custom ? PyObject_GenericGetAttr(obj, name) : PyObject_GetAttr(obj, name));
  if (!value) {
    // No user code ran: the attribute is missing, and stays so on calls
    // that reuse this trace.
    if (base->source >= 0 && PyErr_ExceptionMatches(PyExc_AttributeError)) {
      state_.guards().add_has_attr(base->source, name, false, custom);
    }
    raise_python_error();
  }
  return state_.wrap(value.get(), source_of(name));
}

namespace {

// True for an object of one of typing's classes (List, Optional, an alias
// they made).
bool is_typing_object(PyObject* obj) {
  PyObject* module = PyDict_GetItemString(Py_TYPE(obj)->tp_dict, "__module__");
  return module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "typing") == 0;
}

// The Python object of a typing argument: a class, a constant, a typing
// alias, or a tuple of them; null otherwise.
PyRef typing_argument(const ValuePtr& value) {
  if (value->is(ValueKind::Tuple) && !value->obj) {
    PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(value->items.size())));
    for (size_t i = 0; i < value->items.size(); ++i) {
      PyRef item = typing_argument(value->items[i]);
      if (!item) return PyRef();
      PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), item.release());
    }
    return tuple;
  }
  if (!value->obj || value->is(ValueKind::Tensor)) return PyRef();
  if (value->is(ValueKind::Constant) || PyType_Check(value->obj.get()) || is_typing_object(value->obj.get())) {
    return value->obj;
  }
  return PyRef();
}

// typing's `base[index]` computed now, or null when base is no typing
// object or index no typing argument.
PyRef typing_subscript(const ValuePtr& base, const ValuePtr& index) {
  if (!base->is(ValueKind::Object) || !base->obj || !is_typing_object(base->obj.get())) return PyRef();
  PyRef key = typing_argument(index);
  if (!key) return PyRef();
  PyRef alias = PyRef::steal(PyObject_GetItem(base->obj.get(), key.get()));
  if (!alias) PyErr_Clear();
  return alias;
}

}  // namespace

ValuePtr FrameTracer::subscript(const ValuePtr& base, const ValuePtr& index) {
  const base::TorchApi* api = base::torch_api();
  if (base->is(ValueKind::Tensor)) {
    return state_.call_torch("operator.getitem", api->getitem, {base, index}, {}, false);
  }
  if ((base->is(ValueKind::Tuple) || base->is(ValueKind::List)) && index->is(ValueKind::Constant)) {
    PyObject* key = index->obj.get();
    const Py_ssize_t n = static_cast<Py_ssize_t>(base->items.size());
    if (PyLong_Check(key)) {
      Py_ssize_t i = PyLong_AsSsize_t(key);
      if (i < 0) i += n;
      if (i < 0 || i >= n) {
        PyErr_SetString(PyExc_IndexError, base->is(ValueKind::Tuple) ? "tuple index out of range"
                                                                     : "list index out of range");
        raise_python_error();
      }
      return base->items[i];
    }
    if (PySlice_Check(key)) {
      Py_ssize_t start, stop, step, length;
      if (PySlice_GetIndicesEx(key, n, &start, &stop, &step, &length) < 0) {
        abort_trace(BreakCode::PythonException, take_python_error());
      }
      std::vector<ValuePtr> items;
      for (Py_ssize_t k = 0, i = start; k < length; ++k, i += step) items.push_back(base->items[i]);
      ValuePtr out = make_sequence(base->kind, std::move(items));
      return out;
    }
  }
  // typing's aliases subscripted by classes (List[torch.Tensor], timm's
  // CrossViT under torch.jit.annotate): typing's own cached __getitem__
  // runs at trace time; the alias it makes is fixed by its arguments.
  if (PyRef alias = typing_subscript(base, index)) return state_.wrap_unguarded(alias.get());
  // An enum member (identity-guarded, its equality native) keys a dict like
  // a constant: diffusers' attention backend registry.
  if (base->is(ValueKind::Dict) && is_key_value(*index)) {
    for (size_t i = 0; i < base->keys.size(); ++i) {
      if (PyObject_RichCompareBool(base->keys[i].get(), index->obj.get(), Py_EQ) == 1) return base->items[i];
    }
    if (base->self) {
      // A defaultdict the trace made: the factory's value is stored, as
      // defaultdict.__missing__ does.
      ValuePtr made = call_value(base->self, {}, {});
      store_subscript(base, index, made);
      return made;
    }
    // The dict's keys are guarded (DictKeys) or made by the trace: exact.
    PyErr_Clear();
    PyErr_SetObject(PyExc_KeyError, index->obj.get());
    raise_python_error();
  }
  if (base->is(ValueKind::Constant) && index->is(ValueKind::Constant)) {
    PyRef value = PyRef::steal(PyObject_GetItem(base->obj.get(), index->obj.get()));
    if (!value) raise_python_error();
    return state_.wrap_unguarded(value.get());
  }
  if (base->is(ValueKind::Module) && index->is(ValueKind::Constant) && PySlice_Check(index->obj.get())) {
    // A slice of a ModuleList or Sequential: its children, in order.
    std::vector<ValuePtr> children = unpack(get_iter(base), -1);
    return subscript(make_sequence(ValueKind::Tuple, std::move(children)), index);
  }
  if (base->is(ValueKind::Module) && index->is(ValueKind::Constant) && PyUnicode_Check(index->obj.get()) &&
      PyObject_TypeCheck(base->obj.get(), reinterpret_cast<PyTypeObject*>(api->module_dict_type))) {
    // A ModuleDict's item is its child of that name, as its __getitem__
    // reads it (torch's parametrizations keep theirs so).
    PyRef modules_name = intern("_modules");
    return subscript(load_attr(base, modules_name.get()), index);
  }
  if (base->is(ValueKind::Module) && index->is(ValueKind::Constant) && PyLong_Check(index->obj.get())) {
    std::vector<ValuePtr> children = unpack(get_iter(base), -1);
    Py_ssize_t i = PyLong_AsSsize_t(index->obj.get());
    if (i < 0) i += static_cast<Py_ssize_t>(children.size());
    if (i < 0 || i >= static_cast<Py_ssize_t>(children.size())) {
      abort_trace(BreakCode::PythonException, "IndexError: module index out of range");
    }
    return children[i];
  }
  // A mapping or sequence class written in Python (a registry, a lazy
  // mapping): its own __getitem__, inlined.
  if (is_environ(base)) return read_environ("__getitem__", {index}, {});
  if (ValuePtr item = call_python_special(base, "__getitem__", {index})) return item;
  if (base->contents) return subscript(base->contents, index);  // Note [Dict-backed objects]
  abort_trace(BreakCode::UnsupportedOperator,
              "subscript of " + describe_value(*base) + " with " + describe_value(*index));
}

ValuePtr FrameTracer::get_iter(const ValuePtr& value, bool lazy) {
  const base::TorchApi* api = base::torch_api();
  if (value->is(ValueKind::Iterator) && !lazy) drain(value);
  if (value->is(ValueKind::Record) || value->is(ValueKind::Object)) {
    // A Python __iter__ (a generator function, as collections.abc.Sequence's).
    if (ValuePtr iterator = call_python_special(value, "__iter__", {})) return get_iter(iterator, lazy);
    if (value->contents) return get_iter(value->contents);
  }
  switch (value->kind) {
    case ValueKind::Iterator:
      return value;
    case ValueKind::Set: {
      if (!value->items.empty()) abort_trace(BreakCode::UnsupportedValue, "iteration over a set holding tensors");
      // In the set's own order, as CPython iterates it.
      std::vector<ValuePtr> items;
      PyRef iter = PyRef::steal(PyObject_GetIter(value->obj.get()));
      const base::TorchApi* api = base::torch_api();
      while (PyObject* item = PyIter_Next(iter.get())) {
        PyRef held = PyRef::steal(item);
        if (PyObject_TypeCheck(item, reinterpret_cast<PyTypeObject*>(api->module_type))) {
          abort_trace(BreakCode::UnsupportedValue, "iteration over a set holding modules");
        }
        items.push_back(state_.wrap_unguarded(item));
      }
      return make_sequence(ValueKind::Iterator, std::move(items));
    }
    case ValueKind::Tuple:
    case ValueKind::List:
      return make_sequence(ValueKind::Iterator, value->items);
    case ValueKind::Dict: {
      std::vector<ValuePtr> keys;
      for (const PyRef& key : value->keys) keys.push_back(state_.wrap_unguarded(key.get()));
      return make_sequence(ValueKind::Iterator, std::move(keys));
    }
    case ValueKind::Constant: {
      PyRef iter = PyRef::steal(PyObject_GetIter(value->obj.get()));
      if (!iter) abort_trace(BreakCode::PythonException, take_python_error());
      std::vector<ValuePtr> items;
      while (PyObject* item = PyIter_Next(iter.get())) {
        items.push_back(state_.wrap_unguarded(item));
        Py_DECREF(item);
      }
      if (PyErr_Occurred()) abort_trace(BreakCode::PythonException, take_python_error());
      return make_sequence(ValueKind::Iterator, std::move(items));
    }
    case ValueKind::Module: {
      PyObject* module = value->obj.get();
      if (!is_module_container(module, *api) || value->source < 0) break;
      PyRef modules_name = intern("_modules");
      PyRef children = PyRef::steal(PyObject_GetAttr(module, modules_name.get()));
      if (!children || !PyDict_Check(children.get())) {
        abort_trace(BreakCode::UnsupportedValue, "module container without _modules");
      }
      const int children_source = state_.sources().attr(value->source, modules_name.get());
      std::vector<PyRef> keys;
      if (!base::dict_keys_in_order(children.get(), keys)) {
        abort_trace(BreakCode::PythonException, take_python_error());
      }
      state_.guards().add_dict_keys(children_source, children.get(), keys);
      std::vector<ValuePtr> items;
      for (const PyRef& key : keys) {
        PyObject* child = PyDict_GetItemWithError(children.get(), key.get());
        if (!child) abort_trace(BreakCode::PythonException, take_python_error());
        if (child == Py_None) continue;
        items.push_back(state_.wrap(child, state_.sources().dict_item(children_source, key.get())));
      }
      return make_sequence(ValueKind::Iterator, std::move(items));
    }
    case ValueKind::Tensor: {
      if (value->meta.sizes.empty()) abort_trace(BreakCode::PythonException, "TypeError: iteration over a 0-d tensor");
      PyRef unbind = PyRef::steal(PyObject_GetAttrString(api->tensor_type, "unbind"));
      ValuePtr parts = state_.call_torch("Tensor.unbind", unbind.get(), {value}, {}, false);
      return make_sequence(ValueKind::Iterator, parts->items);
    }
    default:
      break;
  }
  abort_trace(BreakCode::UnsupportedValue, "iteration over " + describe_value(*value));
}

std::vector<ValuePtr> FrameTracer::unpack(const ValuePtr& value, int count) {
  ValuePtr iterator = get_iter(value);  // a generator runs to its end

  std::vector<ValuePtr> items(iterator->items.begin() + iterator->position, iterator->items.end());
  iterator->position = iterator->items.size();
  if (count >= 0 && static_cast<int>(items.size()) != count) {
    abort_trace(BreakCode::PythonException, "ValueError: expected " + std::to_string(count) +
                                                " values to unpack, got " + std::to_string(items.size()));
  }
  return items;
}

}  // namespace kiln::tracer

namespace kiln::tracer {

void FrameTracer::store_subscript(const ValuePtr& container, const ValuePtr& key, const ValuePtr& value) {
  const base::TorchApi* api = base::torch_api();
  if (container->is(ValueKind::Record)) {
    // Note [User objects]: the class's __setitem__, else the dict's items.
    if (call_python_special(container, "__setitem__", {key, value})) return;
    if (!container->contents) {
      abort_trace(BreakCode::UnsupportedOperator, "item assignment on " + describe_value(*container));
    }
    return store_subscript(container->contents, key, value);
  }
  if (container->is(ValueKind::Tensor)) {
    PyRef setitem = PyRef::steal(PyObject_GetAttrString(api->operator_module, "setitem"));
    state_.call_torch("operator.setitem", setitem.get(), {container, key, value}, {}, false);
    return;
  }
  if (!key->is(ValueKind::Constant)) {
    abort_trace(BreakCode::UnsupportedOperator, "item assignment with key " + describe_value(*key));
  }
  if (container->source >= 0 && (container->is(ValueKind::List) || container->is(ValueKind::Dict))) {
    state_.note_container_write(container);
  } else if (container->source >= 0) {
    abort_trace(BreakCode::SideEffect, "item assignment on " + describe_value(*container) +
                                           " that the caller can see");
  } else {
    state_.note_mutation(container);
  }
  if (container->is(ValueKind::List) && PyLong_Check(key->obj.get())) {
    Py_ssize_t i = PyLong_AsSsize_t(key->obj.get());
    const Py_ssize_t n = static_cast<Py_ssize_t>(container->items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) abort_trace(BreakCode::PythonException, "IndexError: list assignment index out of range");
    container->items[i] = value;
    return;
  }
  if (container->is(ValueKind::Dict)) {
    for (size_t i = 0; i < container->keys.size(); ++i) {
      if (PyObject_RichCompareBool(container->keys[i].get(), key->obj.get(), Py_EQ) == 1) {
        container->items[i] = value;
        return;
      }
    }
    PyErr_Clear();
    container->keys.push_back(key->obj);
    container->items.push_back(value);
    return;
  }
  abort_trace(BreakCode::UnsupportedOperator, "item assignment on " + describe_value(*container));
}

void FrameTracer::delete_subscript(const ValuePtr& container, const ValuePtr& key) {
  if (container->is(ValueKind::Record)) {
    if (call_python_special(container, "__delitem__", {key})) return;
    if (container->contents) return delete_subscript(container->contents, key);
  }
  if (!key->is(ValueKind::Constant) || !(container->is(ValueKind::Dict) || container->is(ValueKind::List))) {
    abort_trace(BreakCode::UnsupportedOperator, "del of " + describe_value(*container) + "[" + describe_value(*key) + "]");
  }
  int found = -1;
  if (container->is(ValueKind::Dict)) {
    for (size_t i = 0; i < container->keys.size() && found < 0; ++i) {
      if (PyObject_RichCompareBool(container->keys[i].get(), key->obj.get(), Py_EQ) == 1) found = static_cast<int>(i);
    }
    PyErr_Clear();
    if (found < 0) abort_trace(BreakCode::PythonException, "KeyError: " + py_repr(key->obj.get()));
  } else {
    if (!PyLong_Check(key->obj.get())) abort_trace(BreakCode::UnsupportedOperator, "del of a list slice");
    Py_ssize_t i = PyLong_AsSsize_t(key->obj.get());
    const Py_ssize_t n = static_cast<Py_ssize_t>(container->items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) abort_trace(BreakCode::PythonException, "IndexError: list assignment index out of range");
    found = static_cast<int>(i);
  }
  if (container->source >= 0) {
    state_.note_container_write(container);  // the caller's container: written back
  } else {
    state_.note_mutation(container);
  }
  container->items.erase(container->items.begin() + found);
  if (container->is(ValueKind::Dict)) container->keys.erase(container->keys.begin() + found);
}

}  // namespace kiln::tracer
