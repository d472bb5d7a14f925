"""Gradients of extern prim nodes, computed by torch.

An extern keeps an op as a torch call; its derivative in kiln's backward
graph is an extern node calling `extern_vjp` (Note [Extern gradients] in
autograd/derivatives_extern.cpp). The op runs a second time here: the
forward's autograd graph is not kept, so the backward pays one more forward
of the op (a later step may save that graph instead), except for ops in
_BACKWARDS, whose gradients torch computes from the saved inputs alone
(convolutions: the rerun cost a third of a conv net's training step).
"""
import torch
import torch.nn.functional as F


def _replace(obj, path, leaf):
    """`obj` with the item at `path` (indices or keys, outermost first) set to `leaf`."""
    if not path:
        return leaf
    key, rest = path[0], path[1:]
    if isinstance(obj, dict):
        copy = dict(obj)
        copy[key] = _replace(obj[key], rest, leaf)
        return copy
    items = list(obj)
    items[key] = _replace(items[key], rest, leaf)
    return tuple(items) if isinstance(obj, tuple) else items


_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONV_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}


def _laid_out(grad, strides):
    """`grad` with `strides` wherever a dim has more than one element (a
    copy where torch gave it another layout)."""
    if all(a == b for a, b, n in zip(grad.stride(), strides, grad.shape) if n != 1):
        return grad
    return torch.empty_strided(grad.shape, strides, dtype=grad.dtype, device=grad.device).copy_(grad)


def _conv_vjp(args, kwargs, slots, grads, strides):
    """Gradients of F.conv1d/2d/3d by aten.convolution_backward, as eager
    autograd computes them; None where the call is not one it takes (string
    padding, slots inside containers)."""
    if len(args) > len(_CONV_PARAMS) or any(k not in _CONV_PARAMS for k in kwargs):
        return None
    bound = dict(_CONV_DEFAULTS)
    bound.update(zip(_CONV_PARAMS, args))
    bound.update(kwargs)
    if isinstance(bound["padding"], str) or grads[0] is None:
        return None
    names = []
    for path in slots:
        if len(path) != 2:
            return None
        names.append(_CONV_PARAMS[path[1]] if path[0] == 0 else path[1])
    if any(n not in ("input", "weight", "bias") for n in names):
        return None
    x, w, b = bound["input"], bound["weight"], bound["bias"]
    dims = w.dim() - 2

    def spread(v):
        return list(v) if isinstance(v, (tuple, list)) else [v] * dims
    mask = [n in names for n in ("input", "weight", "bias")]
    gx, gw, gb = torch.ops.aten.convolution_backward(
        grads[0], x, w, None if b is None else [b.shape[0]], spread(bound["stride"]), spread(bound["padding"]),
        spread(bound["dilation"]), False, [0] * dims, bound["groups"], mask)
    found = {"input": gx, "weight": gw, "bias": gb}
    gradients = tuple(_laid_out(found[n], s) for n, s in zip(names, strides))
    return gradients[0] if len(gradients) == 1 else gradients


# Ops whose gradients come straight from torch's backward kernels.
_BACKWARDS = {F.conv1d: _conv_vjp, F.conv2d: _conv_vjp, F.conv3d: _conv_vjp}


def extern_vjp(fn, args, kwargs, slots, grads, strides):
    """Gradients of fn(*args, **kwargs) with respect to the tensors at `slots`.

    A slot is a path into (args, kwargs): (0, i, ...) or (1, name, ...).
    `grads` holds one gradient per output of the call (None: no gradient).
    Returns one gradient per slot, with the slot's `strides` (empty_like's
    layout of the input; zeros where the outputs do not depend on it): a
    tensor for one slot, else a tuple.
    """
    direct = _BACKWARDS.get(fn)
    if direct is not None:
        found = direct(args, kwargs, slots, grads, strides)
        if found is not None:
            return found
    call = (tuple(args), dict(kwargs))
    leaves = []
    with torch.enable_grad():  # the backward runs without; the copies below need it
        for path in slots:
            item = call[path[0]]
            for key in path[1:]:
                item = item[key]
            leaf = item.detach().requires_grad_(True)
            leaves.append(leaf)
            # The rerun gets a copy: a call that writes in place
            # (F.leaky_relu(x, 0.1, True), Tensor.add_) may not write into a
            # leaf, nor into the saved forward value the leaf shares memory with.
            call = _replace(call, path, leaf.clone())
        result = fn(*call[0], **call[1])
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    pairs = [(out, grad) for out, grad in zip(outputs, grads)
             if grad is not None and isinstance(out, torch.Tensor) and out.requires_grad]
    found = [None] * len(leaves)
    if pairs:
        found = torch.autograd.grad([out for out, _ in pairs], leaves,
                                    [grad for _, grad in pairs], allow_unused=True)
    gradients = tuple(
        torch.empty_strided(leaf.shape, s, dtype=leaf.dtype, device=leaf.device).zero_() if grad is None
        else _laid_out(grad, s)
        for leaf, grad, s in zip(leaves, found, strides))
    return gradients[0] if len(gradients) == 1 else gradients
