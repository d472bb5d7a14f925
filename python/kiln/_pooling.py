"""Max pooling with its indices saved for the backward (Note [Max pooling
with saved indices] in prims/decompose_nn_pool.cpp).

kiln keeps F.max_pool2d as a torch call. Its gradient as a plain extern ran
the pooling again under autograd in the backward (Note [Extern
gradients]); with gradients, the forward instead calls `max_pool2d` here,
which also returns the argmax indices, and `max_pool2d.kiln_vjp` hands them
to torch's backward kernel, as eager autograd does.
"""
import torch


def max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """(output, indices) of torch's max_pool2d_with_indices."""
    return torch.ops.aten.max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)


def _max_pool2d_vjp(args, kwargs, outputs, slots, grads):
    """The input's gradient (slots holds its one path) from the saved indices
    and the output's gradient, in empty_like(input)'s layout."""
    input, kernel_size, stride, padding, dilation, ceil_mode = args
    grad = grads[0] if grads[0] is not None else torch.zeros_like(outputs[0])
    found = torch.ops.aten.max_pool2d_with_indices_backward(
        grad, input, kernel_size, stride, padding, dilation, ceil_mode, outputs[1])
    like = torch.empty_like(input)
    return found if found.stride() == like.stride() else like.copy_(found)


max_pool2d.kiln_vjp = _max_pool2d_vjp
