"""torch.autograd.Function subclasses called in compiled code: Cls.apply is
one graph node, and the gradient is the Function's own backward (Note
[Custom autograd Functions] in tracer/trace_calls.cpp)."""
import pytest
import torch

import kiln


class CubedScale(torch.autograd.Function):
    """y = x * x * scale, with a backward that is deliberately not its
    derivative (3 * scale * x * g): a compiled call must use it."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * ctx.scale * x, None


class SplitSigns(torch.autograd.Function):
    """Two outputs: the positive and the negative parts."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0), x.clamp(max=0)

    @staticmethod
    def backward(ctx, grad_pos, grad_neg):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, grad_pos, grad_neg)


def fn(x, w):
    h = CubedScale.apply(x @ w, 0.5)
    pos, neg = SplitSigns.apply(h.sin())
    return (pos * 2 + neg).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_custom_functions_trace_into_one_graph_with_their_own_backward(backend):
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    fn(x, w).backward()
    want = [x.grad.clone(), w.grad.clone()]
    x.grad = w.grad = None
    compiled = kiln.compile(fn, backend=backend)
    for _ in range(2):
        loss = compiled(x, w)
        loss.backward()
        torch.testing.assert_close([x.grad, w.grad], want)
        x.grad = w.grad = None
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"], s["unsupported"]) == (1, 0, 0), s


def test_custom_function_under_no_grad():
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    with torch.no_grad():
        torch.testing.assert_close(kiln.compile(fn)(x, w), fn(x, w))
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"]) == (1, 0), s
