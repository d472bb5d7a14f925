"""The torch.autograd.Function that runs kiln's partitioned graphs: the
forward graph computes the outputs and the values the backward needs (saved
through ctx), the backward graph turns output gradients into input
gradients. Built by autograd/function_bridge.cpp; not a public API."""
import operator

import torch

from kiln import _C

# Note [Recomputed forwards]
# torch.utils.checkpoint (use_reentrant=False) saves nothing in the
# forward: its pack hook keeps a handle, and the first unpack in the
# backward runs the checkpointed function again to recompute what was
# saved, matching the tensors one by one. Its forward ran inside a
# compiled call, so kiln compiled the function's frames and their graphs
# saved what kiln's partitioner chose; the backward runs outside any
# compiled call, so the recomputation ran eagerly, saved what eager
# autograd saves, and checkpoint raised CheckpointError (a different
# count, shapes out of order). A graph whose forward ran while saved-tensor
# hooks were active keeps the compile context it ran in and unpacks its
# saved tensors in it, replay-only: frames run the graphs cached for them,
# so the recomputation saves the same tensors in the same order, and code
# without one (the unpack hook itself, a user's hook) runs as plain Python,
# never traced. Without hooks nothing is kept (a call reads one flag).
_SAVED_TENSORS = operator.attrgetter("saved_tensors")
_hooks_active = torch._C._autograd._top_saved_tensors_default_hooks


def _saved_tensors(ctx):
    """ctx.saved_tensors, unpacked in the forward's compile context when it kept one."""
    unpack = ctx.unpack_in_context
    return unpack(ctx) if unpack is not None else ctx.saved_tensors


class CompiledFunction(torch.autograd.Function):
    """apply(runner, *inputs) -> tuple of outputs.

    runner = (forward, output_has_grad, input_grad_slots, n_outputs, n_saved,
    grad_deps, make_variant, variants): forward(*inputs) returns outputs +
    saved + the results of calls with effects (kept only so that they run);
    make_variant(()) gives (backward, positions), backward(*saved, *grads of
    the outputs that carry one) returning the gradients of the inputs that
    get one, input_grad_slots[i] being input i's position among them or -1;
    grad_deps[slot] lists the output gradients (positions among those passed
    to backward) that gradient reads. When some of those gradients do not
    arrive (None), make_variant(positions) gives (backward without them,
    the positions of the gradients it returns). Each is compiled at its
    first use and cached in the dict `variants` (Note [Absent gradients] in
    autograd/absent_grads.cpp, Note [The backward compiles at its first
    call] in autograd/function_bridge.cpp).
    """

    @staticmethod
    def forward(ctx, runner, *inputs):
        forward, output_has_grad, _, n_outputs, n_saved = runner[:5]
        values = forward(*inputs)
        outputs, saved = values[:n_outputs], values[n_outputs:n_outputs + n_saved]
        ctx.runner = runner
        ctx.unpack_in_context = _C.in_graph_context(_SAVED_TENSORS) if _hooks_active(False) is not None else None
        ctx.save_for_backward(*saved)
        # Gradients that do not flow back arrive as None, so that an input
        # reached only through them gets None, as eager autograd gives it.
        ctx.set_materialize_grads(False)
        no_grad = [out for out, has in zip(outputs, output_has_grad) if not has]
        if no_grad:
            ctx.mark_non_differentiable(*no_grad)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        _, output_has_grad, input_grad_slots, _, _, grad_deps, make_variant, variants = ctx.runner
        flowing = [g for g, has in zip(grads, output_has_grad) if has]
        missing = tuple(k for k, g in enumerate(flowing) if g is None)
        variant = variants.get(missing)
        if variant is None:
            variant = variants[missing] = make_variant(missing)
        call, present = variant
        if missing:
            input_grads = [None] * len(grad_deps)
            for position, g in zip(present, call(*_saved_tensors(ctx), *flowing)):
                input_grads[position] = g
        else:
            input_grads = call(*_saved_tensors(ctx), *flowing)
        result = tuple(None if slot < 0 else input_grads[slot] for slot in input_grad_slots)
        if torch.is_grad_enabled():  # create_graph=True
            anchors = [t for t in _saved_tensors(ctx) if t.requires_grad]
            if anchors:
                result = _NoDoubleBackward.apply(len(result), *result, *anchors)
        return (None,) + tuple(result)


class _NoDoubleBackward(torch.autograd.Function):
    """Gradients made with create_graph=True pass through it: kiln's
    backward graph runs as prims and records no history, so differentiating
    them again raises a clear error (torch.compile's AOT autograd refuses
    double backward too) instead of finding gradients without a grad_fn.
    apply(n, *grads, *anchors): anchors are saved tensors that require grad,
    which give the results their grad_fn."""

    @staticmethod
    def forward(ctx, n, *tensors):
        return tuple(None if g is None else g.clone() for g in tensors[:n])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("kiln: differentiating gradients of a kiln-compiled graph again (double backward, "
                           "create_graph=True) is not supported: kiln's backward graph records no history; "
                           "run that part of the model uncompiled (torch.compiler.disable) to take "
                           "higher-order gradients")


class InlinedFunctionContext:
    """The ctx a custom autograd.Function's forward gets when kiln traces
    the forward into the graph because no gradient can flow through the
    call (Note [Custom autograd Functions] in tracer/trace_calls.cpp): what
    it would save or mark for a backward that never runs is dropped;
    attributes the forward sets are kept for the forward's own reads."""

    def __init__(self, inputs):
        self.needs_input_grad = (False,) * inputs
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        pass

    def save_for_forward(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = value


class TracedFunctionContext:
    """The ctx a custom autograd.Function's forward and backward get when
    kiln traces both into the graph (Note [Traced Function backwards] in
    tracer/trace_function_vjp.cpp): save_for_backward keeps the tensors for
    the traced backward to read; what kiln does not model (marking outputs
    non-differentiable or dirty, unmaterialized gradients) sets `refused`,
    and the call stays one graph node."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors = ()
        self.materialize_grads = True
        self.refused = False

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors):
        self.refused = True

    def mark_non_differentiable(self, *tensors):
        self.refused = True

    def mark_dirty(self, *tensors):
        self.refused = True

    def set_materialize_grads(self, value):
        self.materialize_grads = value
        if not value:
            self.refused = True


class TracedFunctionCall:
    """The graph node of a custom Function call whose forward and backward
    kiln traced (Note [Traced Function backwards]): called with the traced
    forward's result, the call's tensor arguments and the values the traced
    backward reads. Where no gradient is recorded (kiln's compiled forward)
    it returns the result; where autograd records (a graph torch runs, a
    gradient through torch), it calls the Function itself, so torch sees
    the Function and its own backward. `arguments` are the call's
    arguments, the tensors at `positions` filled in per call; `backward`
    holds the traced backward graph for kiln's autograd."""

    def __init__(self, cls, arguments, positions, backward):
        self.cls = cls
        self.arguments = arguments
        self.positions = positions
        self.backward = backward
        self.__name__ = cls.__name__ + ".apply"

    def __call__(self, result, tensors, saved):
        if not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors):
            return result
        args = list(self.arguments)
        for i, t in zip(self.positions, tensors):
            args[i] = t
        return self.cls.apply(*args)
