// `with torch.autocast(...)` blocks (and torch.cpu.amp / torch.cuda.amp
// autocast, its subclasses; and Dynamo's spelling of a block as
// _enter_autocast/_exit_autocast calls), traced like grad-mode blocks. See
// Note [Autocast blocks].
#include "graph/graph.h"
#include "base/torch_api.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

PyObject* autocast_class() {
  static PyObject* cls = [] {
    const base::TorchApi* api = base::torch_api();
    PyObject* found = api ? PyObject_GetAttrString(api->torch, "autocast") : nullptr;
    if (!found) PyErr_Clear();
    return found;
  }();
  return cls;
}

// Note [Autocast blocks]
// Calling an autocast class with constant arguments makes the real object
// (its __init__ only checks and stores them). Entering the block emits a
// graph node kiln._autocast.enter(device_type, dtype, enabled,
// cache_enabled), whose value (the entered object) the matching
// kiln._autocast.exit node leaves; the eager executor leaves any block still
// open when an op raises (eager_executor.cpp), like it restores grad mode.
// While tracing the block, a twin object is entered for real, so that torch
// sees autocast on; the TraceState leaves twins still open if the trace
// stops. Autocast does not apply to meta tensors, so inside a block every
// op's result is inferred by kiln._autocast.infer, which shows the fakes to
// the dispatcher as tensors of the real device. No graph break is made
// inside a block (open_with_blocks counts it), as for grad-mode blocks.

// Note [Explicit autocast casts]
// Under autocast, torch casts the inputs of some ops: matmuls and linear
// to the lower dtype, layer_norm, softmax and losses to float32. kiln's
// prims know nothing of autocast, so the graph says it explicitly. For each
// op traced while autocast applies (a traced block, or autocast on when the
// compiled frame was called, which the Autocast guard then holds),
// kiln._autocast.explicit_casts runs the op under autocast on fakes that
// claim the real device, records each copy autocast makes of an input, and
// runs the op again on the cast inputs with autocast out of the way (meta
// tensors escape it); the casts count only when the result dtypes agree.
// They become Tensor.to nodes and the op is traced on the cast inputs like
// any other, so it means the same with or without autocast. Ops autocast
// runs with dtype= instead (sum, prod, cumsum) are reproduced by casting
// their floating inputs to the result's dtype, when autocast cast none of
// them (a composite that ran a bf16 matmul inside must not run it in
// float32). An op neither reproduces is traced under autocast and marked
// `autocast_implicit`: its graph is not decomposed, and runs in the eager
// executor, which enters autocast as the program did. Prim graphs run with autocast off (runtime::AutocastOff), so
// the torch calls they make do not cast a second time.

namespace {

PyObject* helpers() {
  static PyObject* module = PyImport_ImportModule("kiln._autocast");
  return module;
}

PyRef helper(const char* name) {
  PyObject* module = helpers();
  if (!module) abort_trace(BreakCode::PythonException, "kiln._autocast: " + take_python_error());
  PyRef fn = PyRef::steal(PyObject_GetAttrString(module, name));
  if (!fn) abort_trace(BreakCode::PythonException, take_python_error());
  return fn;
}

PyRef attr_of(PyObject* obj, const char* name) {
  PyRef value = PyRef::steal(PyObject_GetAttrString(obj, name));
  if (!value) abort_trace(BreakCode::UnsupportedCall, std::string("autocast object without ") + name);
  return value;
}

}  // namespace

bool is_autocast_class(PyObject* obj) {
  PyObject* base = autocast_class();
  return base && PyType_Check(obj) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(obj), reinterpret_cast<PyTypeObject*>(base));
}

ValuePtr FrameTracer::make_autocast_context(PyObject* cls, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  PyRef call_args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef arg = constant_to_python(args[i]);
    if (!arg) abort_trace(BreakCode::UnsupportedCall, "autocast with argument " + describe_value(*args[i]));
    PyTuple_SET_ITEM(call_args.get(), i, arg.release());
  }
  PyRef call_kwargs = PyRef::steal(PyDict_New());
  for (const auto& [key, value] : kwargs) {
    PyRef arg = constant_to_python(value);
    if (!arg) abort_trace(BreakCode::UnsupportedCall, "autocast with " + key + "=" + describe_value(*value));
    PyDict_SetItemString(call_kwargs.get(), key.c_str(), arg.get());
  }
  PyRef context = PyRef::steal(PyObject_Call(cls, call_args.get(), call_kwargs.get()));
  if (!context) abort_trace(BreakCode::PythonException, "autocast(...) raised " + take_python_error());
  return make_object(ValueKind::AutocastContext, context);
}

void FrameTracer::enter_autocast(const ValuePtr& context) {
  push(open_autocast(context));  // __exit__ of the with block
  push(state_.wrap_unguarded(Py_None));
}

