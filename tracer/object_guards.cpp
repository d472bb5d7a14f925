// Which objects the tracer guards by type rather than identity, and how
// dicts and their keys are read (Note [Objects guarded by type], Note
// [Dict-backed objects]).
#include "tracer/object_guards.h"

#include "base/class_dict.h"
#include "base/dict_order.h"
#include "base/environ.h"
#include "base/module_attr.h"
#include "base/torch_api.h"
#include "runtime/aten_bridge.h"
#include "tracer/trace_state.h"
#include "tracer/value.h"

namespace kiln::tracer {

// A dict, an OrderedDict or a defaultdict: all index alike; each iterates
// in its own order (a defaultdict's missing key calls its factory).
bool is_plain_dict(PyObject* obj) {
  return base::is_dict_or_ordered_dict(obj) || reinterpret_cast<PyObject*>(Py_TYPE(obj)) == base::defaultdict_type();
}

// Keys a dict guard can compare cheaply and without running Python code:
// str, int, bytes, bool, None, torch.device and torch.dtype (diffusers maps
// dtypes to dtypes), classes and other objects that compare by identity
// (typing.Union keys huggingface_hub's validators) and enum members
// (diffusers' attention backend registry; compared by identity, or by
// their str or int mixin's C equality).
bool plain_key(PyObject* key) {
  const base::TorchApi* api = base::torch_api();
  if (PyUnicode_CheckExact(key) || PyLong_CheckExact(key) || PyBytes_CheckExact(key) || PyBool_Check(key) ||
      key == Py_None) {
    return true;
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(key));
  if (api && (type == api->device_type || type == api->dtype_type || type == api->memory_format_type ||
              type == api->layout_type)) {
    return true;
  }
  if (PyType_Check(key) && Py_TYPE(key) == &PyType_Type) return true;
  // Compared by identity; the guard holds the key, so no tensor or module
  // (a model kept alive by a guard) keys a dict read so.
  if (identity_equality(Py_TYPE(key)) && !runtime::is_tensor(key) && api &&
      PyObject_TypeCheck(key, reinterpret_cast<PyTypeObject*>(api->module_type)) == 0) {
    return true;
  }
  return is_enum_member(key) && native_equality(Py_TYPE(key));
}

// True for `type`, abc.ABCMeta, or a metaclass written in Python over them
// that leaves making instances and isinstance() to them (transformers'
// ModelOutput has one that renames __init__ keywords at class creation).
namespace {

bool plain_metaclass(PyTypeObject* meta, PyObject* abc_meta) {
  PyObject* mro = meta->tp_mro;
  if (!mro || meta->tp_call != PyType_Type.tp_call) return false;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(mro); ++k) {
    PyObject* klass = PyTuple_GET_ITEM(mro, k);
    if (klass == reinterpret_cast<PyObject*>(&PyType_Type) || klass == reinterpret_cast<PyObject*>(&PyBaseObject_Type) ||
        klass == abc_meta) {
      continue;
    }
    auto* type = reinterpret_cast<PyTypeObject*>(klass);
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
    for (const char* name : {"__instancecheck__", "__subclasscheck__", "__call__"}) {
      if (base::own_class_attr(type, name)) return false;
    }
  }
  return true;
}

}  // namespace

// Note [Objects guarded by type]
// Library code makes fresh plain objects per call and hands them to the
// compiled frame: generate() builds a new DynamicCache for every call, a
// model's output object crosses a graph break into the resume function.
// Guarding such an object by identity retraces on every call although
// nothing the trace read changed: each attribute it reads has a guard of its
// own through the object's source, and its methods are looked up on its
// type. So an instance of a plain Python class is guarded by type (as
// Dynamo does for user objects), and its identity only once the trace reads
// it: `is` or object.__eq__ between two such values, a second source
// reaching the same object (the trace would see two values), or an object
// kept by what runs after the graph (a deferred logging call's receiver).
// Plain means every class in its MRO but `object` is defined in Python and
// its metaclass is plain (plain_metaclass): no C state that attribute guards
// cannot see, no enum member (the tracer compares members on the real
// objects), and not one of the process-wide singletons the tracer
// recognises by identity (os.environ, loggers). With `dict_bases`, dict and
// OrderedDict may stand in the MRO too: their items are C state, which the
// caller guards as a dict's (Note [Dict-backed objects]).
bool is_identity_free(PyObject* obj, bool dict_bases) {
  // Every class a class statement makes deallocates through CPython's
  // subtype_dealloc; C types (heap types from specs included) have their own.
  static destructor python_class_dealloc = [] {
    PyRef probe = PyRef::steal(PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyType_Type), "s(){}", "probe"));
    destructor dealloc = probe ? reinterpret_cast<PyTypeObject*>(probe.get())->tp_dealloc : nullptr;
    PyErr_Clear();
    return dealloc;
  }();
  static PyObject* abc_meta = base::import_attr("abc", "ABCMeta");
  PyTypeObject* type = Py_TYPE(obj);
  PyObject* mro = type->tp_mro;
  if (!python_class_dealloc || !mro) return false;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(mro); ++k) {
    PyTypeObject* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, k));
    if (base == &PyBaseObject_Type) continue;
    if (dict_bases && (base == &PyDict_Type || reinterpret_cast<PyObject*>(base) == base::ordered_dict_type())) continue;
    if (base->tp_dealloc != python_class_dealloc) return false;
    if (!plain_metaclass(Py_TYPE(base), abc_meta)) return false;
  }
  static PyObject* logger_type = base::import_attr("logging", "Logger");
  if (logger_type && PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(logger_type))) return false;
  return obj != base::environ_object();
}

// Note [Dict-backed objects]
// transformers' ModelOutput is a dataclass over OrderedDict: its fields are
// both instance attributes and dict items, and its Python dunders
// (__getitem__, to_tuple, __contains__, get) read the items through dict's
// own methods (keys, items, super().__contains__). An output made in one
// frame and handed to another (generate() passes the encoder's output to
// every decoder step; a graph break hands a model's output to the resume
// function) is such an object from a source. It is an Object guarded by
// type (Note [Objects guarded by type]) whose items are a Dict value read
// through the object's source like a dict argument's (`contents`): the
// DictKeys guard holds its exact type and keys, each item has a guard of
// its own, and dict's methods, len(), `in`, iteration and subscripts that
// the class leaves to dict act on those items, as for a Record. The trace
// does not write them: a store replayed through the class's methods would
// run code the trace never saw (ModelOutput's update() raises), so an item
// write breaks the graph. The class must be one whose instances the trace
// could make (is_record_class: no C state but dict's, no metaclass
// __call__, no __del__).
bool is_dict_backed(PyObject* obj) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj));
  if (!PyDict_Check(obj) || PyDict_CheckExact(obj) || !is_record_class(type) || !is_identity_free(obj, true)) {
    return false;
  }
  // The keys guard iterates the object: dict's or OrderedDict's own __iter__.
  PyRef iter_name = PyRef::steal(PyUnicode_InternFromString("__iter__"));
  PyObject* iter = _PyType_Lookup(Py_TYPE(obj), iter_name.get());
  return iter && !PyFunction_Check(iter);
}

}  // namespace kiln::tracer
