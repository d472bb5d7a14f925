#include "tracer/trace_state.h"

#include "tracer/object_guards.h"
#include "tracer/own_metas.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>
#include <unordered_set>

#include "base/class_dict.h"
#include "base/dict_order.h"
#include "base/environ.h"
#include "base/module_attr.h"
#include "base/log.h"
#include "base/torch_api.h"
#include "guards/size_expr.h"
#include "runtime/aten_bridge.h"
#include "stdlib/torch_callables.h"
#include "tracer/dynamic_marks.h"
#include "tracer/meta_layouts.h"
#include "tracer/node_constants.h"

namespace kiln::tracer {
namespace {

using graph::Arg;
using graph::DeviceType;
using graph::TensorMeta;

bool is_constant_object(PyObject* obj, const base::TorchApi& api) {
  if (obj == Py_None || obj == Py_Ellipsis || obj == Py_NotImplemented) return true;
  if (PyBool_Check(obj) || PyLong_CheckExact(obj) || PyFloat_CheckExact(obj) ||
      PyComplex_CheckExact(obj) || PyUnicode_CheckExact(obj) || PyBytes_CheckExact(obj)) {
    return true;
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj));
  // inspect's Signature and Parameter are immutable by design.
  static PyObject* signature_type = nullptr;
  static PyObject* parameter_type = nullptr;
  if (!signature_type) {
    PyRef inspect = PyRef::steal(PyImport_ImportModule("inspect"));
    if (inspect) {
      signature_type = PyObject_GetAttrString(inspect.get(), "Signature");  // kept for the process
      parameter_type = PyObject_GetAttrString(inspect.get(), "Parameter");
    }
    PyErr_Clear();
  }
  if (type == signature_type || type == parameter_type) return true;
  // torch's dtypes, devices, memory formats and layouts are immutable
  // values (torch.contiguous_format passed to empty_like: PhiMoE's router).
  return type == api.dtype_type || type == api.device_type || type == api.memory_format_type ||
         type == api.layout_type || type == reinterpret_cast<PyObject*>(&PySlice_Type) ||
         type == reinterpret_cast<PyObject*>(&PyRange_Type) ||
         type == reinterpret_cast<PyObject*>(&PyCode_Type);
}

// Reads torch.device(spec) into kiln's device fields.
void parse_device(PyObject* spec, const base::TorchApi& api, DeviceType* type, int* index) {
  PyRef device = PyRef::steal(PyObject_CallOneArg(api.device_type, spec));
  if (!device) abort_trace(BreakCode::PythonException, "bad device " + py_repr(spec) + ": " + take_python_error());
  PyRef type_name = PyRef::steal(PyObject_GetAttrString(device.get(), "type"));
  PyRef type_index = PyRef::steal(PyObject_GetAttrString(device.get(), "index"));
  if (!type_name || !type_index) abort_trace(BreakCode::PythonException, take_python_error());
  std::string name = PyUnicode_AsUTF8(type_name.get());
  *type = name == "cpu" ? DeviceType::CPU : name == "cuda" ? DeviceType::CUDA
                                         : name == "meta" ? DeviceType::Meta : DeviceType::Other;
  *index = type_index.get() == Py_None ? -1 : static_cast<int>(PyLong_AsLong(type_index.get()));
}

bool is_tensor_sequence(PyObject* obj) {
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  if (n == 0) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!runtime::is_tensor(PySequence_Fast_GET_ITEM(obj, i))) return false;
  }
  return true;
}

// A tuple or list of tensors and Nones with at least one tensor, as
// F.multi_head_attention_forward(..., need_weights=False) returns.
bool is_tensor_or_none_sequence(PyObject* obj) {
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) return false;
  bool any = false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(obj); ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(obj, i);
    if (runtime::is_tensor(item)) {
      any = true;
    } else if (item != Py_None) {
      return false;
    }
  }
  return any;
}

// select_tensors(target, positions, *args, **kwargs): the items of
// target(*args, **kwargs) at `positions`, as a tuple (the item alone when
// `positions` is one int). A graph node returns
// only tensors; the Nones a call returns beside them are constants of the
// trace.
PyObject* select_tensors(PyObject*, PyObject* args, PyObject* kwargs) {
  if (PyTuple_GET_SIZE(args) < 2 ||
      !(PyTuple_Check(PyTuple_GET_ITEM(args, 1)) || PyLong_Check(PyTuple_GET_ITEM(args, 1)))) {
    PyErr_SetString(PyExc_TypeError, "select_tensors(target, positions, *args, **kwargs)");
    return nullptr;
  }
  PyRef rest = PyRef::steal(PyTuple_GetSlice(args, 2, PyTuple_GET_SIZE(args)));
  PyRef result = PyRef::steal(PyObject_Call(PyTuple_GET_ITEM(args, 0), rest.get(), kwargs));
  if (!result) return nullptr;
  PyRef items = PyRef::steal(PySequence_Fast(result.get(), "select_tensors: the call returned no sequence"));
  if (!items) return nullptr;
  PyObject* positions = PyTuple_GET_ITEM(args, 1);
  if (PyLong_Check(positions)) {
    // One tensor: the node returns it alone.
    const Py_ssize_t i = PyLong_AsSsize_t(positions);
    if (i < 0 || i >= PySequence_Fast_GET_SIZE(items.get())) {
      PyErr_SetString(PyExc_IndexError, "select_tensors: the call returned fewer items than traced");
      return nullptr;
    }
    PyObject* item = PySequence_Fast_GET_ITEM(items.get(), i);
    Py_INCREF(item);
    return item;
  }
  PyRef out = PyRef::steal(PyTuple_New(PyTuple_GET_SIZE(positions)));
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(positions); ++k) {
    const Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, k));
    if (i < 0 || i >= PySequence_Fast_GET_SIZE(items.get())) {
      PyErr_SetString(PyExc_IndexError, "select_tensors: the call returned fewer items than traced");
      return nullptr;
    }
    PyObject* item = PySequence_Fast_GET_ITEM(items.get(), i);
    Py_INCREF(item);
    PyTuple_SET_ITEM(out.get(), k, item);
  }
  return out.release();
}

// functools.partial(select_tensors, target, positions).
PyRef tensor_selector(PyObject* target, PyObject* positions) {
  static PyMethodDef def = {"select_tensors", reinterpret_cast<PyCFunction>(select_tensors),
                            METH_VARARGS | METH_KEYWORDS, "The tensor items of a call's result."};
  static PyObject* selector = PyCFunction_New(&def, nullptr);
  PyRef functools = PyRef::steal(PyImport_ImportModule("functools"));
  PyRef partial = functools ? PyRef::steal(PyObject_GetAttrString(functools.get(), "partial")) : PyRef();
  PyRef made = partial ? PyRef::steal(PyObject_CallFunctionObjArgs(partial.get(), selector, target, positions, nullptr))
                       : PyRef();
  if (!made) abort_trace(BreakCode::PythonException, take_python_error());
  return made;
}

void first_tensor_device(const ValuePtr& value, DeviceType* type, int* index, bool* found) {
  // A SymInt's operands are where its value comes from, not op arguments.
  if (*found || value->is(ValueKind::SymInt)) return;
  if (value->is(ValueKind::Tensor)) {
    *type = value->meta.device_type;
    *index = value->meta.device_index;
    *found = true;
    return;
  }
  for (const ValuePtr& item : value->items) first_tensor_device(item, type, index, found);
}

