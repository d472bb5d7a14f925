"""Marks on a tensor's dims for the tracer: dynamic from the first compile,
or never dynamic. They are torch.compile's own marks (the attributes
torch._dynamo.mark_dynamic and mark_static set), so code written for
torch.compile works unchanged, and kiln's functions mark for both."""
import torch

__all__ = ["mark_dynamic", "mark_static"]


def _dims(t, dim, who):
    """`dim` (an int or a sequence of them) as non-negative dims of `t`; TypeError or IndexError naming `who`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"kiln.{who}: expected a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = []
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError(f"kiln.{who}: dims must be ints, got {d!r}")
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"kiln.{who}: dim {d} is out of range for a tensor of {t.dim()} dims")
        out.append(d % t.dim())
    return out


def mark_dynamic(t, dim):
    """Traces dim(s) `dim` of `t`, when `t` is an argument of a compiled frame, with a symbolic size from the first compile."""
    marks = getattr(t, "_dynamo_dynamic_indices", None)
    if marks is None:
        marks = t._dynamo_dynamic_indices = set()
    marks.update(_dims(t, dim, "mark_dynamic"))


def mark_static(t, dim=None):
    """Keeps dim(s) `dim` of `t` (all of them when None) static, even after size changes."""
    dims = range(t.dim()) if dim is None and isinstance(t, torch.Tensor) else _dims(t, dim, "mark_static")
    marks = getattr(t, "_dynamo_static_indices", None)
    if marks is None:
        marks = t._dynamo_static_indices = set()
    marks.update(dims)
