// Calls: torch ops become graph nodes, Tensor methods become nodes or fold
// to constants, Python functions and nn.Module calls are inlined, and
// builtins and std-module callables go to their models (trace_stdlib.cpp).

#include "runtime/aten_bridge.h"
#include "stdlib/model_registry.h"
#include "base/class_dict.h"
#include "base/log.h"
#include "base/module_attr.h"
#include "base/torch_api.h"
#include "stdlib/torch_callables.h"
#include "tracer/disabled_code.h"
#include "tracer/frame_tracer.h"
#include "tracer/known_layouts.h"

namespace kiln::tracer {

using cpython::Instruction;
using cpython::Op;

namespace {

// True for requires_grad_() / requires_grad_(True) / requires_grad=True.
bool requires_grad_set(const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (args.size() + kwargs.size() > 1) return false;
  if (args.empty() && kwargs.empty()) return true;
  if (!kwargs.empty() && kwargs[0].first != "requires_grad") return false;
  const ValuePtr& flag = args.empty() ? kwargs[0].second : args[0];
  return flag->is(ValueKind::Constant) && PyObject_IsTrue(flag->obj.get()) == 1;
}

// True for requires_grad_set on a tensor that already requires grad: eager
// changes nothing and returns the tensor (transformers' gradient
// checkpointing calls it on the input embeddings' output from a forward
// hook, where the weights make it require grad).
bool requires_grad_unchanged(const ValuePtr& tensor, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!tensor->fake || !requires_grad_set(args, kwargs)) return false;
  PyRef flag_now = PyRef::steal(PyObject_GetAttrString(tensor->fake.get(), "requires_grad"));
  if (!flag_now) PyErr_Clear();
  return flag_now && flag_now.get() == Py_True;
}

// Note [Torch function queries]
// torch's Python functions ask has_torch_function(args) before their own
// code and otherwise hand the call to handle_torch_function, which a trace
// cannot follow (it passes the function itself as a value). The answer is
// True for an argument whose type overrides __torch_function__, and for
// any argument while a torch-function mode is on the thread's stack. The
// one mode kiln meets in practice is torch.set_default_device's
// DeviceContext, whose __torch_function__ only fills in the device of
// factory calls and otherwise calls the function as it was: the trace
// models exactly that (factories read the default device, guarded), so
// with only DeviceContext modes on the stack and arguments that are
// traced tensors (plain tensors and parameters, which override nothing),
// constants and sequences of them, the answer is False, as it is eagerly
// inside the mode's handler. Anything else is asked of torch itself, as
// before (and the handle_torch_function path breaks the graph).
bool only_device_context_modes() {
  // Asked on every torch Python function's entry: no mode is the common
  // case and costs no Python call.
  const int64_t count = runtime::torch_function_mode_count();
  if (count == 0) return true;
  static PyObject* stack_at = base::import_attr("torch._C", "_get_function_stack_at");
  static PyObject* device_context = base::import_attr("torch.utils._device", "DeviceContext");
  if (!stack_at || !device_context) return false;
  for (int64_t i = 0; i < count; ++i) {
    PyRef mode = PyRef::steal(PyObject_CallFunction(stack_at, "L", static_cast<long long>(i)));
    if (!mode || PyObject_IsInstance(mode.get(), device_context) != 1) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

bool overrides_nothing(const ValuePtr& value) {
  switch (value->kind) {
    case ValueKind::Tensor:
    case ValueKind::Constant:
      return true;
    case ValueKind::Tuple:
    case ValueKind::List:
      for (const ValuePtr& item : value->items) {
        if (!overrides_nothing(item)) return false;
      }
      return true;
    default:
      return false;
  }
}

bool no_torch_function_overrides(const std::vector<ValuePtr>& args) {
  for (const ValuePtr& arg : args) {
    if (!overrides_nothing(arg)) return false;
  }
  return only_device_context_modes();
}


constexpr int kMaxInlineDepth = 48;

// A callable's __name__, or "?".
std::string name_of(PyObject* obj) {
  PyRef name = PyRef::steal(PyObject_GetAttrString(obj, "__name__"));
  if (!name || !PyUnicode_Check(name.get())) {
    PyErr_Clear();
    return "?";
  }
  return PyUnicode_AsUTF8(name.get());
}

bool all_constant(const std::vector<ValuePtr>& values) {
  for (const ValuePtr& value : values) {
    if (!value->is(ValueKind::Constant)) return false;
  }
  return true;
}

}  // namespace

PyRef value_to_python(const ValuePtr& value) {
  switch (value->kind) {
    case ValueKind::Constant:
    case ValueKind::Object:
    case ValueKind::Module:
    case ValueKind::Function:
    case ValueKind::Builtin:
    case ValueKind::PyModule:
    case ValueKind::TorchCallable:
      return value->obj;
    case ValueKind::Tuple:
    case ValueKind::List: {
      const Py_ssize_t n = static_cast<Py_ssize_t>(value->items.size());
      const bool tuple = value->is(ValueKind::Tuple);
      PyRef out = PyRef::steal(tuple ? PyTuple_New(n) : PyList_New(n));
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyRef item = value_to_python(value->items[i]);
        if (!item) return PyRef();
        if (tuple) {
          PyTuple_SET_ITEM(out.get(), i, item.release());
        } else {
          PyList_SET_ITEM(out.get(), i, item.release());
        }
      }
      return out;
    }
    case ValueKind::SymInt:
      throw Specialize("a dynamic size is used as a plain Python value");
    case ValueKind::Set:  // a copy: the value's set never changes; tensor members have no object here
      return value->items.empty() ? PyRef::steal(PySet_New(value->obj.get())) : PyRef();
    default:
      return PyRef();
  }
}

PyRef constant_to_python(const ValuePtr& value) {
  if (value->is(ValueKind::Constant)) return value->obj;
  if (value->is(ValueKind::SymInt)) throw Specialize("a dynamic size is used as a plain Python value");
  if (value->is(ValueKind::Set)) return value->items.empty() ? PyRef::steal(PySet_New(value->obj.get())) : PyRef();
  if (value->is(ValueKind::Iterator)) {
    // What is left of it, as a tuple (builtins consume iterators whole).
    std::vector<ValuePtr> rest(value->items.begin() + value->position, value->items.end());
    return constant_to_python(make_sequence(ValueKind::Tuple, std::move(rest)));
  }
  if (value->is(ValueKind::Tuple) || value->is(ValueKind::List)) {
    for (const ValuePtr& item : value->items) {
      if (!constant_to_python(item)) return PyRef();
    }
    return value_to_python(value);
  }
  return PyRef();
}

void FrameTracer::step_call(const Instruction& ins) {
  std::vector<ValuePtr> args;
  KwArgs kwargs;
  ValuePtr callable;
  if (ins.op == Op::Call) {
    PyRef kwnames = std::move(kwnames_);
    kwnames_ = PyRef();
    args = pop_n(ins.arg);
    callable = pop();
    ValuePtr below = pop();
    if (!below->is(ValueKind::Null)) {
      // [method, self, args...]: CPython's unbound-method calling form.
      args.insert(args.begin(), callable);
      callable = below;
    }
    if (kwnames) {
      const Py_ssize_t count = PyTuple_GET_SIZE(kwnames.get());
      const size_t first = args.size() - static_cast<size_t>(count);
      for (Py_ssize_t i = 0; i < count; ++i) {
        kwargs.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames.get(), i)), args[first + i]);
      }
      args.resize(first);
    }
  } else {
    ValuePtr kwargs_dict = (ins.arg & 1) ? pop() : nullptr;
    ValuePtr positional = pop();
    callable = pop();
    ValuePtr below = pop();
    if (!below->is(ValueKind::Null)) {
      args.push_back(callable);
      callable = below;
    }
    std::vector<ValuePtr> unpacked = unpack(positional, -1);
    args.insert(args.end(), unpacked.begin(), unpacked.end());
    if (kwargs_dict) {
      if (!kwargs_dict->is(ValueKind::Dict)) {
        abort_trace(BreakCode::UnsupportedValue, "**kwargs of " + describe_value(*kwargs_dict));
      }
      for (size_t i = 0; i < kwargs_dict->items.size(); ++i) {
        kwargs.emplace_back(PyUnicode_AsUTF8(kwargs_dict->keys[i].get()), kwargs_dict->items[i]);
      }
    }
  }
  push(call_value(callable, std::move(args), std::move(kwargs)));
}