ValuePtr FrameTracer::open_autocast(const ValuePtr& context) {
  PyObject* obj = context->obj.get();
  PyRef device = attr_of(obj, "device");
  PyRef dtype = attr_of(obj, "fast_dtype");
  PyRef enabled = attr_of(obj, "_enabled");
  PyRef cache_enabled = attr_of(obj, "_cache_enabled");
  PyRef enter = helper("enter");
  std::vector<graph::Arg> args;
  for (PyObject* arg : {device.get(), dtype.get(), enabled.get(), cache_enabled.get()}) {
    args.push_back(graph::Arg::of_constant(arg));
  }
  const int node = state_.graph().add_call("kiln.enter_autocast", enter.get(), std::move(args), {});
  PyRef twin = PyRef::steal(PyObject_CallFunctionObjArgs(enter.get(), device.get(), dtype.get(), enabled.get(),
                                                         cache_enabled.get(), nullptr));
  if (!twin) abort_trace(BreakCode::PythonException, "entering autocast raised " + take_python_error());
  state_.open_autocasts.push_back(twin);
  ++state_.open_with_blocks;
  auto exit = make_object(ValueKind::AutocastExit, twin);
  exit->node = node;
  return exit;
}

ValuePtr FrameTracer::exit_autocast(const ValuePtr& exit) {
  PyRef leave = helper("exit");
  std::vector<graph::Arg> args;
  args.push_back(graph::Arg::of_node(exit->node));
  state_.graph().add_call("kiln.exit_autocast", leave.get(), std::move(args), {});
  if (state_.open_autocasts.empty() || state_.open_autocasts.back().get() != exit->obj.get()) {
    abort_trace(BreakCode::UnsupportedFrame, "autocast blocks left out of order");
  }
  state_.open_autocasts.pop_back();
  --state_.open_with_blocks;
  PyRef done = PyRef::steal(PyObject_CallOneArg(leave.get(), exit->obj.get()));
  if (!done) abort_trace(BreakCode::PythonException, "leaving autocast raised " + take_python_error());
  return state_.wrap_unguarded(Py_None);
}

PyRef infer_under_autocast(PyObject* target, PyObject* args, PyObject* kwargs, graph::DeviceType device_type,
                           int device_index) {
  PyRef infer = helper("infer");
  PyRef device = PyRef::steal(PyUnicode_FromString(graph::device_name(device_type, device_index).c_str()));
  return PyRef::steal(PyObject_CallFunctionObjArgs(infer.get(), target, args, kwargs, device.get(), nullptr));
}

std::optional<AutocastCasts> explicit_autocast_casts(PyObject* target, PyObject* args, PyObject* kwargs,
                                                     graph::DeviceType device_type, int device_index) {
  PyRef explicit_casts = helper("explicit_casts");
  PyRef device = PyRef::steal(PyUnicode_FromString(graph::device_name(device_type, device_index).c_str()));
  PyRef found = PyRef::steal(
      PyObject_CallFunctionObjArgs(explicit_casts.get(), target, args, kwargs, device.get(), nullptr));
  if (!found || !PyList_Check(found.get())) {
    // The op raises: inferring it under autocast raises again, and the
    // trace reports that.
    PyErr_Clear();
    return std::nullopt;
  }
  AutocastCasts casts;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(found.get()); ++i) {
    PyObject* pair = PyList_GET_ITEM(found.get(), i);
    casts.emplace_back(PyRef::borrow(PyTuple_GET_ITEM(pair, 0)), PyRef::borrow(PyTuple_GET_ITEM(pair, 1)));
  }
  return casts;
}

ValuePtr TraceState::with_autocast_casts(const ValuePtr& value, const AutocastCasts& casts,
                                         std::vector<ValuePtr>* made) {
  if (value->is(ValueKind::Tensor)) {
    for (size_t i = 0; i < casts.size(); ++i) {
      if (casts[i].first.get() != value->fake.get()) continue;
      if (!(*made)[i]) {
        static PyObject* to = PyObject_GetAttrString(base::torch_api()->tensor_type, "to");
        (*made)[i] = call_torch("Tensor.to", to, {value, wrap_unguarded(casts[i].second.get())}, {}, false);
      }
      return (*made)[i];
    }
    return value;
  }
  if (value->is(ValueKind::Tuple) || value->is(ValueKind::List)) {
    std::vector<ValuePtr> items;
    bool changed = false;
    for (const ValuePtr& item : value->items) {
      items.push_back(with_autocast_casts(item, casts, made));
      changed = changed || items.back() != item;
    }
    return changed ? make_sequence(value->kind, std::move(items)) : value;
  }
  return value;
}

TraceState::~TraceState() {
  // Twins of autocast blocks the trace did not finish (Note [Autocast blocks]).
  if (open_autocasts.empty()) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* module = helpers();
  PyRef leave = module ? PyRef::steal(PyObject_GetAttrString(module, "exit")) : PyRef();
  for (auto it = open_autocasts.rbegin(); it != open_autocasts.rend() && leave; ++it) {
    PyRef done = PyRef::steal(PyObject_CallOneArg(leave.get(), it->get()));
  }
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
}

}  // namespace kiln::tracer
