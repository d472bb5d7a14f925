// torch.utils.checkpoint.checkpoint(fn, *args, ...) in traced code: fn is
// traced inline and its nodes marked as one checkpointed region (Note
// [Checkpointed regions] in autograd/partitioner.cpp).
#include "runtime/aten_bridge.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {
namespace {

// A keyword argument's constant value, or null when it was not passed;
// anything but a constant stops the trace.
PyObject* constant_keyword(const KwArgs& kwargs, const char* name) {
  for (const auto& [key, value] : kwargs) {
    if (key != name) continue;
    if (!value->is(ValueKind::Constant)) {
      abort_trace(BreakCode::UnsupportedCall,
                  std::string("torch.utils.checkpoint.checkpoint(") + name + "=" + describe_value(*value) +
                      "): only a constant is traced");
    }
    return value->obj.get();
  }
  return nullptr;
}

// Closes the region on every way out of the traced call, aborts included.
class CheckpointRegion {
 public:
  explicit CheckpointRegion(graph::Graph& graph) : graph_(graph), previous_(graph.begin_checkpoint()) {}
  ~CheckpointRegion() { graph_.end_checkpoint(previous_); }
  CheckpointRegion(const CheckpointRegion&) = delete;
  CheckpointRegion& operator=(const CheckpointRegion&) = delete;

 private:
  graph::Graph& graph_;
  int previous_;
};

}  // namespace

// Note [Traced checkpoints]
// Activation checkpointing (torch.utils.checkpoint, and the libraries
// built on it: transformers' gradient checkpointing passes
// partial(super().__call__, **kwargs) as fn) keeps a function's inputs for
// the backward and runs it again there instead of keeping what it made.
// As a graph op the call could not take its function (a module, a partial
// made in the trace), and a break there is impossible in a loop or a frame
// using super(): the whole model ran eagerly. So fn is traced where it is
// called, like torch.compile's checkpoint higher-order op, and its nodes
// carry the region's id; the partitioner then saves none of the values
// made inside a region but its results, recomputing the rest in the
// backward (autograd/partitioner.cpp). Values are eager's: random draws
// inside a region are saved, not drawn again, which is what
// preserve_rng_state=True gives eagerly. Traced: use_reentrant=False, and
// use_reentrant=True when an argument requires grad (its gradients are the
// same; with none, eager's result has no history, which the trace does not
// reproduce). context_fn and use_reentrant=None (eager warns) stop the
// trace at the call, which then runs eagerly where a break is possible.
ValuePtr FrameTracer::call_checkpoint(std::vector<ValuePtr> args, KwArgs kwargs) {
  const std::string what = "torch.utils.checkpoint.checkpoint";
  if (args.empty()) abort_trace(BreakCode::UnsupportedCall, what + "() without a function");
  PyObject* reentrant = constant_keyword(kwargs, "use_reentrant");
  if (!reentrant || reentrant == Py_None) {
    abort_trace(BreakCode::UnsupportedCall, what + "() without use_reentrant (eager warns); pass it explicitly");
  }
  const bool use_reentrant = PyObject_IsTrue(reentrant) == 1;
  const ValuePtr fn = args.front();
  std::vector<ValuePtr> fn_args(args.begin() + 1, args.end());
  KwArgs fn_kwargs;
  for (auto& [key, value] : kwargs) {
    if (key == "use_reentrant" || key == "preserve_rng_state" || key == "determinism_check" || key == "debug" ||
        key == "early_stop") {
      constant_keyword(kwargs, key.c_str());
      continue;
    }
    if (key == "context_fn") abort_trace(BreakCode::UnsupportedCall, what + "(context_fn=...) is not traced");
    if (use_reentrant) abort_trace(BreakCode::UnsupportedCall, what + "(use_reentrant=True) with keyword " + key);
    fn_kwargs.emplace_back(key, value);
  }
  if (!runtime::grad_mode_enabled()) return call_value(fn, std::move(fn_args), std::move(fn_kwargs));
  if (use_reentrant && !any_requires_grad(fn_args)) {
    abort_trace(BreakCode::UnsupportedCall,
                what + "(use_reentrant=True) of arguments none of which requires grad: its result has no gradient");
  }
  CheckpointRegion region(state_.graph());
  return call_value(fn, std::move(fn_args), std::move(fn_kwargs));
}

}  // namespace kiln::tracer