// True when every item of a set or frozenset is a Python constant.
bool all_constant_items(PyObject* set, const base::TorchApi& api) {
  PyRef iter = PyRef::steal(PyObject_GetIter(set));
  if (!iter) {
    PyErr_Clear();
    return false;
  }
  while (PyObject* item = PyIter_Next(iter.get())) {
    const bool constant = is_constant_object(item, api);
    Py_DECREF(item);
    if (!constant) return false;
  }
  PyErr_Clear();
  return true;
}

// A tensor on the meta device with these sizes, strides, dtype and grad.
PyRef make_meta_tensor(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                       PyObject* dtype, bool requires_grad) {
  const base::TorchApi* api = base::torch_api();
  PyRef size_tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(sizes.size())));
  PyRef stride_tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(strides.size())));
  for (size_t i = 0; i < sizes.size(); ++i) {
    PyTuple_SET_ITEM(size_tuple.get(), i, PyLong_FromLongLong(sizes[i]));
    PyTuple_SET_ITEM(stride_tuple.get(), i, PyLong_FromLongLong(strides[i]));
  }
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyDict_SetItemString(kwargs.get(), "dtype", dtype);
  PyRef meta_name = PyRef::steal(PyUnicode_FromString("meta"));
  PyDict_SetItemString(kwargs.get(), "device", meta_name.get());
  PyDict_SetItemString(kwargs.get(), "requires_grad", requires_grad ? Py_True : Py_False);
  PyRef args = PyRef::steal(PyTuple_Pack(2, size_tuple.get(), stride_tuple.get()));
  PyRef fake = PyRef::steal(PyObject_Call(api->empty_strided, args.get(), kwargs.get()));
  if (!fake) abort_trace(BreakCode::ShapeInference, "cannot make a meta tensor: " + take_python_error());
  return fake;
}

// An op's result that requires grad is no leaf (it has a grad_fn), so
// in-place ops on it (F.hardswish(x, inplace=True)) are allowed, as
// eagerly; a leaf fake that requires grad refuses them. A clone of it is
// the non-leaf twin; where clone would not keep the strides (an expanded
// result's zero strides), a strided view of a cloned flat buffer is.
PyRef non_leaf(PyRef fake) {
  auto fail = [] { abort_trace(BreakCode::ShapeInference, "cannot make a fake result: " + take_python_error()); };
  PyRef cloned = PyRef::steal(PyObject_CallMethod(fake.get(), "clone", nullptr));
  PyRef strides = PyRef::steal(PyObject_CallMethod(fake.get(), "stride", nullptr));
  PyRef cloned_strides = cloned ? PyRef::steal(PyObject_CallMethod(cloned.get(), "stride", nullptr)) : PyRef();
  if (!cloned || !strides || !cloned_strides) fail();
  const int same = PyObject_RichCompareBool(strides.get(), cloned_strides.get(), Py_EQ);
  if (same < 0) fail();
  if (same) return cloned;
  PyRef sizes = PyRef::steal(PyObject_CallMethod(fake.get(), "size", nullptr));
  if (!sizes) fail();
  int64_t extent = 1;
  for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(sizes.get()); ++d) {
    const int64_t size = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes.get(), d));
    if (size == 0) return cloned;  // nothing to view
    extent += (size - 1) * PyLong_AsLongLong(PyTuple_GET_ITEM(strides.get(), d));
  }
  PyRef flat = PyRef::steal(PyObject_CallMethod(fake.get(), "new_empty", "((L))", static_cast<long long>(extent)));
  PyRef grad = flat ? PyRef::steal(PyObject_CallMethod(flat.get(), "requires_grad_", "O", Py_True)) : PyRef();
  PyRef buffer = grad ? PyRef::steal(PyObject_CallMethod(flat.get(), "clone", nullptr)) : PyRef();
  PyRef view = buffer ? PyRef::steal(PyObject_CallMethod(buffer.get(), "as_strided", "OO", sizes.get(), strides.get()))
                      : PyRef();
  if (!view) fail();
  return view;
}

// A meta tensor for what kiln's own rule says a call returns (Note [Own metas]).
PyRef own_meta_tensor(const OwnMeta& meta) {
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(meta.like->fake.get(), "dtype"));
  if (!dtype) abort_trace(BreakCode::ShapeInference, "a fake tensor without a dtype: " + take_python_error());
  PyRef fake = make_meta_tensor(meta.sizes, meta.strides, dtype.get(), meta.requires_grad);
  return meta.requires_grad ? non_leaf(std::move(fake)) : fake;
}

// True when the value holds something that differs between sample points.
bool involves_symbols(const ValuePtr& value) {
  if (value->is(ValueKind::SymInt)) return true;
  if (value->is(ValueKind::Tensor)) return !value->alt_fakes.empty();
  for (const ValuePtr& item : value->items) {
    if (item && involves_symbols(item)) return true;
  }
  return false;
}

}  // namespace

bool is_int(PyObject* obj) { return PyLong_Check(obj) && !PyBool_Check(obj); }

bool all_equal(const std::vector<PyRef>& results) {
  for (size_t p = 1; p < results.size(); ++p) {
    int eq = PyObject_RichCompareBool(results[0].get(), results[p].get(), Py_EQ);
    if (eq < 0) PyErr_Clear();
    if (eq != 1) return false;
  }
  return true;
}

TraceState::TraceState(const guards::FrameView& frame, const DynamicDims& dynamic)
    : frame_(frame),
      dynamic_(dynamic),
      points_(dynamic.empty() ? 1 : SymbolTable::kPoints + 1),  // the size-one point last
      graph_(std::make_unique<graph::Graph>()),
      guards_(std::make_unique<guards::GuardSet>()) {
  if (dynamic.shifted_points) symbols_.use_shifted_points();
  // Every graph's autograd behaviour depends on the grad mode it ran under.
  guards_->add_grad_mode(runtime::grad_mode_enabled());
  // Factories, Python floats made tensors and int/float promotion all read
  // the default dtype at trace time.
  guards_->add_default_dtype(runtime::default_dtype());
  // Autocast around the call changes the dtypes ops compute in (Note
  // [Explicit autocast casts]).
  const runtime::AutocastState autocast = runtime::autocast_state();
  guards_->add_autocast(autocast);
  ambient_autocast_ = autocast.any();
}

