"""Gradients of extern prim nodes, computed by torch.

An extern keeps an op as a torch call; its derivative in kiln's backward
graph is an extern node calling `extern_vjp` (Note [Extern gradients] in
autograd/derivatives_extern.cpp). The op runs a second time here: the
forward's autograd graph is not kept, so the backward pays one more forward
of the op (a later step may save that graph instead).
"""
import torch


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


def extern_vjp(fn, args, kwargs, slots, grads):
    """Gradients of fn(*args, **kwargs) with respect to the tensors at `slots`.

    A slot is a path into (args, kwargs): (0, i, ...) or (1, name, ...).
    `grads` holds one gradient per output of the call (None: no gradient).
    Returns one contiguous gradient per slot (zeros where the outputs do not
    depend on it): a tensor for one slot, else a tuple.
    """
    call = (tuple(args), dict(kwargs))
    leaves = []
    for path in slots:
        item = call[path[0]]
        for key in path[1:]:
            item = item[key]
        leaf = item.detach().requires_grad_(True)
        leaves.append(leaf)
        call = _replace(call, path, leaf)
    with torch.enable_grad():
        result = fn(*call[0], **call[1])
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    pairs = [(out, grad) for out, grad in zip(outputs, grads)
             if grad is not None and isinstance(out, torch.Tensor) and out.requires_grad]
    found = [None] * len(leaves)
    if pairs:
        found = torch.autograd.grad([out for out, _ in pairs], leaves,
                                    [grad for _, grad in pairs], allow_unused=True)
    gradients = tuple(
        torch.zeros(leaf.shape, dtype=leaf.dtype, device=leaf.device) if grad is None
        else grad.contiguous()
        for leaf, grad in zip(leaves, found))
    return gradients[0] if len(gradients) == 1 else gradients