// Note [Custom autograd Functions]
// Cls.apply(*args) of a torch.autograd.Function subclass is one graph node
// calling it, as a torch op is: inlined, Function.apply reads torch
// internals no graph holds (the break it made kept Bloom's every MLP out of
// its graph), and the gradient must be the Function's own backward, not the
// derivative of its forward. At run time torch runs apply (recording the
// backward where gradients flow); under kiln's autograd the node's gradient
// runs apply again under enable_grad and asks torch.autograd.grad, which
// calls the Function's backward (Note [Extern gradients] in
// autograd/derivatives_extern.cpp). Its results' metadata comes from
// running apply on the fakes, so the forward must take meta tensors.
// Where no gradient can flow through the call (grad mode off, or no tensor
// argument requiring grad: both guarded), apply is the forward and nothing
// more, so the forward is inlined like any function, its ctx an object of
// kiln._autograd.InlinedFunctionContext that drops what would be saved for
// the backward: Bloom's GeLUFunction, applied in inference too, becomes
// part of a fused kernel instead of a Python call per layer. A Function
// with its own setup_context() has a forward without ctx; apply with
// keywords, or a forward kiln cannot inline, stays the extern. Where
// gradients flow, forward and backward are both traced where kiln can
// (Note [Traced Function backwards] in trace_function_vjp.cpp); the extern
// above is what is left when it cannot.
namespace {

// Cls.forward as a plain function and whether it takes ctx first (no
// setup_context of its own), or null where it is not a Python function.
PyRef inlinable_forward(PyObject* cls, bool* takes_ctx) {
  PyRef forward = PyRef::steal(PyObject_GetAttrString(cls, "forward"));
  if (!forward) {
    PyErr_Clear();
    return PyRef();
  }
  if (!PyFunction_Check(forward.get())) return PyRef();
  *takes_ctx = function_forward_takes_ctx(cls);
  return forward;
}

}  // namespace

ValuePtr FrameTracer::inline_function_forward(PyObject* cls, const std::vector<ValuePtr>& args,
                                              const KwArgs& kwargs) {
  if (!kwargs.empty()) return nullptr;
  if (runtime::grad_mode_enabled() && any_requires_grad(args)) return nullptr;
  bool takes_ctx = false;
  PyRef forward = inlinable_forward(cls, &takes_ctx);
  if (!forward) return nullptr;
  std::vector<ValuePtr> call_args;
  if (takes_ctx) {
    static PyObject* ctx_class = [] {
      PyObject* found = base::import_attr("kiln._autograd", "InlinedFunctionContext");
      if (!found) PyErr_Clear();
      return found;  // kept for the process
    }();
    if (!ctx_class) return nullptr;
    PyRef count = PyRef::steal(PyLong_FromSize_t(args.size()));
    call_args.push_back(call_value(state_.wrap_unguarded(ctx_class), {state_.wrap_unguarded(count.get())}, {}));
  }
  call_args.insert(call_args.end(), args.begin(), args.end());
  KILN_LOG(graph, reinterpret_cast<PyTypeObject*>(cls)->tp_name
                      << ".apply: no gradient flows through it; its forward is traced inline");
  // apply runs the forward under no_grad: a parameter it reads gets no
  // gradient through it.
  const bool grad_mode = runtime::grad_mode_enabled();
  if (grad_mode) state_.set_grad_mode(false);
  ValuePtr result = inline_function(forward.get(), -1, std::move(call_args), {});
  if (grad_mode) state_.set_grad_mode(true);
  return result;
}

namespace {

// The function behind torch.autograd.Function.apply (a classmethod).
PyObject* autograd_function_apply() {
  static PyObject* apply = [] {
    PyObject* function_class = base::import_attr("torch.autograd.function", "Function");
    PyRef bound = function_class ? PyRef::steal(PyObject_GetAttrString(function_class, "apply")) : PyRef();
    PyObject* func = bound ? PyObject_GetAttrString(bound.get(), "__func__") : nullptr;
    if (!func) PyErr_Clear();
    return func;  // kept for the process
  }();
  return apply;
}

}  // namespace