ValuePtr TraceState::wrap(PyObject* obj, int source) {
  if (source >= 0) {
    auto found = wrapped_.find(source);
    if (found != wrapped_.end()) return found->second;
  }
  const base::TorchApi* api = base::torch_api();
  if (!api) abort_trace(BreakCode::PythonException, take_python_error());
  ValuePtr value;
  const bool guarded = source >= 0;
  if (runtime::is_tensor(obj)) {
    if (!guarded) {
      graph::TensorMeta meta;
      runtime::read_tensor_meta(obj, &meta);
      abort_trace(BreakCode::UnsupportedValue, "a tensor (" + graph::format_tensor_meta(meta) +
                                                   ") reached without a source (through torch's namespace or a "
                                                   "fixed object) cannot be a graph input");
    }
    value = wrap_tensor(obj, source);
  } else if (guarded && PyLong_CheckExact(obj) && (value = wrap_dynamic_int(obj, source))) {
    // a SymInt bound by an IntSymbol guard
  } else if (is_constant_object(obj, *api)) {
    if (guarded) guards_->add_constant_match(source, obj);
    value = make_constant(PyRef::borrow(obj), source);
  } else if ((PyList_CheckExact(obj) || is_plain_dict(obj)) && guarded &&
             wrapped_containers_.count(obj)) {
    value = wrapped_containers_[obj];
  } else if (PyTuple_CheckExact(obj) || PyList_CheckExact(obj) ||
             PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(api->size_type))) {
    const bool is_list = PyList_CheckExact(obj);
    if (guarded) guards_->add_length_match(source, obj);
    std::vector<ValuePtr> items;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(obj, i);
      items.push_back(wrap(item, guarded ? sources().index(source, static_cast<int>(i)) : -1));
    }
    value = make_sequence(is_list ? ValueKind::List : ValueKind::Tuple, std::move(items), source);
    if (!is_list && !PyTuple_CheckExact(obj)) value->obj = PyRef::borrow(obj);  // torch.Size
  } else if (PyTuple_Check(obj) && is_namedtuple_type(reinterpret_cast<PyObject*>(Py_TYPE(obj)))) {
    // Note [Records]: a namedtuple is a Tuple that remembers its type.
    if (guarded) {
      guards_->add_type_match(source, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
      guards_->add_length_match(source, obj);
    }
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      items.push_back(wrap(PyTuple_GET_ITEM(obj, i), guarded ? sources().index(source, static_cast<int>(i)) : -1));
    }
    value = make_sequence(ValueKind::Tuple, std::move(items), source);
    value->tuple_type = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  } else if (PyFrozenSet_CheckExact(obj) && all_constant_items(obj, *api)) {
    if (guarded) guards_->add_constant_match(source, obj);
    value = make_constant(PyRef::borrow(obj), source);
  } else if (PySet_CheckExact(obj) && all_constant_items(obj, *api)) {
    // A private copy: the caller may change its set after the call.
    PyRef copy = PyRef::steal(PySet_New(obj));
    if (guarded) guards_->add_constant_match(source, copy.get());
    value = make_object(ValueKind::Set, std::move(copy), source);
  } else if (is_plain_dict(obj)) {
    value = wrap_dict(obj, source, guarded);
  } else if (PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(api->module_type))) {
    if (guarded) guards_->add_id_match(source, obj);
    value = make_object(ValueKind::Module, PyRef::borrow(obj), source);
  } else if (PyModule_Check(obj)) {
    if (guarded) guards_->add_id_match(source, obj);
    value = make_object(ValueKind::PyModule, PyRef::borrow(obj), source);
  } else if (PyCallable_Check(obj) && !PyType_Check(obj)) {
    if (guarded) guards_->add_id_match(source, obj);
    stdlib::CallableInfo info = stdlib::classify_callable(obj);
    if (info.kind != stdlib::CallableClass::NotTorch) {
      value = make_object(ValueKind::TorchCallable, PyRef::borrow(obj), source);
      value->name = info.name;
    } else if (PyFunction_Check(obj)) {
      value = make_object(ValueKind::Function, PyRef::borrow(obj), source);
    } else if (PyMethod_Check(obj) && PyFunction_Check(PyMethod_GET_FUNCTION(obj))) {
      value = make_object(ValueKind::Method, PyRef::borrow(PyMethod_GET_FUNCTION(obj)), source);
      PyRef self_name = PyRef::steal(PyUnicode_InternFromString("__self__"));
      value->self = wrap(PyMethod_GET_SELF(obj), guarded ? sources().attr(source, self_name.get()) : -1);
    } else if (PyCFunction_Check(obj)) {
      value = make_object(ValueKind::Builtin, PyRef::borrow(obj), source);
    } else {
      value = make_object(ValueKind::Object, PyRef::borrow(obj), source);
    }
  } else if (guarded && wrapped_objects_.count(obj)) {
    // One object through a second source: one value, so that stores through
    // either name are seen through the other. An object guarded by type
    // stays so, the second name guarded to be the first (a resume
    // function's stack and locals both hold the cache under construction);
    // else both names are guarded to the object.
    value = wrapped_objects_[obj];
    if (value->identity_deferred) {
      guards_->add_same_object(value->source, source);
    } else {
      guards_->add_id_match(source, obj);
    }
  } else if (guarded && is_dict_backed(obj)) {
    // Note [Dict-backed objects]: the DictKeys guard holds the exact type.
    value = make_object(ValueKind::Object, PyRef::borrow(obj), source);
    value->identity_deferred = true;
    value->contents = wrap_dict(obj, source, /*guarded=*/true);
    value->contents->object_items = true;
    wrapped_objects_[obj] = value;
  } else if (guarded && is_identity_free(obj)) {
    guards_->add_type_match(source, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    value = make_object(ValueKind::Object, PyRef::borrow(obj), source);
    value->identity_deferred = true;
    wrapped_objects_[obj] = value;
  } else {
    if (guarded) guards_->add_id_match(source, obj);
    value = make_object(ValueKind::Object, PyRef::borrow(obj), source);
    if (guarded) wrapped_objects_[obj] = value;
  }
  if (source >= 0) wrapped_[source] = value;
  if (source >= 0 && (PyList_CheckExact(obj) || is_plain_dict(obj))) wrapped_containers_[obj] = value;
  return value;
}

// A dict read item by item: its keys (in iteration order) guarded with it,
// each item through its own source. A dict subclass keeps its type.
ValuePtr TraceState::wrap_dict(PyObject* obj, int source, bool guarded) {
  // Keys in the dict's own iteration order, which the trace's loops and
  // write-back follow, so the guard holds the order too.
  std::vector<PyRef> keys;
  if (!base::dict_keys_in_order(obj, keys)) abort_trace(BreakCode::PythonException, take_python_error());
  for (const PyRef& key : keys) {
    if (!plain_key(key.get())) {
      abort_trace(BreakCode::UnsupportedValue,
                  "dict with a key kiln's guards cannot compare (not str, int, bytes, bool, None, a torch.device "
                  "or dtype, a class or an enum member): " + py_repr(key.get()));
    }
  }
  if (guarded) guards_->add_dict_keys(source, obj, keys);
  ValuePtr value = make_sequence(ValueKind::Dict, {}, source);
  // An OrderedDict (nn.Module._modules) reads like a dict; it keeps its
  // order semantics (a dict subclass's own methods are not the view's).
  PyObject* ordered = base::ordered_dict_type();
  if (ordered && PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(ordered))) {
    value->tuple_type = PyRef::borrow(ordered);
  }
  // A defaultdict keeps its factory (guarded through default_factory),
  // which a missing key's subscript calls (trace_attributes.cpp).
  if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) == base::defaultdict_type()) {
    value->tuple_type = PyRef::borrow(base::defaultdict_type());
    PyRef name = PyRef::steal(PyUnicode_InternFromString("default_factory"));
    PyRef factory = PyRef::steal(PyObject_GetAttr(obj, name.get()));
    if (!factory) abort_trace(BreakCode::PythonException, take_python_error());
    ValuePtr made_by = wrap(factory.get(), guarded ? sources().attr(source, name.get()) : -1);
    if (factory.get() != Py_None) value->self = made_by;
  }
  for (const PyRef& key : keys) {
    PyObject* item = PyDict_GetItemWithError(obj, key.get());
    if (!item) abort_trace(BreakCode::PythonException, "a dict key vanished while it was read: " + py_repr(key.get()));
    value->keys.push_back(key);
    value->items.push_back(wrap(item, guarded ? sources().dict_item(source, key.get()) : -1));
  }
  return value;
}

