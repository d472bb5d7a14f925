"""The torch.autograd.Function that runs kiln's partitioned graphs: the
forward graph computes the outputs and the values the backward needs (saved
through ctx), the backward graph turns output gradients into input
gradients. Built by autograd/function_bridge.cpp; not a public API."""
import torch


class CompiledFunction(torch.autograd.Function):
    """apply(runner, *inputs) -> tuple of outputs.

    runner = (forward, backward, output_has_grad, input_grad_slots, n_outputs,
    n_saved, grad_deps, make_variant, variants): forward(*inputs) returns
    outputs + saved + the results of calls with effects (kept only so that
    they run); backward(*saved, *grads of the outputs that carry one)
    returns the gradients of the inputs that get one, input_grad_slots[i]
    being input i's position among them or -1; grad_deps[slot] lists the
    output gradients (positions among those passed to backward) that
    gradient reads. When some of those gradients do not arrive (None),
    make_variant(positions) gives (backward without them, the positions of
    the gradients it returns), cached in the dict `variants` (Note [Absent
    gradients] in autograd/absent_grads.cpp).
    """

    @staticmethod
    def forward(ctx, runner, *inputs):
        forward, _, output_has_grad, _, n_outputs, n_saved = runner[:6]
        values = forward(*inputs)
        outputs, saved = values[:n_outputs], values[n_outputs:n_outputs + n_saved]
        ctx.runner = runner
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
        _, backward, output_has_grad, input_grad_slots, _, _, grad_deps, make_variant, variants = ctx.runner
        flowing = [g for g, has in zip(grads, output_has_grad) if has]
        missing = tuple(k for k, g in enumerate(flowing) if g is None)
        if missing:
            variant = variants.get(missing)
            if variant is None:
                variant = variants[missing] = make_variant(missing)
            call, present = variant
            input_grads = [None] * len(grad_deps)
            for position, g in zip(present, call(*ctx.saved_tensors, *flowing)):
                input_grads[position] = g
        else:
            input_grads = backward(*ctx.saved_tensors, *flowing)
        return (None,) + tuple(None if slot < 0 else input_grads[slot] for slot in input_grad_slots)