ValuePtr FrameTracer::call_value(const ValuePtr& callable, std::vector<ValuePtr> args,
                                 KwArgs kwargs) {
  switch (callable->kind) {
    case ValueKind::TorchCallable: {
      stdlib::CallableInfo info = stdlib::classify_callable(callable->obj.get());
      if (info.kind == stdlib::CallableClass::Refused) abort_trace(BreakCode::SideEffect, info.reason);
      if (info.kind == stdlib::CallableClass::CompilerQuery) {
        if (!args.empty() || !kwargs.empty()) abort_trace(BreakCode::UnsupportedCall, info.name + "() with arguments");
        return state_.wrap_unguarded(Py_True);  // Note [Compiler queries] in stdlib/torch_callables.cpp
      }
      if (info.kind == stdlib::CallableClass::UsageLog) {
        if (args.size() != 1 || !kwargs.empty() || !args[0]->is(ValueKind::Constant) ||
            !PyUnicode_Check(args[0]->obj.get())) {
          abort_trace(BreakCode::UnsupportedCall, info.name + "() of anything but one constant string");
        }
        base::PyRef logged = base::PyRef::steal(PyObject_CallOneArg(callable->obj.get(), args[0]->obj.get()));
        if (!logged) PyErr_Clear();  // telemetry: nothing the program sees
        return state_.wrap_unguarded(Py_None);
      }
      if (info.kind == stdlib::CallableClass::AutocastEnter) {
        if (!autocast_class()) abort_trace(BreakCode::UnsupportedCall, info.name + "() where torch has no autocast");
        return open_autocast(make_autocast_context(autocast_class(), args, kwargs));
      }
      if (info.kind == stdlib::CallableClass::AutocastLeave) {
        if (args.size() != 1 || !kwargs.empty() || !args[0]->is(ValueKind::AutocastExit)) {
          abort_trace(BreakCode::UnsupportedCall, info.name + "() of anything but the block _enter_autocast opened");
        }
        return exit_autocast(args[0]);
      }
      if (info.kind == stdlib::CallableClass::TorchFunctionQuery && kwargs.empty() &&
          no_torch_function_overrides(args)) {
        return state_.wrap_unguarded(Py_False);
      }
      if (info.kind == stdlib::CallableClass::Checkpoint) {
        return call_checkpoint(std::move(args), std::move(kwargs));
      }
      if (info.kind == stdlib::CallableClass::GradModeQuery) {
        // The mode at this point of the trace: the mode on entry (guarded for
        // every graph) changed by the traced grad-mode blocks so far.
        if (!args.empty() || !kwargs.empty()) abort_trace(BreakCode::UnsupportedCall, info.name + "() with arguments");
        return state_.wrap_unguarded(runtime::grad_mode_enabled() ? Py_True : Py_False);
      }
      return state_.call_torch(info.name, callable->obj.get(), args, kwargs,
                               info.kind == stdlib::CallableClass::Factory);
    }
    case ValueKind::TensorMethod:
      return call_tensor_method(callable, std::move(args), std::move(kwargs));
    case ValueKind::ContainerMethod:
      if (is_environ(callable->self)) return read_environ(callable->name, args, kwargs);
      if (callable->self->contents) {
        // A dict method of a Record (Note [User objects]) or of a dict-backed
        // Object (Note [Dict-backed objects]) acts on its items.
        auto on_contents = std::make_shared<Value>(*callable);
        on_contents->self = callable->self->contents;
        return call_value(on_contents, std::move(args), std::move(kwargs));
      }
      if (callable->self->is(ValueKind::Constant)) return call_constant_method(callable, args, kwargs);
      if (callable->self->is(ValueKind::Set)) return call_set_method(callable, args, kwargs);
      if (callable->self->tuple_type && (callable->name == "_replace" || callable->name == "_asdict")) {
        return call_namedtuple_method(callable, std::move(args), std::move(kwargs));
      }
      if (callable->self->is(ValueKind::Dict) && callable->name.rfind("__", 0) == 0) {
        return call_dict_dunder(callable, std::move(args), kwargs);
      }
      return call_modelled(callable, std::move(args), std::move(kwargs));
    case ValueKind::StdObject:
      return call_modelled(callable, std::move(args), std::move(kwargs));
    case ValueKind::Function: {
      if (is_getenv(callable->obj.get())) return read_environ("get", args, kwargs);
      static PyObject* deepcopy = base::import_attr("copy", "deepcopy");
      if (callable->obj.get() == deepcopy) {
        const bool no_memo = kwargs.empty() && (args.size() == 1 || (args.size() == 2 && args[1]->is(ValueKind::Constant) &&
                                                                    args[1]->obj.get() == Py_None));
        if (!no_memo) abort_trace(BreakCode::UnsupportedCall, "copy.deepcopy() with a memo");
        return deep_copy(args[0]);
      }
      if (stdlib::find_model(*callable)) return call_modelled(callable, std::move(args), std::move(kwargs));
      return inline_function(callable->obj.get(), callable->source, std::move(args), std::move(kwargs));
    }
    case ValueKind::Method: {
      // super().__call__(...) in a module class that overrides __call__:
      // nn.Module's own call of the receiver.
      const base::TorchApi* api = base::torch_api();
      PyRef call_name = PyRef::steal(PyUnicode_InternFromString("__call__"));
      if (callable->self && callable->self->is(ValueKind::Module) &&
          callable->obj.get() == _PyType_Lookup(reinterpret_cast<PyTypeObject*>(api->module_type), call_name.get())) {
        return call_module(callable->self, std::move(args), std::move(kwargs), /*base_call=*/true);
      }
      if (callable->obj.get() == autograd_function_apply() && callable->self && callable->self->obj &&
          PyType_Check(callable->self->obj.get())) {
        // Note [Custom autograd Functions]
        PyObject* cls = callable->self->obj.get();
        if (ValuePtr inlined = inline_function_forward(cls, args, kwargs)) return inlined;
        if (ValuePtr traced = trace_function_vjp(cls, args, kwargs)) return traced;
        PyRef apply = PyRef::steal(PyObject_GetAttrString(cls, "apply"));
        if (!apply) abort_trace(BreakCode::PythonException, take_python_error());
        return state_.call_torch(std::string(reinterpret_cast<PyTypeObject*>(cls)->tp_name) + ".apply", apply.get(),
                                 args, kwargs, false);
      }
      // A bound method re-fetched by its source reads its function's
      // __closure__ and __defaults__ too (bound methods forward them).
      args.insert(args.begin(), callable->self);
      return inline_function(callable->obj.get(), callable->source >= 0 ? callable->source : callable->func_source,
                             std::move(args), std::move(kwargs));
    }
    case ValueKind::Module:
      return call_module(callable, std::move(args), std::move(kwargs));
    case ValueKind::LocalFunction:
      return inline_local_function(callable, std::move(args), std::move(kwargs));
    case ValueKind::Builtin:
    case ValueKind::Object: {
      if (callable->deferred_call) return defer_logging_call(callable, args, kwargs);
      const base::TorchApi* api = base::torch_api();
      PyObject* obj = callable->obj.get();
      if (PyCFunction_Check(obj) && args.empty()) {
        // These read the calling frame: run at a graph break, they would see
        // the transformed code's or a resume function's frame instead.
        const std::string name = name_of(obj);
        if (name == "locals" || name == "vars" || name == "dir" || name == "_getframe") {
          abort_trace(BreakCode::UnsupportedFrame, name + "() inspects the calling frame");
        }
      }
      if (PyCFunction_Check(obj) && (name_of(obj) == "eval" || name_of(obj) == "exec")) {
        abort_trace(BreakCode::UnsupportedFrame, name_of(obj) + "() runs code in the calling frame");
      }
      if (ValuePtr done = call_object_slot(callable, args, kwargs)) return done;
      static PyObject* setattr_builtin = base::import_attr("builtins", "setattr");
      static PyObject* delattr_builtin = base::import_attr("builtins", "delattr");
      if (obj == setattr_builtin || obj == delattr_builtin) {
        return call_attribute_builtin(obj == setattr_builtin, args, kwargs);
      }
      if (is_object_getattribute(obj) && kwargs.empty()) {
        // object.__getattribute__(x, name), or bound by super() to x.
        if (callable->self && args.size() == 1) return generic_getattr(callable->self, args[0]);
        if (!callable->self && args.size() == 2) return generic_getattr(args[0], args[1]);
      }
      if (PyExceptionClass_Check(obj) && exception_class_is_builtin_made(obj)) {
        // ValueError("...") made to be raised (Note [Exceptions in inlined frames]).
        if (!kwargs.empty()) abort_trace(BreakCode::UnsupportedCall, "an exception made with keywords");
        return call_on_constants(obj, args, kwargs, "an exception made from");
      }
      // torch.device(...) of constants is a constant (Dynamo's generated
      // code spells every device so).
      if (obj == api->device_type) return call_on_constants(obj, args, kwargs, "torch.device() of");
      if (is_namedtuple_type(obj)) return make_namedtuple(obj, std::move(args), kwargs);
      if (is_autocast_class(obj)) return make_autocast_context(obj, args, kwargs);
      if (obj == reinterpret_cast<PyObject*>(&PySuper_Type)) {
        if (!kwargs.empty()) abort_trace(BreakCode::UnsupportedCall, "super() with keywords");
        return make_super(args);
      }
      if (obj == api->no_grad || obj == api->enable_grad || obj == api->set_grad_enabled) {
        if (!kwargs.empty()) abort_trace(BreakCode::UnsupportedCall, "grad-mode context with keywords");
        return make_grad_mode_context(obj, args);
      }
      if (!stdlib::find_model(*callable) && is_record_class(obj)) {
        return make_record(callable, std::move(args), std::move(kwargs));
      }
      if (is_torch_module_class(obj)) return make_torch_module(obj, args, kwargs);
      if (callable->is(ValueKind::Object) && !PyType_Check(obj) && !stdlib::find_model(*callable)) {
        // An instance whose class defines __call__ in Python (diffusers'
        // attention processors): called as CPython would, obj.__call__(...).
        PyRef call_name = PyRef::steal(PyUnicode_InternFromString("__call__"));
        PyObject* call = _PyType_Lookup(Py_TYPE(obj), call_name.get());
        if (call && PyFunction_Check(call)) {
          args.insert(args.begin(), callable);
          return inline_function(call, class_entry_source(Py_TYPE(obj), call_name.get(), call), std::move(args),
                                 std::move(kwargs));
        }
      }
      return call_modelled(callable, std::move(args), std::move(kwargs));
    }
    case ValueKind::Record: {
      // A Python __call__ of the object's class (Note [User objects]).
      PyRef call_name = PyRef::steal(PyUnicode_InternFromString("__call__"));
      PyObject* call = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(callable->tuple_type.get()), call_name.get());
      if (!call || !PyFunction_Check(call)) {
        abort_trace(BreakCode::UnsupportedCall, "call of " + describe_value(*callable));
      }
      args.insert(args.begin(), callable);
      return inline_function(call, -1, std::move(args), std::move(kwargs));
    }
    case ValueKind::AutocastExit:
      return exit_autocast(callable);
    case ValueKind::UserContextExit: {
      --state_.open_with_blocks;
      ValuePtr result = call_python_special(callable->self, "__exit__", std::move(args));
      if (!result) abort_trace(BreakCode::UnsupportedCall, "__exit__ of " + describe_value(*callable->self));
      return result;
    }
    case ValueKind::GradModeExit: {
      // __exit__(None, None, None) at the end of the with block.
      state_.set_grad_mode(callable->grad_enabled);
      --state_.open_with_blocks;
      return state_.wrap_unguarded(Py_None);
    }
    default:
      abort_trace(BreakCode::UnsupportedCall, "call of " + describe_value(*callable));
  }
}

