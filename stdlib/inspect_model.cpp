// The inspect module: inspect.signature of a function the trace holds fixed
// (a guarded function, a module's bound method) is computed on the real
// function, as library code asks it to count or name parameters
// (transformers' apply_chunking_to_forward). Signatures and their
// Parameters are immutable, so the result is a constant.
#include "stdlib/model_registry.h"
#include "stdlib/model_support.h"

namespace kiln::stdlib {
namespace {

ValuePtr signature_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  if (!call.kwargs.empty()) context.abort(BreakCode::UnsupportedCall, "inspect.signature() with keywords");
  const ValuePtr& x = call.args[0];
  PyRef target;
  switch (x->kind) {
    case ValueKind::Function:
    case ValueKind::Builtin:
    case ValueKind::TorchCallable:
    case ValueKind::Module:
      target = x->obj;
      break;
    case ValueKind::Method:
      // The bound method's signature drops self; bind it to the real
      // receiver where there is one.
      if (x->self && x->self->obj && (x->self->is(ValueKind::Module) || x->self->is(ValueKind::Object))) {
        target = PyRef::steal(PyMethod_New(x->obj.get(), x->self->obj.get()));
      }
      break;
    default:
      break;
  }
  if (!target) context.abort(BreakCode::UnsupportedCall, "inspect.signature() of " + tracer::describe_value(*x));
  PyRef signature = PyRef::steal(PyObject_CallOneArg(call.callee->obj.get(), target.get()));
  if (!signature) context.abort_python_error("inspect.signature()");
  return context.constant(signature.get());
}

}  // namespace

void register_inspect_model(ModelRegistry& registry) { registry.add("inspect", "signature", signature_model); }

}  // namespace kiln::stdlib