ValuePtr TraceState::wrap_unguarded(PyObject* obj) { return wrap(obj, -1); }

void TraceState::guard_distinct_objects() {
  // Per type (objects of two types are kept apart by their type guards),
  // in source order so that the guard listing is stable between runs; a
  // group whose objects are all guarded by identity needs nothing more.
  std::vector<const Value*> objects;
  for (const auto& [obj, value] : wrapped_objects_) objects.push_back(value.get());
  std::sort(objects.begin(), objects.end(), [](const Value* a, const Value* b) { return a->source < b->source; });
  std::vector<bool> grouped(objects.size(), false);
  for (size_t i = 0; i < objects.size(); ++i) {
    if (grouped[i]) continue;
    std::vector<int> sources;
    bool any_deferred = false;
    for (size_t j = i; j < objects.size(); ++j) {
      if (Py_TYPE(objects[j]->obj.get()) != Py_TYPE(objects[i]->obj.get())) continue;
      grouped[j] = true;
      sources.push_back(objects[j]->source);
      any_deferred = any_deferred || objects[j]->identity_deferred;
    }
    if (any_deferred) guards_->add_distinct(std::move(sources));
  }
}

void TraceState::pin_identity(const ValuePtr& value, const char* why) {
  if (!value || !value->identity_deferred) return;
  value->identity_deferred = false;
  guards_->add_id_match(value->source, value->obj.get());
  KILN_LOG(guards, "guarding the identity of " << sources().at(value->source).text << ": " << why);
}

// Note [Side effects]
// Stores to attributes of objects the frame reached through sources, and to
// globals, are not done while tracing: they are recorded in order, later
// reads in the trace see the stored value, and the stores are replayed once
// after the graph runs (or, at a graph break, by the transformed code
// before the instruction CPython runs). The graph returns the stored values
// after the frame's result.
void TraceState::note_container_write(const ValuePtr& container) {
  if (container->object_items) {
    abort_trace(BreakCode::SideEffect, "a write to the items of an object of a dict subclass the frame was given "
                                       "(Note [Dict-backed objects]: not replayed through its class's methods)");
  }
  note_mutation();
  const SideEffect::Kind kind =
      container->is(ValueKind::List) ? SideEffect::Kind::ListContents : SideEffect::Kind::DictContents;
  for (const auto& store : stores) {
    if (store.effect.kind == kind && store.value.get() == container.get()) return;  // already recorded
  }
  BreakInfo::PendingStore store;
  store.effect.kind = kind;
  store.effect.target_source = container->source;
  store.value = container;
  stores.push_back(std::move(store));
}

ValuePtr TraceState::stored_attr(const ValuePtr& target, PyObject* name) const {
  for (auto it = stores.rbegin(); it != stores.rend(); ++it) {
    if (it->effect.kind == SideEffect::Kind::Attr && it->effect.target_source == target->source &&
        PyUnicode_Compare(it->effect.name.get(), name) == 0) {
      return it->value;
    }
  }
  return nullptr;
}

ValuePtr TraceState::stored_global(PyObject* globals, PyObject* name) const {
  for (auto it = stores.rbegin(); it != stores.rend(); ++it) {
    if (it->effect.kind == SideEffect::Kind::Global && it->effect.globals.get() == globals &&
        PyUnicode_Compare(it->effect.name.get(), name) == 0) {
      return it->value;
    }
  }
  return nullptr;
}

void TraceState::set_grad_mode(bool enabled) {
  const base::TorchApi* api = base::torch_api();
  // call_torch runs the op on the fakes' side too: that switches the mode
  // for the rest of the trace, as the replay will.
  call_torch("torch._C._set_grad_enabled", api->set_grad_mode,
             {wrap_unguarded(enabled ? Py_True : Py_False)}, {}, false);
}

ValuePtr TraceState::wrap_tensor(PyObject* tensor, int source) {
  auto value = std::make_shared<Value>();
  value->kind = ValueKind::Tensor;
  value->source = source;
  value->tensor_address = reinterpret_cast<uintptr_t>(tensor);
  // The exact type answers isinstance() (a Parameter is not a plain Tensor).
  value->obj = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(tensor)));
  runtime::read_tensor_meta(tensor, &value->meta);
  const TensorMeta& meta = value->meta;
  // Which dims are dynamic (Note [Dynamic shapes]): only contiguous
  // tensors, only dims of size >= 2.
  std::vector<int8_t> dim_symbols;
  if (points_ > 1 && meta.strides == graph::contiguous_strides(meta.sizes)) {
    const guards::Source& where = sources().at(source);
    const bool argument = dynamic_.all_arguments && where.kind == guards::SourceKind::Local;
    const std::vector<int> fixed = static_dims(tensor);
    const int together = dynamic_.changes_together(where.text, meta.sizes);
    for (size_t d = 0; d < meta.sizes.size(); ++d) {
      int symbol = -1;
      if (dynamic_.leading_only && d != 0) continue;
      if (std::find(fixed.begin(), fixed.end(), static_cast<int>(d)) != fixed.end()) continue;
      const bool listed = argument || together == static_cast<int>(d) ||
                          dynamic_.contains(where.text, static_cast<int>(d));
      if (meta.sizes[d] >= 2 && listed) {
        symbol = symbols_.new_symbol(meta.sizes[d]);
      }
      if (symbol >= 0) dim_symbols.resize(meta.sizes.size(), -1);
      if (symbol >= 0) dim_symbols[d] = static_cast<int8_t>(symbol);
    }
  }
  std::vector<std::string> names;
  for (int8_t symbol : dim_symbols) names.push_back(symbol < 0 ? "" : "s" + std::to_string(symbol));
  guards_->add_tensor_match(source, meta, dim_symbols);
  value->node = graph_->add_input(source, sources().at(source).text, meta);
  if (!names.empty()) graph_->node(value->node).symbolic_sizes.push_back(names);
  // The fake twin: same sizes, strides, dtype and grad, on the meta device;
  // with dynamic dims, one more per sample point at the scaled sizes.
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(tensor, "dtype"));
  value->fake = make_meta_tensor(meta.sizes, meta.strides, dtype.get(), meta.requires_grad);
  // A tensor with a grad_fn (an activation passed in, or an earlier graph's
  // result reaching a resumed frame) is no leaf: in-place ops on it are
  // allowed eagerly, and a leaf fake would refuse them at trace time.
  if (meta.requires_grad) {
    PyRef grad_fn = PyRef::steal(PyObject_GetAttrString(tensor, "grad_fn"));
    if (!grad_fn) PyErr_Clear();
    if (grad_fn && grad_fn.get() != Py_None) value->fake = non_leaf(std::move(value->fake));
  }
  if (!dim_symbols.empty()) {
    for (int p = 1; p < points_; ++p) {
      std::vector<int64_t> sizes = meta.sizes;
      for (size_t d = 0; d < sizes.size(); ++d) {
        if (dim_symbols[d] >= 0) sizes[d] = symbols_.at_point(sizes[d], p);
      }
      value->alt_fakes.push_back(
          make_meta_tensor(sizes, graph::contiguous_strides(sizes), dtype.get(), meta.requires_grad));
    }
  }
  return value;
}

