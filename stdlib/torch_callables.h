// The table of torch-level callables: which become graph nodes, which create
// tensors from nothing (factories), which kiln refuses to trace and why.
#pragma once

#include <Python.h>

#include <string>

namespace kiln::stdlib {

enum class CallableClass {
  NotTorch,   // not a torch callable: inline it or model it elsewhere
  GraphOp,    // becomes a graph node
  Factory,    // a graph node that makes tensors without tensor inputs
  Refused,    // a torch callable with effects a graph cannot hold
  CompilerQuery,  // torch.compiler.is_compiling(): True while kiln traces
  GradModeQuery,  // torch.is_grad_enabled(): the traced grad mode, guarded
  UsageLog,       // torch._C._log_api_usage_once(name): called while tracing, no graph node
  AutocastEnter,  // torch.amp._enter_autocast(*args): opens an autocast block, returns it
  AutocastLeave,  // torch.amp._exit_autocast(block): closes the block _enter_autocast opened
  TorchFunctionQuery,  // torch._C._has_torch_function*(...): Note [Torch function queries]
  Checkpoint,  // torch.utils.checkpoint.checkpoint: its function traced (Note [Traced checkpoints])
};

struct CallableInfo {
  CallableClass kind = CallableClass::NotTorch;
  std::string name;    // display name, e.g. "torch.relu", "F.gelu", "Tensor.add"
  std::string reason;  // Refused: why
};

// Classifies a callable met by the tracer.
CallableInfo classify_callable(PyObject* callable);

// Marks `callable` (kept for the process) to become one graph node wherever
// traced code calls it, as a torch op does, rather than being inlined
// (kiln.allow_in_graph; Note [Callables allowed in the graph]).
void allow_in_graph(PyObject* callable);

// How the tracer treats `tensor.<name>(...)`.
enum class TensorMethodClass {
  GraphOp,        // a graph node calling torch.Tensor.<name>
  ShapeQuery,     // depends only on metadata: evaluate on the fake (size, dim)
  DataDependent,  // reads tensor data (item, tolist)
  Refused,        // other effects (backward, hooks)
};

// Classifies a Tensor method by name.
TensorMethodClass classify_tensor_method(const std::string& name);

// How the tracer treats `tensor.<name>` (not called).
enum class TensorAttrClass {
  Metadata,  // shape, dtype, device, ndim...: a constant under the tensor guard
  GraphOp,   // a view or computed tensor (T, mT, real): getattr node
  Method,    // a bound method, classified when called
  Refused,   // grad, data, _version...: state a graph cannot track
};

// Classifies a Tensor attribute by name.
TensorAttrClass classify_tensor_attribute(const std::string& name);

// True for modules whose attributes kiln treats as fixed (torch's
// namespace, math, operator): reading them installs no guard.
bool is_fixed_module(PyObject* module);

}  // namespace kiln::stdlib