// Note [Torch modules made in forward]
// Library forwards make modules per call: T5 and BART build
// `CrossEntropyLoss(ignore_index=-100)` for their loss, transformers'
// Mamba `ACT2FN["silu"]`, a SiLUActivation, per layer and call. Their
// constructors run only torch's code (the class and its bases outside
// torch.nn define no __init__ or __new__ of their own), which records the
// arguments; so with constant arguments the tracer makes the module while
// tracing and calls it like any module without a source (what it reads of
// it are the constants it was made with, and its class's attributes). A
// module that then holds a tensor (a class weight) or a submodule is not
// made so, nor one whose construction runs other Python code: the trace
// breaks at the call.
bool is_torch_module_class(PyObject* obj) {
  const base::TorchApi* api = base::torch_api();
  if (!PyType_Check(obj) || !api || PyObject_IsSubclass(obj, api->module_type) != 1) {
    PyErr_Clear();
    return false;
  }
  // A metaclass __call__ decides what making an instance runs.
  if (Py_TYPE(obj)->tp_call != PyType_Type.tp_call) return false;
  PyObject* mro = reinterpret_cast<PyTypeObject*>(obj)->tp_mro;
  PyRef init_name = PyRef::steal(PyUnicode_InternFromString("__init__"));
  PyRef new_name = PyRef::steal(PyUnicode_InternFromString("__new__"));
  for (Py_ssize_t k = 0; mro && k < PyTuple_GET_SIZE(mro); ++k) {
    auto* klass = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, k));
    if (klass == &PyBaseObject_Type) continue;
    PyRef module = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(klass), "__module__"));
    const char* text = module && PyUnicode_Check(module.get()) ? PyUnicode_AsUTF8(module.get()) : nullptr;
    PyErr_Clear();
    const bool torch_nn = text && std::string(text).rfind("torch.nn.", 0) == 0;
    if (torch_nn) continue;
    if (base::own_class_attr(klass, init_name.get()) || base::own_class_attr(klass, new_name.get())) return false;
  }
  return true;
}

ValuePtr FrameTracer::make_torch_module(PyObject* type, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  const std::string name = reinterpret_cast<PyTypeObject*>(type)->tp_name;
  ValuePtr module = call_on_constants(type, args, kwargs, name + "() made in the trace with");
  for (const char* table : {"_parameters", "_buffers", "_modules"}) {
    PyRef dict = PyRef::steal(PyObject_GetAttrString(module->obj.get(), table));
    if (!dict || !PyDict_Check(dict.get())) abort_trace(BreakCode::UnsupportedValue, name + " without " + table);
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    while (PyDict_Next(dict.get(), &pos, &key, &item)) {
      if (item != Py_None) {
        abort_trace(BreakCode::UnsupportedValue, name + "() made in the trace holds " + table + " entry " +
                                                     py_repr(key) + " (Note [Torch modules made in forward])");
      }
    }
  }
  KILN_LOG(graph, "made " << name << " while tracing (Note [Torch modules made in forward])");
  return module;
}

