// super(): zero-argument super() in methods, super(Cls, obj), and 3.12's
// LOAD_SUPER_ATTR. A super value looks attributes up along the receiver's
// MRO after the given class, as CPython's super_getattro does, and binds
// what it finds to the symbolic receiver, so parent methods are inlined.
#include <cstring>
#include "base/class_dict.h"

#include "tracer/frame_tracer.h"

namespace kiln::tracer {
namespace {

// The value in a local slot, looking through the cell when it holds one.
ValuePtr cell_contents(const ValuePtr& slot) {
  if (!slot) return nullptr;
  if (!slot->is(ValueKind::Cell)) return slot;
  return slot->items.empty() ? nullptr : slot->items[0];
}

// The type whose MRO super() walks: the receiver's class, or the receiver
// itself when super() is used on a class (in a classmethod).
PyTypeObject* lookup_type(PyObject* receiver, PyObject* start) {
  if (PyType_Check(receiver) &&
      PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(receiver), reinterpret_cast<PyTypeObject*>(start))) {
    return reinterpret_cast<PyTypeObject*>(receiver);
  }
  return Py_TYPE(receiver);
}

}  // namespace

bool uses_zero_arg_super(PyCodeObject* code) {
  bool class_cell = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code->co_localsplusnames); ++i) {
    class_cell = class_cell ||
                 PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(code->co_localsplusnames, i), "__class__") == 0;
  }
  if (!class_cell) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code->co_names); ++i) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(code->co_names, i), "super") == 0) return true;
  }
  return false;
}

ValuePtr FrameTracer::make_super(const std::vector<ValuePtr>& args) {
  ValuePtr cls;
  ValuePtr receiver;
  if (args.empty()) {
    // What CPython's super() reads from the calling frame: its first
    // argument and the __class__ cell the compiler made for the method.
    int class_slot = -1;
    for (int i = 0; i < code_->co_nlocalsplus; ++i) {
      if (local_name(i) == "__class__") class_slot = i;
    }
    if (class_slot < 0 || code_->co_argcount == 0) {
      abort_trace(BreakCode::PythonException, "RuntimeError: super(): no arguments");
    }
    cls = cell_contents(locals_[class_slot]);
    receiver = cell_contents(locals_[0]);
    if (!cls || !receiver) abort_trace(BreakCode::PythonException, "RuntimeError: super(): empty __class__ cell");
  } else if (args.size() == 2) {
    cls = args[0];
    receiver = args[1];
  } else {
    abort_trace(BreakCode::UnsupportedCall, "super() with " + std::to_string(args.size()) + " arguments");
  }
  if (!cls->obj || !PyType_Check(cls->obj.get())) {
    abort_trace(BreakCode::PythonException, "TypeError: super() argument 1 must be a type");
  }
  PyObject* start = cls->obj.get();
  if (receiver->is(ValueKind::Record)) {
    // Note [User objects]: the receiver's class is known without an object.
    if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(receiver->tuple_type.get()),
                          reinterpret_cast<PyTypeObject*>(start))) {
      abort_trace(BreakCode::PythonException, "TypeError: super(type, obj): obj must be an instance or subtype of type");
    }
    ValuePtr value = make_object(ValueKind::Super, cls->obj);
    value->self = receiver;
    return value;
  }
  if (!receiver->obj || receiver->is(ValueKind::Tensor) || receiver->is(ValueKind::Constant)) {
    abort_trace(BreakCode::UnsupportedCall, "super() of " + describe_value(*receiver));
  }
  PyObject* self_obj = receiver->obj.get();
  const bool is_type_receiver = PyType_Check(self_obj) &&
                                PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(self_obj),
                                                 reinterpret_cast<PyTypeObject*>(start));
  if (!is_type_receiver && PyObject_IsInstance(self_obj, start) != 1) {
    PyErr_Clear();
    abort_trace(BreakCode::PythonException,
                "TypeError: super(type, obj): obj must be an instance or subtype of type");
  }
  ValuePtr value = make_object(ValueKind::Super, cls->obj);
  value->self = receiver;
  return value;
}

