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


def graph_text(fn, *args):
    """The graph section of a fresh trace's dump."""
    from kiln import _C
    _, text = _C.trace_dump(fn, args, {}, False, False)
    return text.split("--- graph ---")[1].split("--- guards ---")[0]


def test_forward_is_inlined_where_no_gradient_flows():
    # Under no_grad (or with no input requiring grad) apply is the forward:
    # traced inline, its ctx dropping what the backward would use.
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    with torch.no_grad():
        text = graph_text(fn, x, w)
        assert ".apply" not in text and "clamp" in text, text
    text = graph_text(fn, x, w)  # grad mode on, but nothing requires grad
    assert ".apply" not in text, text
    wg = w.clone().requires_grad_()
    text = graph_text(fn, x, wg)
    assert "CubedScale.apply" in text and "SplitSigns.apply" in text, text


class ScaledByCount(torch.autograd.Function):
    """Reads ctx state its forward set, and needs_input_grad."""

    @staticmethod
    def forward(ctx, x, times):
        ctx.times = times
        ctx.mark_non_differentiable()
        ctx.set_materialize_grads(False)
        flags = ctx.needs_input_grad
        return x * ctx.times + len(flags)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.times, None


class SetupStyle(torch.autograd.Function):
    """The newer style: forward without ctx, setup_context apart."""

    @staticmethod
    def forward(x, y):
        return x * y + 1

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_inlined_forwards_compute_what_apply_does(backend):
    def g(x, y):
        return ScaledByCount.apply(x, 3) + SetupStyle.apply(x, y)

    x, y = torch.randn(5), torch.randn(5)
    compiled = kiln.compile(g, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, y), g(x, y))
    assert ".apply" not in graph_text(g, x, y)
    # with gradients the Functions' own backwards run
    xg, yg = x.clone().requires_grad_(), y.clone().requires_grad_()
    compiled(xg, yg).sum().backward()
    xe, ye = x.clone().requires_grad_(), y.clone().requires_grad_()
    g(xe, ye).sum().backward()
    torch.testing.assert_close([xg.grad, yg.grad], [xe.grad, ye.grad])


SHIFT = torch.nn.Parameter(torch.randn(5))


class ShiftedByParameter(torch.autograd.Function):
    """Reads a parameter its caller does not pass: apply runs the forward
    under no_grad, so no gradient reaches it through the call."""

    @staticmethod
    def forward(ctx, x):
        return x + SHIFT

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_inlined_forward_runs_under_no_grad_as_apply_does():
    def g(x):
        return ShiftedByParameter.apply(x) * 2

    x = torch.randn(5)
    got, want = kiln.compile(g, backend="aot_eager")(x), g(x)
    torch.testing.assert_close(got, want)
    assert got.requires_grad == want.requires_grad == False