ValuePtr FrameTracer::call_on_constants(PyObject* callable, const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                                        const std::string& what) {
  PyRef call_args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef arg = constant_to_python(args[i]);
    if (!arg) abort_trace(BreakCode::UnsupportedCall, what + " " + describe_value(*args[i]));
    PyTuple_SET_ITEM(call_args.get(), static_cast<Py_ssize_t>(i), arg.release());
  }
  PyRef call_kwargs = PyRef::steal(PyDict_New());
  for (const auto& [name, value] : kwargs) {
    PyRef arg = constant_to_python(value);
    if (!arg) abort_trace(BreakCode::UnsupportedCall, what + " " + describe_value(*value));
    PyDict_SetItemString(call_kwargs.get(), name.c_str(), arg.get());
  }
  PyRef made = PyRef::steal(PyObject_Call(callable, call_args.get(), call_kwargs.get()));
  if (!made) raise_python_error();
  return state_.wrap_unguarded(made.get());
}

ValuePtr FrameTracer::make_grad_mode_context(PyObject* factory, const std::vector<ValuePtr>& args) {
  const base::TorchApi* api = base::torch_api();
  auto context = std::make_shared<Value>();
  context->kind = ValueKind::GradModeContext;
  if (factory == api->set_grad_enabled) {
    if (args.size() != 1 || !args[0]->is(ValueKind::Constant) || !PyBool_Check(args[0]->obj.get())) {
      abort_trace(BreakCode::UnsupportedCall, "torch.set_grad_enabled() needs a constant bool");
    }
    // set_grad_enabled switches the mode when called, not when entered.
    context->grad_enabled = args[0]->obj.get() == Py_True;
    context->already_set = true;
    context->restore_to = runtime::grad_mode_enabled();
    state_.set_grad_mode(context->grad_enabled);
    return context;
  }
  if (!args.empty()) abort_trace(BreakCode::UnsupportedCall, "grad-mode context with arguments");
  context->grad_enabled = factory == api->enable_grad;
  return context;
}

void FrameTracer::before_with() {
  ValuePtr context = pop();
  if (context->is(ValueKind::AutocastContext)) return enter_autocast(context);
  if (context->is(ValueKind::Record) || context->is(ValueKind::Object)) return enter_user_context(context);
  if (!context->is(ValueKind::GradModeContext)) {
    abort_trace(BreakCode::UnsupportedOpcode, "with-block over " + describe_value(*context));
  }
  auto exit = std::make_shared<Value>();
  exit->kind = ValueKind::GradModeExit;
  if (context->already_set) {
    exit->grad_enabled = context->restore_to;
  } else {
    exit->grad_enabled = runtime::grad_mode_enabled();
    state_.set_grad_mode(context->grad_enabled);
  }
  ++state_.open_with_blocks;
  push(exit);
  push(state_.wrap_unguarded(Py_None));
}

// Note [Python context managers]
// A context whose class defines __enter__ and __exit__ in Python
// (contextlib.nullcontext, a library's own timer or flag) is traced as
// CPython runs it: __exit__ is pushed first, then __enter__ is inlined and
// its result pushed; the call of the exit value at the block's end inlines
// __exit__. Both run as ordinary traced code, so what they change is
// recorded like any other store. No graph break is possible inside such a
// block: the resumed code could not re-enter a context it never entered.
void FrameTracer::enter_user_context(const ValuePtr& context) {
  PyTypeObject* type = context->is(ValueKind::Record) ? reinterpret_cast<PyTypeObject*>(context->tuple_type.get())
                                                      : Py_TYPE(context->obj.get());
  for (const char* name : {"__enter__", "__exit__"}) {
    PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
    PyObject* method = _PyType_Lookup(type, key.get());
    if (!method || !PyFunction_Check(method)) {
      abort_trace(BreakCode::UnsupportedOpcode, "with-block over " + describe_value(*context) + ": " + name +
                                                    " is not a Python function");
    }
  }
  auto exit = std::make_shared<Value>();
  exit->kind = ValueKind::UserContextExit;
  exit->self = context;
  push(exit);
  ++state_.open_with_blocks;
  push(call_python_special(context, "__enter__", {}));
}

ValuePtr FrameTracer::call_tensor_method(const ValuePtr& method, std::vector<ValuePtr> args,
                                         KwArgs kwargs) {
  const base::TorchApi* api = base::torch_api();
  const std::string& name = method->name;
  switch (stdlib::classify_tensor_method(name)) {
    case stdlib::TensorMethodClass::DataDependent:
      abort_trace(BreakCode::DataDependent, "Tensor." + name + "() reads tensor data");
    case stdlib::TensorMethodClass::Refused:
      if (name == "requires_grad_" && requires_grad_unchanged(method->self, args, kwargs)) return method->self;
      // A tensor the trace made becomes a leaf: a graph op (Note [Grad
      // leaves made in a graph] in graph/grad_leaves.cpp).
      if (name == "requires_grad_" && method->self->source < 0 && requires_grad_set(args, kwargs)) break;
      abort_trace(BreakCode::SideEffect, "Tensor." + name + "() cannot be traced");
    case stdlib::TensorMethodClass::ShapeQuery: {
      // Meta kernels do not always lay results out as CPU/CUDA kernels do:
      // inputs (whose strides are guarded) and values made by ops whose
      // layouts meta computes as the device does answer layout questions
      // (Note [Layouts the trace can answer]).
      std::string unknown;
      if ((name == "stride" || name == "is_contiguous") && method->self->source < 0 &&
          !layout_is_known(state_.graph(), method->self->node, &unknown)) {
        abort_trace(BreakCode::ShapeInference, "Tensor." + name + "() of an intermediate result made through " +
                                                   (unknown.empty() ? std::string("an op") : unknown) +
                                                   ": its layout on the device is not known while tracing");
      }
      if (!all_constant(args) || !kwargs.empty()) {
        abort_trace(BreakCode::UnsupportedCall, "Tensor." + name + " with non-constant arguments");
      }
      return state_.query_fake(method->self, name, args, false);
    }
    case stdlib::TensorMethodClass::GraphOp:
      break;
  }
  PyRef target = PyRef::steal(PyObject_GetAttrString(api->tensor_type, name.c_str()));
  if (!target) {
    abort_trace(BreakCode::UnsupportedAttribute, "torch.Tensor has no method " + name + ": " + take_python_error());
  }
  args.insert(args.begin(), method->self);
  return state_.call_torch("Tensor." + name, target.get(), args, kwargs, false);
}