ValuePtr FrameTracer::super_attr(const ValuePtr& super, PyObject* name) {
  const std::string attr = PyUnicode_AsUTF8(name);
  const ValuePtr& receiver = super->self;
  PyObject* start = super->obj.get();
  const bool record = receiver->is(ValueKind::Record);
  PyTypeObject* type = record ? reinterpret_cast<PyTypeObject*>(receiver->tuple_type.get())
                              : lookup_type(receiver->obj.get(), start);
  PyObject* mro = type->tp_mro;
  const Py_ssize_t n = mro ? PyTuple_GET_SIZE(mro) : 0;
  Py_ssize_t i = 0;
  while (i < n && PyTuple_GET_ITEM(mro, i) != start) ++i;
  for (++i; i < n; ++i) {
    PyObject* klass = PyTuple_GET_ITEM(mro, i);
    base::PyRef found_ref = base::own_class_attr(reinterpret_cast<PyTypeObject*>(klass), name);
    if (!found_ref) continue;
    PyObject* found = found_ref.get();  // the class's dict keeps it alive
    if (PyFunction_Check(found)) {
      // On a class, super().f is the plain function; on an instance, a
      // method bound to the same receiver.
      if (!record && PyType_Check(receiver->obj.get()) && type == reinterpret_cast<PyTypeObject*>(receiver->obj.get())) {
        return make_object(ValueKind::Function, PyRef::borrow(found));
      }
      ValuePtr method = make_object(ValueKind::Method, PyRef::borrow(found));
      method->self = receiver;
      return method;
    }
    if (Py_TYPE(found)->tp_descr_get && !PyType_Check(found)) {
      if (is_object_getattribute(found) || is_object_slot(found, "__setattr__") || is_object_slot(found, "__init__")) {
        // super().__getattribute__: the generic lookup (Note [Custom getattr]);
        // super().__setattr__ and super().__init__ of object (Note [User objects]).
        ValuePtr bound = make_object(ValueKind::Builtin, PyRef::borrow(found));
        bound->self = receiver;
        return bound;
      }
      if (receiver->contents && is_dict_descriptor(found)) return record_method(receiver, name, found);
      if (!record && receiver->is(ValueKind::Object) && receiver->source >= 0 && PyDict_Check(receiver->obj.get()) &&
          is_dict_descriptor(found)) {
        // super().get(k) in a dict subclass the frame reads (a registry):
        // dict's method on its items, read and guarded like a dict's.
        auto method = make_object(ValueKind::ContainerMethod, PyRef::borrow(found));
        method->self = state_.wrap_dict(receiver->obj.get(), receiver->source, /*guarded=*/true);
        method->name = attr;
        return method;
      }
      if (ValuePtr value = class_descriptor(receiver, found)) return value;
      abort_trace(BreakCode::UnsupportedAttribute, "super()." + attr + " is a descriptor kiln does not trace yet");
    }
    // A plain class attribute of a parent: re-read (and guarded) through
    // the receiver's class MRO, so a later change recompiles.
    if (receiver->source < 0) {
      abort_trace(BreakCode::UnsupportedAttribute, "super()." + attr + " of a receiver without a source");
    }
    PyRef class_name = PyRef::steal(PyUnicode_InternFromString("__class__"));
    PyRef mro_name = PyRef::steal(PyUnicode_InternFromString("__mro__"));
    int source = receiver->source;
    if (!PyType_Check(receiver->obj.get())) source = state_.sources().attr(source, class_name.get());
    source = state_.sources().index(state_.sources().attr(source, mro_name.get()), static_cast<int>(i));
    PyRef dict_name = PyRef::steal(PyUnicode_InternFromString("__dict__"));
    return state_.wrap(found, state_.sources().dict_item(state_.sources().attr(source, dict_name.get()), name));
  }
  if (PyErr_Occurred()) abort_trace(BreakCode::PythonException, take_python_error());
  abort_trace(BreakCode::PythonException, "AttributeError: 'super' object has no attribute '" + attr + "'");
}

}  // namespace kiln::tracer
