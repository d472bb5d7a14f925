"""The call a graph's batched input casts run (Note [Batched weight casts]
in inductor/batched_casts.cpp); not a public API."""
import torch

_foreach_copy_ = torch._foreach_copy_
_empty_like = torch.empty_like


def cast_all(dtype, *tensors):
    """Copies of `tensors` converted to `dtype`, written by one foreach copy."""
    outs = [_empty_like(t, dtype=dtype) for t in tensors]
    _foreach_copy_(outs, tensors)
    return tuple(outs)