ValuePtr FrameTracer::call_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs, bool base_call) {
  const base::TorchApi* api = base::torch_api();
  PyObject* obj = module->obj.get();
  PyTypeObject* type = Py_TYPE(obj);
  PyRef call_name = PyRef::steal(PyUnicode_InternFromString("__call__"));
  // Compared with Module's __call__ as it is now, not as it was at startup:
  // `kiln --compile=modules` replaces it with an equivalent entry point.
  PyObject* own_call = _PyType_Lookup(type, call_name.get());
  if (!base_call && own_call != _PyType_Lookup(reinterpret_cast<PyTypeObject*>(api->module_type), call_name.get())) {
    // A layer class's own __call__ (transformers' gradient-checkpointing
    // layers in some versions): inlined; its super().__call__ comes back
    // here as the base call.
    if (!own_call || !PyFunction_Check(own_call)) {
      abort_trace(BreakCode::UnsupportedCall, std::string(type->tp_name) + " overrides __call__ in C");
    }
    args.insert(args.begin(), module);
    return inline_function(own_call, class_entry_source(type, call_name.get(), own_call), std::move(args),
                           std::move(kwargs));
  }
  // Note [Inlined module hooks]
  // Forward pre-hooks and forward hooks run around forward as
  // Module._call_impl runs them: each pre-hook gets (module, args) and a
  // result other than None replaces args (a non-tuple becomes a 1-tuple);
  // each forward hook gets (module, args, output) and a result other than
  // None replaces the output. They are traced like any called Python code
  // (a hook the trace cannot follow breaks the graph there). The hook
  // dicts' keys are guarded, so adding or removing a hook recompiles, and
  // each hook's identity is guarded where it is called. Backward hooks and
  // hooks registered with_kwargs still refuse; a module without hooks gets
  // one guard that it has none.
  bool hooked = false;
  for (const char* hooks : {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                            "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs"}) {
    PyRef dict = PyRef::steal(PyObject_GetAttrString(obj, hooks));
    if (!dict) {
      PyErr_Clear();
      continue;
    }
    if (!PyDict_Check(dict.get()) || PyDict_GET_SIZE(dict.get()) == 0) continue;
    const bool forward = std::string_view(hooks) == "_forward_hooks" || std::string_view(hooks) == "_forward_pre_hooks";
    if (!forward || module->source < 0) {
      abort_trace(BreakCode::UnsupportedCall, std::string(type->tp_name) + " has " + hooks);
    }
    hooked = true;
  }
  if (!hooked && module->source >= 0) state_.guards().add_no_module_hooks(module->source);
  for (const char* global_hooks : {"_global_forward_hooks", "_global_forward_pre_hooks",
                                   "_global_backward_hooks"}) {
    PyRef dict = PyRef::steal(PyObject_GetAttrString(api->global_hooks_module, global_hooks));
    if (!dict) {
      PyErr_Clear();
      continue;
    }
    if (PyDict_Check(dict.get()) && PyDict_GET_SIZE(dict.get()) > 0) {
      abort_trace(BreakCode::UnsupportedCall, std::string("global module hooks (") + global_hooks + ") are set");
    }
  }
  if (hooked) return call_hooked_module(module, std::move(args), std::move(kwargs));
  return call_module_forward(module, std::move(args), std::move(kwargs));
}

ValuePtr FrameTracer::call_module_forward(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs) {
  PyTypeObject* type = Py_TYPE(module->obj.get());
  PyRef forward_name = PyRef::steal(PyUnicode_InternFromString("forward"));
  PyObject* forward = _PyType_Lookup(type, forward_name.get());
  if (!forward || !PyFunction_Check(forward)) {
    abort_trace(BreakCode::UnsupportedCall, std::string(type->tp_name) + ".forward is not a Python function");
  }
  args.insert(args.begin(), module);
  // Its class dict's entry is where a wrapped forward's closure is re-read.
  return inline_function(forward, class_entry_source(type, forward_name.get(), forward), std::move(args),
                         std::move(kwargs));
}

ValuePtr FrameTracer::call_hooked_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs) {
  // Every hook dict read through the module's source, so its keys are
  // guarded (the refused ones empty, the forward ones as they are now).
  auto hook_dict = [&](const char* name) {
    PyRef dict = PyRef::steal(PyObject_GetAttrString(module->obj.get(), name));
    if (!dict) {
      PyErr_Clear();
      return ValuePtr();
    }
    PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
    ValuePtr value = state_.wrap(dict.get(), state_.sources().attr(module->source, key.get()));
    if (!value->is(ValueKind::Dict)) {
      abort_trace(BreakCode::UnsupportedCall, std::string(Py_TYPE(module->obj.get())->tp_name) + "." + name +
                                                  " is not a dict kiln reads");
    }
    return value;
  };
  for (const char* refused : {"_backward_hooks", "_backward_pre_hooks", "_forward_hooks_with_kwargs",
                              "_forward_pre_hooks_with_kwargs"}) {
    hook_dict(refused);
  }
  const ValuePtr pre_hooks = hook_dict("_forward_pre_hooks");
  const ValuePtr hooks = hook_dict("_forward_hooks");
  auto as_tuple = [&](std::vector<ValuePtr> items) { return make_sequence(ValueKind::Tuple, std::move(items)); };
  auto is_none = [](const ValuePtr& value) {
    return value->is(ValueKind::Constant) && value->obj.get() == Py_None;
  };
  if (pre_hooks) {
    for (const ValuePtr& hook : pre_hooks->items) {
      ValuePtr result = call_value(hook, {module, as_tuple(args)}, {});
      if (is_none(result)) continue;
      if (result->is(ValueKind::Tuple)) {
        args = result->items;
      } else {
        args = {result};
      }
    }
  }
  const std::vector<ValuePtr> hook_args = args;
  ValuePtr output = call_module_forward(module, std::move(args), std::move(kwargs));
  if (hooks) {
    for (const ValuePtr& hook : hooks->items) {
      ValuePtr result = call_value(hook, {module, as_tuple(hook_args), output}, {});
      if (!is_none(result)) output = result;
    }
  }
  return output;
}