Arg TraceState::lower(const ValuePtr& value) {
  switch (value->kind) {
    case ValueKind::Tensor: return Arg::of_node(value->node);
    case ValueKind::Set: {
      if (!value->items.empty()) abort_trace(BreakCode::UnsupportedValue, "a set holding tensors passed to a graph op");
      // A new set on every run: set(frozenset(...)).
      PyRef frozen = PyRef::steal(PyFrozenSet_New(value->obj.get()));
      std::vector<Arg> args;
      args.push_back(Arg::of_constant(frozen.get()));
      return Arg::of_node(graph_->add_call("set", reinterpret_cast<PyObject*>(&PySet_Type), std::move(args), {}));
    }
    case ValueKind::SymInt: {
      // Computed by graph nodes from the tensors it was read from.
      if (value->node < 0) {
        std::vector<Arg> args;
        for (const ValuePtr& operand : value->items) args.push_back(lower(operand));
        int node = graph_->add_call(value->name, value->obj.get(), std::move(args), {});
        if (value->sym_index) {
          node = graph_->add_call("operator.getitem", base::torch_api()->getitem,
                                  {Arg::of_node(node), Arg::of_constant(value->sym_index.get())}, {});
        }
        value->node = node;
      }
      return Arg::of_node(value->node);
    }
    case ValueKind::Constant: return Arg::of_constant(value->obj.get());
    case ValueKind::Tuple:
    case ValueKind::List: {
      // A torch.Size (or other constant tuple subclass) stays itself.
      if (value->obj && value->is(ValueKind::Tuple)) return Arg::of_constant(value->obj.get());
      Arg arg;
      arg.kind = value->is(ValueKind::Tuple) ? Arg::Kind::Tuple : Arg::Kind::List;
      for (const ValuePtr& item : value->items) arg.items.push_back(lower(item));
      return arg;
    }
    case ValueKind::Dict: {
      Arg arg;
      arg.kind = Arg::Kind::Dict;
      for (size_t i = 0; i < value->items.size(); ++i) {
        PyObject* key = value->keys[i].get();
        Py_INCREF(key);
        arg.keys.push_back(key);
        arg.items.push_back(lower(value->items[i]));
      }
      return arg;
    }
    default: {
      if (PyRef obj = node_constant_of(value)) return Arg::of_constant(obj.get());
      abort_trace(BreakCode::UnsupportedValue,
                  "a value of kind " + describe_value(*value) + " cannot be passed to a graph op");
    }
  }
}

graph::Arg TraceState::lower_contents(const ValuePtr& container) {
  Arg arg;
  arg.kind = container->is(ValueKind::List) ? Arg::Kind::List : Arg::Kind::Dict;
  for (size_t i = 0; i < container->items.size(); ++i) {
    if (arg.kind == Arg::Kind::Dict) {
      PyObject* key = container->keys[i].get();
      Py_INCREF(key);
      arg.keys.push_back(key);
    }
    arg.items.push_back(lower_output(container->items[i]));
  }
  return arg;
}

namespace {

// Values whose identity Python code can observe (`is`, mutation through
// one reference) and that lower_output builds anew each time.
bool has_identity(const Value& value) {
  if (value.source >= 0) return false;  // the caller's own object comes back
  return value.is(ValueKind::List) || value.is(ValueKind::Dict) || value.is(ValueKind::Record);
}

void count_uses(const ValuePtr& value, std::unordered_map<const Value*, int>& uses) {
  if (!value) return;
  if (has_identity(*value) && ++uses[value.get()] > 1) return;  // its items were counted
  if (value->source >= 0 && !value->is(ValueKind::Tensor)) return;
  if (value->is(ValueKind::Tuple) || has_identity(*value)) {
    for (const ValuePtr& item : value->items) count_uses(item, uses);
  }
  if (value->is(ValueKind::Record)) {
    // Its __dict__ and items are rebuilt as fresh dicts; what they hold counts.
    for (const ValuePtr& item : value->attrs->items) count_uses(item, uses);
    if (value->contents) {
      for (const ValuePtr& item : value->contents->items) count_uses(item, uses);
    }
  }
}

// Note [Fresh results]
// An extern's result may be one of its arguments or a view of one (x.add_
// returns x, x.transpose a view), so the prim graph assumes it aliases, and
// an in-place op on it stays in place (Note [In-place ops on intermediates]
// in prims/decompose.cpp): the conv2d -> SiLU(inplace=True) of conv nets
// then kept their whole training graph out of kiln's autograd. The fakes
// tell: meta tensors keep storage identity through views and in-place ops,
// so a result whose storage is none of the arguments' is a new tensor.

// The identity of `tensor`'s storage, or null.
PyRef storage_of(PyObject* tensor) {
  PyRef storage = PyRef::steal(PyObject_CallMethod(tensor, "untyped_storage", nullptr));
  PyRef id = storage ? PyRef::steal(PyObject_GetAttrString(storage.get(), "_cdata")) : PyRef();
  if (!id) PyErr_Clear();
  return id;
}

// Appends the storage identities of the tensors in `obj` (nested tuples,
// lists and dict values); false when one cannot be read.
bool collect_storages(PyObject* obj, std::vector<PyRef>* out) {
  if (runtime::is_tensor(obj)) {
    PyRef id = storage_of(obj);
    if (!id) return false;
    out->push_back(std::move(id));
    return true;
  }
  if (PyTuple_Check(obj) || PyList_Check(obj)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(obj); ++i) {
      if (!collect_storages(PySequence_Fast_GET_ITEM(obj, i), out)) return false;
    }
  } else if (PyDict_Check(obj)) {
    PyObject* key;
    PyObject* item;
    Py_ssize_t pos = 0;
    while (PyDict_Next(obj, &pos, &key, &item)) {
      if (!collect_storages(item, out)) return false;
    }
  }
  return true;
}

// True when tensor `result` shares storage with no tensor in the call's
// fake arguments (Note [Fresh results]).
bool shares_no_storage(PyObject* result, PyObject* args, PyObject* kwargs) {
  if (!runtime::is_tensor(result)) return false;
  std::vector<PyRef> inputs;
  PyRef made = storage_of(result);
  if (!made || !collect_storages(args, &inputs) || !collect_storages(kwargs, &inputs)) return false;
  for (const PyRef& id : inputs) {
    const int same = PyObject_RichCompareBool(id.get(), made.get(), Py_EQ);
    if (same != 0) {
      if (same < 0) PyErr_Clear();
      return false;
    }
  }
  return true;
}

}  // namespace

