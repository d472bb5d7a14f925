"""torch.autograd.Function subclasses called in compiled code: Cls.apply is
one graph node, and the gradient is the Function's own backward (Note
[Custom autograd Functions] in tracer/trace_calls.cpp), traced into kiln's
backward where kiln can (Note [Traced Function backwards] in
tracer/trace_function_vjp.cpp)."""
import sys

import pytest
import torch

import kiln
from conftest import kiln_logs


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


class TanhGelu(torch.autograd.Function):
    """Bloom's GeLUFunction: saves its input, a hand-written derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return g * (0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t))


class StraightThrough(torch.autograd.Function):
    """round() with a gradient autograd would not give (2 * g), a constant
    argument and ctx state."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def traced_both(x, w):
    h = TanhGelu.apply(x @ w)
    return StraightThrough.apply(h, 4.0).sum() + CubedScale.apply(h, 0.5).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_function_backwards_are_traced_into_kilns_backward(backend, capfd):
    # Forward and backward both traced: the backward graph holds their
    # gradients as prims, no extern rerunning apply in Python.
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)
    want = torch.autograd.grad(traced_both(x, w), (x, w))
    compiled = kiln.compile(traced_both, backend=backend)
    with kiln_logs("prims,graph"):
        loss = compiled(x, w)
    log = capfd.readouterr().err
    got = torch.autograd.grad(loss, (x, w))
    torch.testing.assert_close(got, want)
    assert "TanhGelu.apply: tracing its forward and backward" in log and "not traced" not in log, log
    backward = log[log.index("backward graph"):]
    backward = backward[:backward.index("\n\n")]
    assert "extern_vjp(" not in backward and ".apply" not in backward, backward
    assert "tanh(" in backward, backward
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"], s["prim_fallbacks"]) == (1, 0, 0), s


class SavedByAttribute(torch.autograd.Function):
    """Keeps a forward intermediate on ctx instead of saving it."""

    @staticmethod
    def forward(ctx, x):
        ctx.doubled = x * 2
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.doubled.cos()


class MarksOutput(torch.autograd.Function):
    """Marks its output non-differentiable: torch gives it no gradient."""

    @staticmethod
    def forward(ctx, x):
        out = x.sign()
        ctx.mark_non_differentiable(out)
        return out

    @staticmethod
    def backward(ctx, g):
        return g


CALLS = []


class RecordsBackward(torch.autograd.Function):
    """A backward with an effect outside it."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        CALLS.append(1)
        return g * 3


class ReadsItsFrame(torch.autograd.Function):
    """A forward kiln's tracer does not follow (it reads the calling frame),
    which runs on meta tensors: as its own node the call needs no more."""

    @staticmethod
    def forward(ctx, x):
        sys._getframe()
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


@pytest.mark.parametrize("cls", [SavedByAttribute, MarksOutput, RecordsBackward, SplitSigns, ReadsItsFrame])
def test_functions_whose_backward_is_not_traced_stay_their_own_node(cls, capfd):
    # A backward reading what it did not save, an output marked
    # non-differentiable, a backward with effects, two outputs: the frame is
    # traced again with the call as the Function's node, gradients torch's.
    # (A subclass of its own: the refusal of a class holds for the process.)
    records = cls is RecordsBackward
    cls = type(cls.__name__, (cls,), {})

    def g(x):
        out = cls.apply(x)
        out = out[0] - out[1] if isinstance(out, tuple) else out
        return (out * x).sum()

    x = torch.randn(6, requires_grad=True)
    want = torch.autograd.grad(g(x), x)
    CALLS.clear()
    with kiln_logs("graph"):
        loss = kiln.compile(g)(x)
    assert CALLS == []  # the backward's effect happens in the backward
    got = torch.autograd.grad(loss, x)
    torch.testing.assert_close(got, want)
    assert CALLS == ([1] if records else [])
    assert f"{cls.__name__}.apply: backward not traced" in capfd.readouterr().err
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"]) == (1, 0), s


class TransposedView(torch.autograd.Function):
    """Returns a view of its argument taken under apply's no_grad: a graph
    kiln does not decompose, so torch runs it, calling the Function."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.t() * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (g * 3).t() + x * 0


class TransposedResult(torch.autograd.Function):
    """A result laid out transposed: its backward was traced for a gradient
    in that layout, which the gradient kiln computes does not have."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        y = x * 2
        return y.t() * 1

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (g * 3).t() + x * 0


@pytest.mark.parametrize("cls", [TransposedView, TransposedResult])
def test_traced_backwards_kiln_cannot_use_rerun_the_function(cls, capfd):
    # Where kiln cannot splice the traced backward in, the call node reruns
    # the Function through torch (TracedFunctionCall calls apply when
    # autograd records): torch's values and gradients.
    def g(x):
        return (cls.apply(x) * torch.arange(12.0).reshape(4, 3)).sum()

    x = torch.randn(3, 4, requires_grad=True)
    want = torch.autograd.grad(g(x), x)
    with kiln_logs("prims,backend"):
        loss = kiln.compile(g, backend="aot_eager")(x)
    got = torch.autograd.grad(loss, x)
    torch.testing.assert_close(got, want)
    log = capfd.readouterr().err
    if cls is TransposedResult:
        assert "TransposedResult.apply: traced backward not used" in log, log
    else:
        assert "is a view taken under torch.no_grad()" in log, log


class RouterMultiplier(torch.autograd.Function):
    """PhiMoE's router Function: its backward scatters into a tensor it
    made, in place (scatter_add_), which kiln computes out of place."""

    @staticmethod
    def forward(ctx, scores, multiplier, selected, gates, ones):
        ctx.save_for_backward(multiplier, selected, gates)
        return multiplier * ones

    @staticmethod
    def backward(ctx, g):
        multiplier, selected, gates = ctx.saved_tensors
        g = g * multiplier
        grad = gates * g.mul(-1)
        grad.scatter_add_(dim=-1, index=selected, src=g)
        return grad, None, None, None, None


class DiagonalCleared(torch.autograd.Function):
    """A backward writing in place through an op kiln keeps as torch's
    (fill_diagonal_): kiln's autograd reruns the Function instead."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        g = g * 2
        g.fill_diagonal_(0)
        return g


def test_function_backwards_writing_in_place(capfd):
    def router(scores):
        gates = torch.softmax(scores, dim=-1)
        selected = scores.argmax(dim=-1, keepdim=True)
        multiplier = gates.gather(dim=-1, index=selected)
        out = RouterMultiplier.apply(scores, multiplier, selected, gates, torch.ones_like(multiplier))
        return (out * torch.arange(6.0).reshape(6, 1)).sum() + DiagonalCleared.apply(scores[:4]).sum()

    s = torch.randn(6, 4, requires_grad=True)
    want = torch.autograd.grad(router(s), s)
    with kiln_logs("prims"):
        loss = kiln.compile(router)(s)
    got = torch.autograd.grad(loss, s)
    torch.testing.assert_close(got, want)
    log = capfd.readouterr().err
    assert "extern Tensor.scatter_add_" not in log and "extern Tensor.gather" not in log, log
    assert "DiagonalCleared.apply: traced backward not used (its backward writes in place" in log, log