ValuePtr FrameTracer::inline_function(PyObject* func, int func_source, std::vector<ValuePtr> args,
                                      KwArgs kwargs) {
  // torch.compiler.disable and torch._dynamo.disable mark the function they
  // return; library code uses them to keep a function out of every
  // compiler's graphs, so the call breaks the graph and runs in CPython, and
  // kiln's frame hook leaves the wrapped function's frames alone
  // (tracer/disabled_code.h).
  PyRef disabled = PyRef::steal(PyObject_GetAttrString(func, "_torchdynamo_disable"));
  if (!disabled) PyErr_Clear();
  if (disabled && PyObject_IsTrue(disabled.get()) == 1) {
    mark_disabled_target(func);  // its frames run as CPython does, whoever calls it
    abort_trace(BreakCode::UnsupportedCall,
                std::string(PyUnicode_AsUTF8(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(func))->co_qualname)) +
                    " is marked torch.compiler.disable: it runs eagerly, outside the graph");
  }
  Callee callee{.code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(func)),
                .globals = PyFunction_GET_GLOBALS(func),
                .func = func,
                .func_source = func_source,
                .defaults = PyFunction_GET_DEFAULTS(func),
                .kwdefaults = PyFunction_GET_KW_DEFAULTS(func)};
  return inline_callee(callee, std::move(args), std::move(kwargs));
}

ValuePtr FrameTracer::inline_local_function(const ValuePtr& func, std::vector<ValuePtr> args,
                                            KwArgs kwargs) {
  Callee callee{.code = reinterpret_cast<PyCodeObject*>(func->obj.get()),
                .globals = globals_,
                .func = nullptr,
                .func_source = -1,
                .defaults = nullptr,
                .kwdefaults = nullptr,
                .local_defaults = func->defaults,
                .local_kwdefaults = func->kwdefaults,
                .closure = func->items};
  return inline_callee(callee, std::move(args), std::move(kwargs));
}

ValuePtr FrameTracer::make_function(const Instruction& ins) {
  ValuePtr code = pop();
  if (!code->is(ValueKind::Constant) || !PyCode_Check(code->obj.get())) {
    abort_trace(BreakCode::UnsupportedValue, "MAKE_FUNCTION without a code object");
  }
  auto func = make_object(ValueKind::LocalFunction, code->obj);
  func->globals = PyRef::borrow(globals_);
  if (ins.arg & 0x08) {
    ValuePtr closure = pop();
    func->items = closure->items;
  }
  if (ins.arg & 0x04) pop();  // annotations do not change what the function computes
  if (ins.arg & 0x02) func->kwdefaults = pop();
  if (ins.arg & 0x01) func->defaults = pop();
  return func;
}

ValuePtr FrameTracer::inline_callee(const Callee& target, std::vector<ValuePtr> args, KwArgs kwargs) {
  if (depth_ + 1 > kMaxInlineDepth) {
    abort_trace(BreakCode::InlineDepth, "inlining deeper than " + std::to_string(kMaxInlineDepth) + " calls");
  }
  PyCodeObject* code = target.code;
  const std::string qualname = PyUnicode_AsUTF8(code->co_qualname);
  // A generator expression runs to completion here and becomes an iterator
  // over what it yielded: the values are the same as lazy evaluation gives
  // when the consumer takes them all, which sum(), list(), for, ... do.
  // Other generators run a yield at a time (Note [Generators]); coroutines
  // are not traced.
  const bool genexpr = (code->co_flags & CO_GENERATOR) &&
                       PyUnicode_CompareWithASCIIString(code->co_name, "<genexpr>") == 0;
  const bool generator = (code->co_flags & CO_GENERATOR) && !genexpr;
  if (code->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) {
    abort_trace(BreakCode::UnsupportedCall, "call of coroutine function " + qualname);
  }
  const int argcount = code->co_argcount;
  const int kwonly = code->co_kwonlyargcount;
  const int posonly = code->co_posonlyargcount;
  const bool has_varargs = code->co_flags & CO_VARARGS;
  const bool has_varkw = code->co_flags & CO_VARKEYWORDS;
  std::vector<ValuePtr> locals(code->co_nlocalsplus);
  auto param_name = [code](int i) {
    return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i)));
  };
  auto fail = [&qualname](const std::string& why) {
    abort_trace(BreakCode::PythonException, "TypeError: " + qualname + "() " + why);
  };
  // Positional arguments.
  std::vector<ValuePtr> extra;
  for (size_t i = 0; i < args.size(); ++i) {
    if (static_cast<int>(i) < argcount) {
      locals[i] = args[i];
    } else if (has_varargs) {
      extra.push_back(args[i]);
    } else {
      fail("takes " + std::to_string(argcount) + " positional arguments but " +
           std::to_string(args.size()) + " were given");
    }
  }
  int slot = argcount + kwonly;
  if (has_varargs) locals[slot++] = make_sequence(ValueKind::Tuple, std::move(extra));
  ValuePtr varkw = has_varkw ? make_sequence(ValueKind::Dict, {}) : nullptr;
  if (has_varkw) locals[slot] = varkw;
  // Keyword arguments.
  for (auto& [key, value] : kwargs) {
    int found = -1;
    for (int i = posonly; i < argcount + kwonly; ++i) {
      if (param_name(i) == key) found = i;
    }
    if (found >= 0) {
      if (locals[found]) fail("got multiple values for argument '" + key + "'");
      locals[found] = value;
    } else if (varkw) {
      varkw->keys.push_back(PyRef::steal(PyUnicode_FromString(key.c_str())));
      varkw->items.push_back(value);
    } else {
      fail("got an unexpected keyword argument '" + key + "'");
    }
  }
  // Defaults: a real function's are objects (guarded through the function's
  // source when it has one); a LocalFunction's are trace values.
  const int n_defaults = target.local_defaults ? static_cast<int>(target.local_defaults->items.size())
                         : target.defaults     ? static_cast<int>(PyTuple_GET_SIZE(target.defaults))
                                               : 0;
  PyRef defaults_name = PyRef::steal(PyUnicode_InternFromString("__defaults__"));
  for (int i = 0; i < argcount; ++i) {
    if (locals[i]) continue;
    const int d = i - (argcount - n_defaults);
    if (d < 0) fail("missing required argument '" + param_name(i) + "'");
    if (target.local_defaults) {
      locals[i] = target.local_defaults->items[d];
      continue;
    }
    PyObject* value = PyTuple_GET_ITEM(target.defaults, d);
    int source = target.func_source >= 0
                     ? state_.sources().index(state_.sources().attr(target.func_source, defaults_name.get()), d)
                     : -1;
    locals[i] = state_.wrap(value, source);
  }
  for (int i = argcount; i < argcount + kwonly; ++i) {
    if (locals[i]) continue;
    const std::string name = param_name(i);
    ValuePtr found;
    if (target.local_kwdefaults) {
      for (size_t k = 0; k < target.local_kwdefaults->keys.size(); ++k) {
        if (name == PyUnicode_AsUTF8(target.local_kwdefaults->keys[k].get())) {
          found = target.local_kwdefaults->items[k];
        }
      }
    } else if (target.kwdefaults) {
      if (PyObject* value = PyDict_GetItemString(target.kwdefaults, name.c_str())) {
        found = state_.wrap_unguarded(value);
      }
    }
    if (!found) fail("missing required keyword-only argument '" + name + "'");
    locals[i] = found;
  }
  if (generator) {
    auto frame = std::make_shared<FrameTracer>(state_, code, target.globals, target.func, target.func_source,
                                               depth_ + 1);
    frame->set_locals(std::move(locals));
    frame->set_closure(target.closure);
    frame->make_generator();
    ValuePtr iterator = make_sequence(ValueKind::Iterator, {});
    iterator->generator = std::move(frame);
    return iterator;
  }
  FrameTracer callee(state_, code, target.globals, target.func, target.func_source, depth_ + 1);
  callee.set_locals(std::move(locals));
  callee.set_closure(target.closure);
  if (genexpr) {
    std::vector<ValuePtr> yields;
    callee.collect_yields(&yields);
    callee.run();
    return make_sequence(ValueKind::Iterator, std::move(yields));
  }
  return callee.run();
}