void TraceState::plan_output_identity(const std::vector<ValuePtr>& roots) {
  output_uses_.clear();
  output_nodes_.clear();
  for (const ValuePtr& root : roots) count_uses(root, output_uses_);
}

graph::Arg TraceState::lower_output(const ValuePtr& value) {
  auto uses = output_uses_.find(value.get());
  if (uses == output_uses_.end() || uses->second < 2 || !has_identity(*value)) return lower_output_once(value);
  auto built = output_nodes_.find(value.get());
  if (built != output_nodes_.end()) return Arg::of_node(built->second);
  Arg arg = lower_output_once(value);
  int node = arg.node;
  if (arg.kind != Arg::Kind::Node) {
    // A plain list or dict: one node makes it, its uses share the object.
    PyObject* type = reinterpret_cast<PyObject*>(value->is(ValueKind::List) ? &PyList_Type : &PyDict_Type);
    std::vector<Arg> args;
    args.push_back(std::move(arg));
    node = graph_->add_call(value->is(ValueKind::List) ? "list" : "dict", type, std::move(args), {});
  }
  output_nodes_[value.get()] = node;
  return Arg::of_node(node);
}

graph::Arg TraceState::lower_output_once(const ValuePtr& value) {
  if (value->is(ValueKind::SymInt) && value->node >= 0) return Arg::of_node(value->node);  // a dynamic int
  if (value->source >= 0 && !value->is(ValueKind::Tensor) && !value->is(ValueKind::Constant)) {
    int node = graph_->add_object_input(value->source, sources().at(value->source).text);
    return Arg::of_node(node);
  }
  switch (value->kind) {
    case ValueKind::Tuple:
    case ValueKind::List: {
      if (value->obj && value->is(ValueKind::Tuple)) return Arg::of_constant(value->obj.get());
      Arg arg;
      arg.kind = value->is(ValueKind::Tuple) ? Arg::Kind::Tuple : Arg::Kind::List;
      for (const ValuePtr& item : value->items) arg.items.push_back(lower_output(item));
      if (value->tuple_type) {
        // torch.return_types.* and namedtuples are rebuilt by their type.
        std::vector<Arg> args;
        args.push_back(std::move(arg));
        PyRef rebuild = namedtuple_rebuilder(value->tuple_type.get());
        std::string name = reinterpret_cast<PyTypeObject*>(value->tuple_type.get())->tp_name;
        if (rebuild.get() != value->tuple_type.get()) name += "._make";
        int node = graph_->add_call(name, rebuild.get(), std::move(args), {});
        return Arg::of_node(node);
      }
      return arg;
    }
    case ValueKind::Dict: {
      Arg contents = lower_contents(value);  // a dict the trace built: a new dict
      if (!value->tuple_type) return contents;
      std::vector<Arg> args;
      if (value->tuple_type.get() == base::defaultdict_type()) {
        args.push_back(value->self ? Arg::of_constant(value->self->obj.get()) : Arg::of_constant(Py_None));
      }
      args.push_back(std::move(contents));
      int node = graph_->add_call(reinterpret_cast<PyTypeObject*>(value->tuple_type.get())->tp_name,
                                  value->tuple_type.get(), std::move(args), {});
      return Arg::of_node(node);
    }
    case ValueKind::Record:
      return lower_record(value);
    default:
      return lower(value);
  }
}

PyRef TraceState::lower_fake(const ValuePtr& value, int point) {
  switch (value->kind) {
    case ValueKind::Tensor:
      return point == 0 || value->alt_fakes.empty() ? value->fake : value->alt_fakes[point - 1];
    case ValueKind::SymInt:
      if (value->sym_slice) {
        return PyRef::steal(PySlice_New(lower_fake(value->items[0], point).get(),
                                        lower_fake(value->items[1], point).get(),
                                        lower_fake(value->items[2], point).get()));
      }
      return PyRef::steal(PyLong_FromLongLong(value->sym_points[point]));
    case ValueKind::Set:
      if (!value->items.empty()) abort_trace(BreakCode::UnsupportedValue, "a set holding tensors passed to a graph op");
      return PyRef::steal(PySet_New(value->obj.get()));
    case ValueKind::Constant: return value->obj;
    case ValueKind::Tuple:
    case ValueKind::List: {
      if (value->obj && value->is(ValueKind::Tuple)) return value->obj;
      const Py_ssize_t n = static_cast<Py_ssize_t>(value->items.size());
      const bool tuple = value->is(ValueKind::Tuple);
      PyRef out = PyRef::steal(tuple ? PyTuple_New(n) : PyList_New(n));
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = lower_fake(value->items[i], point).release();
        if (tuple) {
          PyTuple_SET_ITEM(out.get(), i, item);
        } else {
          PyList_SET_ITEM(out.get(), i, item);
        }
      }
      return out;
    }
    case ValueKind::Dict: {
      PyRef out = PyRef::steal(PyDict_New());
      for (size_t i = 0; i < value->items.size(); ++i) {
        PyDict_SetItem(out.get(), value->keys[i].get(), lower_fake(value->items[i], point).get());
      }
      return out;
    }
    default:
      if (PyRef obj = node_constant_of(value)) return obj;
      abort_trace(BreakCode::UnsupportedValue,
                  "a value of kind " + describe_value(*value) + " cannot be passed to a graph op");
  }
}

ValuePtr TraceState::wrap_result(int node, PyObject* fake, DeviceType device_type,
                                 int device_index) {
  auto value = std::make_shared<Value>();
  value->kind = ValueKind::Tensor;
  value->node = node;
  value->fake = PyRef::borrow(fake);
  runtime::read_tensor_meta(fake, &value->meta);
  value->meta.device_type = device_type;
  value->meta.device_index = static_cast<int8_t>(device_index);
  return value;
}

