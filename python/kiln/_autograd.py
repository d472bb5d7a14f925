"""The torch.autograd.Function that runs kiln's partitioned graphs: the
forward graph computes the outputs and the values the backward needs (saved
through ctx), the backward graph turns output gradients into input
gradients. Built by autograd/function_bridge.cpp; not a public API."""
import torch


class CompiledFunction(torch.autograd.Function):
    """apply(runner, *inputs) -> tuple of outputs.

    runner = (forward, backward, output_has_grad, input_grad_slots, n_outputs, n_saved):
    forward(*inputs) returns outputs + saved + the results of calls with
    effects (kept only so that they run); backward(*saved, *grads of the
    outputs that carry one) returns the gradients of the inputs that get one,
    input_grad_slots[i] being input i's position among them or -1.
    """

    @staticmethod
    def forward(ctx, runner, *inputs):
        forward, _, output_has_grad, _, n_outputs, n_saved = runner
        values = forward(*inputs)
        outputs, saved = values[:n_outputs], values[n_outputs:n_outputs + n_saved]
        ctx.runner = runner
        ctx.save_for_backward(*saved)
        no_grad = [out for out, has in zip(outputs, output_has_grad) if not has]
        if no_grad:
            ctx.mark_non_differentiable(*no_grad)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        _, backward, output_has_grad, input_grad_slots, _, _ = ctx.runner
        flowing = [g for g, has in zip(grads, output_has_grad) if has]
        input_grads = backward(*ctx.saved_tensors, *flowing)
        return (None,) + tuple(None if slot < 0 else input_grads[slot] for slot in input_grad_slots)
