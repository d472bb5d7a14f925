// copy.deepcopy of traced values (Note [Deep copies]).
#include "tracer/frame_tracer.h"
#include "base/class_dict.h"
#include "base/module_attr.h"
#include "base/torch_api.h"

namespace kiln::tracer {

// Note [Deep copies]
// transformers deep-copies configs inside forward: the cache a T5 or BART
// decoder makes for itself asks config.get_text_config(decoder=True),
// which copies a legacy encoder-decoder config and renames its decoder_*
// keys on the copy. Inlined, copy.deepcopy stops at its memo (id()) and
// its reduce protocol (object.__reduce_ex__ is C), and every frame above
// breaks. The tracer copies values itself, as copy's default protocol
// does: constants, functions and classes are shared; tuples copy their
// items (the same tuple back when no item changed, as CPython's); lists,
// dicts and sets are new values with copied items; an object of a plain
// Python class whose state is its __dict__ (no __deepcopy__, __reduce__,
// __reduce_ex__, __getstate__ or __setstate__ of its own, no __slots__, no
// Python __new__, no copyreg entry, no finalizer) becomes a Record of the
// same class whose __dict__ is a copy of the original's (read through its
// source and guarded as any dict argument), which copy._reconstruct also
// makes without running __init__. A memo maps each copied value to its
// copy, so shared and cyclic structure stays shared. Tensors, modules and
// other objects are not copied: the trace breaks, naming the value.
namespace {

PyRef intern(const char* text) { return PyRef::steal(PyUnicode_InternFromString(text)); }

// Why copy.deepcopy would not copy an instance of `type` by its __dict__
// alone; empty when it would.
std::string custom_copy(PyTypeObject* type) {
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_dictoffset == 0) return "its class is not a plain Python class";
  if (type->tp_finalize || type->tp_del) return "its class has a finalizer";
  if (type->tp_new != PyBaseObject_Type.tp_new) return "its class makes instances with its own __new__";
  if (Py_TYPE(type)->tp_call != PyType_Type.tp_call) return "its metaclass defines __call__";
  PyObject* mro = type->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    auto* klass = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (klass == &PyBaseObject_Type) continue;
    if (!(klass->tp_flags & Py_TPFLAGS_HEAPTYPE)) return std::string("it derives from ") + klass->tp_name;
    for (const char* name : {"__deepcopy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__slots__"}) {
      if (base::own_class_attr(klass, name)) return std::string(klass->tp_name) + " defines " + name;
    }
  }
  static PyObject* dispatch = base::import_attr("copyreg", "dispatch_table");
  static PyObject* copy_dispatch = base::import_attr("copy", "_deepcopy_dispatch");
  for (PyObject* table : {dispatch, copy_dispatch}) {
    if (!table || !PyDict_Check(table)) return "copy's dispatch tables are unreadable";
    if (PyDict_GetItemWithError(table, reinterpret_cast<PyObject*>(type))) return "copyreg has a reducer for its class";
    PyErr_Clear();
  }
  return "";
}

}  // namespace

ValuePtr FrameTracer::deep_copy(const ValuePtr& value) {
  std::vector<std::pair<const Value*, ValuePtr>> memo;
  return deep_copy_into(value, &memo);
}

ValuePtr FrameTracer::deep_copy_into(const ValuePtr& value, std::vector<std::pair<const Value*, ValuePtr>>* memo) {
  for (const auto& [original, copy] : *memo) {
    if (original == value.get()) return copy;
  }
  auto remember = [&](ValuePtr copy) {
    memo->emplace_back(value.get(), copy);
    return copy;
  };
  switch (value->kind) {
    case ValueKind::Constant:
    case ValueKind::Function:
    case ValueKind::LocalFunction:
    case ValueKind::Builtin:
    case ValueKind::TorchCallable:
    case ValueKind::PyModule:
      return value;  // immutable, or atomic to copy (functions, classes)
    case ValueKind::Tuple: {
      std::vector<ValuePtr> items;
      bool same = true;
      for (const ValuePtr& item : value->items) {
        items.push_back(deep_copy_into(item, memo));
        same = same && items.back() == item;
      }
      if (same) return remember(value);
      ValuePtr copy = make_sequence(ValueKind::Tuple, std::move(items));
      copy->tuple_type = value->tuple_type;
      copy->obj = value->obj;  // torch.Size keeps its type
      return remember(copy);
    }
    case ValueKind::List:
    case ValueKind::Dict: {
      ValuePtr copy = make_sequence(value->kind, {});
      copy->tuple_type = value->tuple_type;
      copy->self = value->self;  // a defaultdict's factory: a function or class, shared
      copy->keys = value->keys;  // constants
      remember(copy);
      for (const ValuePtr& item : value->items) copy->items.push_back(deep_copy_into(item, memo));
      return copy;
    }
    case ValueKind::Set: {
      if (!value->items.empty()) abort_trace(BreakCode::UnsupportedValue, "copy.deepcopy of a set holding tensors");
      return remember(make_object(ValueKind::Set, PyRef::steal(PySet_New(value->obj.get()))));
    }
    case ValueKind::Object:
      if (value->obj && PyType_Check(value->obj.get())) return value;  // a class: atomic
      return copy_object(value, memo);
    case ValueKind::Record:
      return copy_object(value, memo);
    default:
      abort_trace(BreakCode::UnsupportedCall, "copy.deepcopy of " + describe_value(*value) + " is not traced");
  }
}

ValuePtr FrameTracer::copy_object(const ValuePtr& value, std::vector<std::pair<const Value*, ValuePtr>>* memo) {
  const bool record = value->is(ValueKind::Record);
  auto* type = record ? reinterpret_cast<PyTypeObject*>(value->tuple_type.get()) : Py_TYPE(value->obj.get());
  const std::string why = record && value->contents ? "its class derives from dict" : custom_copy(type);
  if (!why.empty() || (!record && value->source < 0)) {
    abort_trace(BreakCode::UnsupportedCall, "copy.deepcopy of " + describe_value(*value) + ": " +
                                                (why.empty() ? "an object the trace cannot read through a source" : why));
  }
  auto copy = std::make_shared<Value>();
  copy->kind = ValueKind::Record;
  copy->tuple_type = PyRef::borrow(reinterpret_cast<PyObject*>(type));
  ValuePtr attrs;
  if (record) {
    copy->self = value->self;
    attrs = value->attrs;
  } else {
    for (const auto& store : state_.stores) {
      if (store.effect.target_source == value->source) {
        abort_trace(BreakCode::SideEffect, "copy.deepcopy of " + describe_value(*value) +
                                               " after the trace wrote to it");
      }
    }
    // Read as object.__getattribute__ reads them: no Python of the class runs.
    PyRef class_name = intern("__class__");
    PyRef dict_name = intern("__dict__");
    copy->self = state_.wrap(reinterpret_cast<PyObject*>(type),
                             state_.sources().generic_attr(value->source, class_name.get()));
    PyObject** dict_ptr = _PyObject_GetDictPtr(value->obj.get());
    if (dict_ptr && *dict_ptr && !PyDict_CheckExact(*dict_ptr)) {
      abort_trace(BreakCode::UnsupportedValue, "copy.deepcopy of an object whose __dict__ is no dict");
    }
    attrs = dict_ptr && *dict_ptr ? state_.wrap(*dict_ptr, state_.sources().generic_attr(value->source, dict_name.get()))
                                  : make_sequence(ValueKind::Dict, {});
  }
  memo->emplace_back(value.get(), copy);
  copy->attrs = deep_copy_into(attrs, memo);
  return copy;
}

}  // namespace kiln::tracer