ValuePtr TraceState::call_torch(const std::string& name, PyObject* target,
                                const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                                bool factory) {
  const base::TorchApi* api = base::torch_api();
  // Where results live: an explicit device= wins, then the first tensor
  // argument's device, then torch's default device (guarded when read).
  DeviceType device_type = DeviceType::CPU;
  int device_index = -1;
  bool device_found = false;
  for (const ValuePtr& arg : args) first_tensor_device(arg, &device_type, &device_index, &device_found);
  for (const auto& kw : kwargs) first_tensor_device(kw.second, &device_type, &device_index, &device_found);

  std::vector<Arg> graph_args;
  bool dynamic = false;
  for (const ValuePtr& arg : args) {
    graph_args.push_back(lower(arg));
    dynamic = dynamic || (points_ > 1 && involves_symbols(arg));
  }
  std::vector<std::pair<std::string, Arg>> graph_kwargs;
  bool has_device = false;
  for (const auto& [key, arg] : kwargs) {
    if (key == "out") {
      abort_trace(BreakCode::SideEffect, name + "(out=...) writes into an existing tensor");
    }
    graph_kwargs.emplace_back(key, lower(arg));
    dynamic = dynamic || (points_ > 1 && involves_symbols(arg));
    if (key == "device" && arg->is(ValueKind::Constant) && arg->obj.get() != Py_None) {
      parse_device(arg->obj.get(), *api, &device_type, &device_index);
      has_device = true;
    }
  }
  // x.to(device) / x.to("cuda:0"): the device is positional. Fakes live on
  // the meta device, so they are moved to "meta"; the result's device is
  // the one named (a move to the tensor's own device is a no-op eagerly).
  std::vector<bool> positional_device(args.size(), false);
  if (name == "Tensor.to") {
    for (size_t i = 1; i < args.size(); ++i) {
      PyObject* spec = args[i]->is(ValueKind::Constant) ? args[i]->obj.get() : nullptr;
      if (!spec || !(PyUnicode_Check(spec) || Py_TYPE(spec) == reinterpret_cast<PyTypeObject*>(api->device_type))) {
        continue;
      }
      parse_device(spec, *api, &device_type, &device_index);
      positional_device[i] = true;
      has_device = true;
    }
  }
  const bool default_device = !device_found && !has_device;
  if (default_device) {
    int8_t index = -1;
    runtime::default_device(&device_type, &index);
    device_index = index;
  }
  // The fakes standing for the arguments at sample point p.
  auto fakes_at = [&](int p) {
    PyRef fake_args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
    for (size_t i = 0; i < args.size(); ++i) {
      PyObject* fake = positional_device[i] ? PyUnicode_FromString("meta") : lower_fake(args[i], p).release();
      if (i == 0 && p > 0 && name == "operator.getitem" && args.size() == 2) {
        if (PyRef wide = unclamped_fake(args[0], args[1], p)) {
          Py_DECREF(fake);
          fake = wide.release();
        }
      }
      PyTuple_SET_ITEM(fake_args.get(), i, fake);
    }
    PyRef fake_kwargs = PyRef::steal(PyDict_New());
    for (const auto& [key, arg] : kwargs) {
      if (key == "device" && arg->is(ValueKind::Constant) && arg->obj.get() != Py_None) {
        PyRef meta = PyRef::steal(PyUnicode_FromString("meta"));
        PyDict_SetItemString(fake_kwargs.get(), "device", meta.get());
      } else {
        PyDict_SetItemString(fake_kwargs.get(), key.c_str(), lower_fake(arg, p).get());
      }
    }
    if (factory && !has_device && !device_found) {
      // Without this, inference would allocate (and draw random numbers) for real.
      PyRef meta = PyRef::steal(PyUnicode_FromString("meta"));
      PyDict_SetItemString(fake_kwargs.get(), "device", meta.get());
    }
    return std::make_pair(fake_args, fake_kwargs);
  };
  // Under autocast, the casts it applies become Tensor.to nodes and the op
  // is traced again on the cast inputs, as it is (Note [Explicit autocast
  // casts]). Ops whose casts cannot be made explicit infer their results
  // under autocast: meta tensors escape it, so the fakes claim the real
  // device (Note [Autocast blocks]).
  bool implicit_autocast = false;
  if (autocast_active() && !autocast_explicit_) {
    std::optional<AutocastCasts> casts;
    if (!dynamic) {
      auto [fake_args, fake_kwargs] = fakes_at(0);
      casts = explicit_autocast_casts(target, fake_args.get(), fake_kwargs.get(), device_type, device_index);
    }
    if (casts) {
      autocast_explicit_ = true;
      struct Reset {
        bool* flag;
        ~Reset() { *flag = false; }
      } reset{&autocast_explicit_};
      if (casts->empty()) return call_torch(name, target, args, kwargs, factory);
      std::vector<ValuePtr> made(casts->size());
      std::vector<ValuePtr> cast_args;
      for (const ValuePtr& arg : args) cast_args.push_back(with_autocast_casts(arg, *casts, &made));
      KwArgs cast_kwargs;
      for (const auto& [key, arg] : kwargs) cast_kwargs.emplace_back(key, with_autocast_casts(arg, *casts, &made));
      if (std::all_of(made.begin(), made.end(), [](const ValuePtr& v) { return v != nullptr; })) {
        return call_torch(name, target, cast_args, cast_kwargs, factory);
      }
    }
    implicit_autocast = true;
  }
  // A dynamic op runs at every sample point (Note [Dynamic shapes]).
  std::vector<PyRef> results;
  bool fresh = false;
  const int npoints = dynamic ? points_ : 1;
  for (int p = 0; p < npoints; ++p) {
    auto [fake_args, fake_kwargs] = fakes_at(p);
    PyRef result;
    if (!dynamic && !implicit_autocast) {
      if (std::optional<OwnMeta> own = own_meta(name, args, kwargs, runtime::grad_mode_enabled())) {
        result = own_meta_tensor(*own);
      }
    }
    if (!result) {
      if (implicit_autocast) {
        result = infer_under_autocast(target, fake_args.get(), fake_kwargs.get(), device_type, device_index);
      } else {
        result = PyRef::steal(PyObject_Call(target, fake_args.get(), fake_kwargs.get()));
        if (result && p == 0) fresh = shares_no_storage(result.get(), fake_args.get(), fake_kwargs.get());
      }
    }
    // Note [Meta layouts]: the fake takes the real kernels' strides.
    if (result) result = with_real_layout(name, fake_args.get(), std::move(result), device_type);
    if (!result) {
      // No tensor took part: the call ran on the real Python values and
      // raised as it would eagerly (Note [Exceptions in inlined frames]).
      if (!device_found && !dynamic) raise_python_error(name + " raised ");
      std::string error = take_python_error();
      if (p == SymbolTable::kOnesPoint) {
        drop_ones_point(name + " fails: " + error);
        break;
      }
      if (p > 0) throw Specialize(name + " fails when the dynamic sizes change: " + error);
      if (error.find("meta") != std::string::npos || error.find("Meta") != std::string::npos) {
        abort_trace(BreakCode::ShapeInference, name + " cannot run on meta tensors: " + error);
      }
      abort_trace(BreakCode::PythonException, name + " raised " + error);
    }
    results.push_back(std::move(result));
  }
  PyObject* out = results[0].get();
  // Tensors placed by torch's default device hold only while it stays.
  if (default_device && (runtime::is_tensor(out) || is_tensor_sequence(out))) {
    guards_->add_default_device(device_type, static_cast<int8_t>(device_index));
  }
  if (runtime::is_tensor(out)) {
    // Note [Conversions that change nothing]
    if (!dynamic && may_return_input(name)) {
      for (const ValuePtr& arg : args) {
        if (arg->is(ValueKind::Tensor) && arg->fake.get() == out) return arg;
      }
    }
    int node = graph_->add_call(name, target, std::move(graph_args), std::move(graph_kwargs));
    graph_->node(node).autocast_implicit = implicit_autocast;
    graph_->node(node).fresh_result = fresh;
    ValuePtr value = wrap_result(node, out, device_type, device_index);
    graph_->node(node).metas.push_back(value->meta);
    if (dynamic) {
      attach_points(value, results, node);
      apply_shape_rule(name, args, kwargs, value);
    }
    if (value->meta.requires_grad && is_inplace_method(name) && !args.empty()) mark_requires_grad(args[0]);
    return value;
  }
  if (!dynamic && !is_tensor_sequence(out) && is_tensor_or_none_sequence(out)) {
    // (tensor, None): the node returns the tensors; the Nones are constants.
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(out);
    std::vector<Py_ssize_t> tensor_positions;
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (runtime::is_tensor(PySequence_Fast_GET_ITEM(out, i))) tensor_positions.push_back(i);
    }
    const bool single = tensor_positions.size() == 1;
    PyRef positions = PyRef::steal(single ? PyLong_FromSsize_t(tensor_positions[0])
                                          : PyTuple_New(static_cast<Py_ssize_t>(tensor_positions.size())));
    for (size_t k = 0; !single && k < tensor_positions.size(); ++k) {
      PyTuple_SET_ITEM(positions.get(), static_cast<Py_ssize_t>(k), PyLong_FromSsize_t(tensor_positions[k]));
    }
    PyRef selector = tensor_selector(target, positions.get());
    int node = graph_->add_call(name, selector.get(), std::move(graph_args), std::move(graph_kwargs));
    graph_->node(node).returns_tuple = !single;
    graph_->node(node).autocast_implicit = implicit_autocast;
    std::vector<ValuePtr> items;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item_obj = PySequence_Fast_GET_ITEM(out, i);
      if (item_obj == Py_None) {
        items.push_back(wrap_unguarded(Py_None));
        continue;
      }
      if (single) {
        ValuePtr item = wrap_result(node, item_obj, device_type, device_index);
        graph_->node(node).metas.push_back(item->meta);
        items.push_back(item);
        continue;
      }
      PyRef index = PyRef::steal(PyLong_FromSsize_t(k++));
      int item_node = graph_->add_call("operator.getitem", api->getitem,
                                       {Arg::of_node(node), Arg::of_constant(index.get())}, {});
      ValuePtr item = wrap_result(item_node, item_obj, device_type, device_index);
      graph_->node(item_node).metas.push_back(item->meta);
      graph_->node(node).metas.push_back(item->meta);
      items.push_back(item);
    }
    return make_sequence(PyList_Check(out) ? ValueKind::List : ValueKind::Tuple, std::move(items));
  }
  if (is_tensor_sequence(out)) {
    int node = graph_->add_call(name, target, std::move(graph_args), std::move(graph_kwargs));
    graph_->node(node).returns_tuple = true;
    graph_->node(node).autocast_implicit = implicit_autocast;
    std::vector<ValuePtr> items;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(out);
    for (size_t p = 0; p < results.size(); ++p) {
      PyObject* r = results[p].get();
      if (is_tensor_sequence(r) && PySequence_Fast_GET_SIZE(r) == n) continue;
      if (static_cast<int>(p) != SymbolTable::kOnesPoint) {
        throw Specialize(name + " returns a different number of tensors when the dynamic sizes change");
      }
      drop_ones_point(name + " returns a different number of tensors");
      results.pop_back();
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyRef index = PyRef::steal(PyLong_FromSsize_t(i));
      int item_node = graph_->add_call("operator.getitem", api->getitem,
                                       {Arg::of_node(node), Arg::of_constant(index.get())}, {});
      ValuePtr item = wrap_result(item_node, PySequence_Fast_GET_ITEM(out, i), device_type, device_index);
      graph_->node(item_node).metas.push_back(item->meta);
      graph_->node(node).metas.push_back(item->meta);
      if (dynamic) {
        std::vector<PyRef> per_point;
        for (const PyRef& r : results) per_point.push_back(PyRef::borrow(PySequence_Fast_GET_ITEM(r.get(), i)));
        attach_points(item, per_point, item_node);
      }
      items.push_back(item);
    }
    ValuePtr result = make_sequence(PyList_Check(out) ? ValueKind::List : ValueKind::Tuple, std::move(items));
    if (!PyTuple_CheckExact(out) && PyTuple_Check(out)) {
      result->tuple_type = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(out)));
    }
    return result;
  }
  if (out == Py_None) {
    // Kept for its effect on its arguments (an in-place op returning None).
    graph_->add_call(name, target, std::move(graph_args), std::move(graph_kwargs));
    return make_constant(PyRef::borrow(Py_None));
  }
  if (is_constant_object(out, *api) || PyTuple_Check(out)) {
    // Metadata only (sizes, dtypes): fixed by the tensor guards, unless it
    // changes with a dynamic size.
    if (dynamic) check_ones_constant(&results, name);
    if (!dynamic || all_equal(results)) return wrap_unguarded(out);
    if (is_int(out) && kwargs.empty()) {
      std::vector<int64_t> per_point;
      for (const PyRef& r : results) per_point.push_back(PyLong_AsLongLong(r.get()));
      return make_symint(std::move(per_point), name, target, args, nullptr);
    }
    throw Specialize(name + " returns " + py_repr(out) + ", which depends on a dynamic size");
  }
  abort_trace(BreakCode::UnsupportedValue,
              name + " returned a " + Py_TYPE(out)->tp_name + ", which a graph cannot hold");
}