// Note [Generators]
// A generator function an inlined frame calls (collections.abc.Sequence's
// __iter__, a library's own) becomes an Iterator value holding the
// generator's frame, not yet run. A for loop in an inlined frame and next()
// resume that frame to its next YIELD_VALUE for each item, so the
// generator's work interleaves with the consumer's as in eager Python (a
// loop that stops early never runs the rest; a generator that ends by
// catching IndexError, as Sequence's does, ends where eager's does). Every
// other consumer (list(), zip(), unpacking, a loop in the top frame, where a
// graph break could not hand a suspended frame to CPython) runs it to its
// end first, at the point it consumes it, and only when that is invisible:
// the generator changed no state and raised nothing on the way (drain()).
// Generator expressions always run to their end at once.
ValuePtr FrameTracer::resume() {
  if (returned_) return nullptr;
  suspended_ = false;
  yielded_.reset();
  try {
    run();
  } catch (PythonRaise& raised) {
    returned_ = true;
    if (PyErr_GivenExceptionMatches(reinterpret_cast<PyObject*>(Py_TYPE(raised.exception.get())),
                                    PyExc_StopIteration)) {
      // PEP 479: CPython turns it into a RuntimeError; a consumer must not
      // take it for the generator's end.
      abort_trace(BreakCode::PythonException, "a generator raised StopIteration");
    }
    throw;
  } catch (...) {
    returned_ = true;  // a generator that raised is finished
    throw;
  }
  return suspended_ ? yielded_ : nullptr;
}

ValuePtr FrameTracer::next_item(const ValuePtr& iterator) {
  if (iterator->position < iterator->items.size()) return iterator->items[iterator->position++];
  if (!iterator->generator) return nullptr;
  ValuePtr item = iterator->generator->resume();
  if (!item) {
    iterator->generator.reset();
    return nullptr;
  }
  iterator->items.push_back(item);
  return iterator->items[iterator->position++];
}

void FrameTracer::drain(const ValuePtr& iterator) {
  if (!iterator->generator) return;
  // Run ahead of its consumer, a generator must be one whose steps commute
  // with the consumer's: no state changed (stores, container writes,
  // in-place tensor ops), and no exception the consumer would have caught
  // at a different point.
  const uint64_t mutations = state_.mutations();
  const uint64_t born = next_value_birth();  // what the generator makes itself it may change (Note [Changes of new values])
  const size_t stores = state_.stores.size();
  const size_t nodes = state_.graph().nodes().size();
  try {
    while (iterator->generator) {
      ValuePtr item = iterator->generator->resume();
      if (!item) {
        iterator->generator.reset();
        break;
      }
      iterator->items.push_back(item);
    }
  } catch (PythonRaise& raised) {
    abort_trace(BreakCode::UnsupportedCall,
                std::string(raised.what()) + " (raised by a generator run ahead of its consumer)");
  }
  bool writes = state_.changed_older_than(mutations, born) || state_.stores.size() != stores;
  for (size_t n = nodes; n < state_.graph().nodes().size() && !writes; ++n) {
    const std::string& name = state_.graph().node(static_cast<int>(n)).target_name;
    writes = TraceState::is_inplace_method(name) || name.rfind("operator.i", 0) == 0 || name == "operator.setitem";
  }
  if (writes) {
    abort_trace(BreakCode::UnsupportedCall,
                "a generator that changes state, consumed other than by a for loop over its call (its steps would run "
                "ahead of the consumer's)");
  }
}

}  // namespace kiln::tracer

namespace kiln::tracer {

// Note [Deferred logging]
// A call of a logging.Logger method (logger.warning_once(...),
// logger.info(...)) writes a record and returns None; tracing into it
// would enter logging's locks and handlers (and transformers' warning_once
// is an lru_cache descriptor). Like Dynamo's reorderable logging, the call
// becomes a side effect (SideEffect::Kind::Call): made after the graph
// runs, in order with the frame's other stores, with the arguments it had
// when traced. They must be constants (a message built from a tensor's
// values would need the graph's result): other arguments, and keyword
// arguments, break the graph as before. The logger itself is guarded by
// identity, like any object the trace reads.

ValuePtr FrameTracer::logger_method(const ValuePtr& base, PyObject* name) {
  static PyObject* logger_type = base::import_attr("logging", "Logger");
  if (!logger_type || !base->obj) return nullptr;
  const int is_logger = PyObject_IsInstance(base->obj.get(), logger_type);
  if (is_logger < 0) PyErr_Clear();
  if (is_logger != 1 || PyUnicode_READ_CHAR(name, 0) == '_') return nullptr;
  PyRef bound = PyRef::steal(PyObject_GetAttr(base->obj.get(), name));
  if (!bound) {
    PyErr_Clear();
    return nullptr;
  }
  if (!PyCallable_Check(bound.get())) return nullptr;
  ValuePtr method = make_object(ValueKind::Builtin, bound);
  method->deferred_call = true;
  method->name = PyUnicode_AsUTF8(name);
  return method;
}

ValuePtr FrameTracer::defer_logging_call(const ValuePtr& callable, const std::vector<ValuePtr>& args,
                                         const KwArgs& kwargs) {
  if (!kwargs.empty()) {
    abort_trace(BreakCode::UnsupportedCall, "Logger." + callable->name + " with keyword arguments");
  }
  for (const ValuePtr& arg : args) {
    if (!arg->is(ValueKind::Constant)) {
      abort_trace(BreakCode::UnsupportedCall,
                  "Logger." + callable->name + " with a non-constant argument (" + describe_value(*arg) + ")");
    }
  }
  state_.note_mutation();
  BreakInfo::PendingStore store;
  store.effect.kind = SideEffect::Kind::Call;
  store.effect.callee = callable->obj;
  store.value = make_sequence(ValueKind::Tuple, args);
  state_.stores.push_back(std::move(store));
  return state_.wrap_unguarded(Py_None);
}

}  // namespace kiln::tracer