// Note [Conversions that change nothing]
// x.float() of a float tensor, x.to(x.dtype), x.contiguous() of a
// contiguous one return x itself, eagerly and on meta tensors alike. The
// trace returns the argument's value then, with no node: `y is x` holds
// as it does eagerly, and a parameter cast under torch.no_grad() inside a
// training graph (diffusers' Wan, `.float()` of a float weight) is the
// parameter, not a view of it that needs no history. Static sizes only
// (a dynamic value's layout answer could change with the size).
bool TraceState::may_return_input(const std::string& name) {
  static const std::unordered_set<std::string_view> kMayReturnInput = {
      "Tensor.contiguous", "Tensor.to",    "Tensor.type", "Tensor.type_as", "Tensor.float",
      "Tensor.double",     "Tensor.half",  "Tensor.bfloat16", "Tensor.int", "Tensor.long",
      "Tensor.bool",       "Tensor.cpu",   "Tensor.cuda", "torch.atleast_1d", "torch.atleast_2d",
      "torch.atleast_3d"};
  return kMayReturnInput.count(name) != 0;
}

// True for Tensor.add_ and the like: methods that write their self.
bool TraceState::is_inplace_method(const std::string& name) {
  return name.rfind("Tensor.", 0) == 0 && name.size() > 8 && name.back() == '_' && name[name.size() - 2] != '_';
}

// `w.add_(y)` with y requiring grad makes w require grad, as eagerly: later
// reads of w (the same Value) must see it, whichever rule inferred the
// call's result (Note [Own metas] computes it without touching w's fake).
void TraceState::mark_requires_grad(const ValuePtr& target) {
  if (!target->is(ValueKind::Tensor) || target->meta.requires_grad) return;
  target->meta.requires_grad = true;
  // A fresh non-leaf fake that requires grad, with the same metadata.
  auto with_grad = [](PyRef& fake) {
    if (!fake) return;
    PyRef leaf = PyRef::steal(PyObject_CallMethod(fake.get(), "detach", nullptr));
    PyRef done = leaf ? PyRef::steal(PyObject_CallMethod(leaf.get(), "requires_grad_", "O", Py_True)) : PyRef();
    if (!done) abort_trace(BreakCode::ShapeInference, "a fake tensor cannot require grad: " + take_python_error());
    fake = non_leaf(std::move(leaf));
  };
  with_grad(target->fake);
  for (PyRef& fake : target->alt_fakes) with_grad(fake);
}

}  // namespace kiln::tracer
