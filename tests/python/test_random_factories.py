"""torch.empty / empty_like / new_empty and bernoulli draws as prims
(prims/decompose_factory.cpp): torchvision's stochastic depth,
`torch.empty(...).bernoulli_(p).div_(p)`, was three externs a block in
training (Swin, ConvNeXt, EfficientNetV2, MaxViT); now a draw kiln's
kernels take. Draws are kiln's (deterministic under torch.manual_seed, not
eager's numbers), so the tests check what every draw must satisfy and
compare everything else against eager with the mask kiln drew."""
import pytest
import torch
import torchvision

import kiln
from conftest import TEST_DEVICE, kiln_logs

pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no decomposition of CPU graphs")


def _externs(log):
    return [line for line in log.splitlines() if "] extern " in line]


def test_stochastic_depth_draws_in_the_graph(capfd):
    def block(x, w):
        return x + torchvision.ops.stochastic_depth(x * w, 0.5, "row", training=True)

    torch.manual_seed(0)
    x = torch.randn(64, 4, 3, 3, requires_grad=True)
    w = torch.randn(4, 1, 1, requires_grad=True)
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(block)(x, w)
    assert _externs(capfd.readouterr().err) == []
    # Each row is dropped (the residual alone) or kept and scaled by 1 / 0.5.
    out, y, residual = got.detach(), (x * w).detach(), x.detach()
    kept = torch.tensor([torch.allclose(out[i], residual[i] + y[i] / 0.5) for i in range(64)])
    dropped = torch.tensor([torch.equal(out[i], residual[i]) for i in range(64)])
    assert bool((kept | dropped).all())
    assert 8 < int(kept.sum()) < 56  # p = 0.5 over 64 rows
    # Gradients as eager's with that mask.
    mask = kept.to(x.dtype).view(64, 1, 1, 1) / 0.5
    grad = torch.randn_like(got)
    got_grads = torch.autograd.grad(got, (x, w), grad)
    want = x + x * w * mask
    want_grads = torch.autograd.grad(want, (x, w), grad)
    for g, e in zip(got_grads, want_grads):
        torch.testing.assert_close(g, e)


def test_bernoulli_draws_are_zeros_and_ones_at_the_rate_asked_and_seeded():
    def draw(probs, x):
        return torch.bernoulli(probs), x.bernoulli(0.25)

    probs = torch.full((200, 500), 0.7)
    x = torch.empty(300, 400)
    compiled = kiln.compile(draw)
    torch.manual_seed(1)
    a, b = compiled(probs, x)
    assert a.dtype == probs.dtype and b.dtype == x.dtype and a.shape == probs.shape and b.shape == x.shape
    for t, rate in ((a, 0.7), (b, 0.25)):
        assert bool(((t == 0) | (t == 1)).all())
        assert abs(t.mean().item() - rate) < 0.01
    torch.manual_seed(1)
    again = compiled(probs, x)
    assert torch.equal(again[0], a) and torch.equal(again[1], b)
    assert not torch.equal(compiled(probs, x)[0], a)  # the generator moved on


def test_empty_factories_hold_what_is_written(capfd):
    def fn(x):
        a = torch.empty(x.shape[0], 3, dtype=x.dtype, device=x.device)
        a[:] = 2.0
        b = torch.empty_like(x.t(), memory_format=torch.contiguous_format)
        b[...] = x.t() * 3
        c = x.new_empty(x.shape)
        c[:, :] = x
        d = torch.empty_like(x.t())  # preserve_format: transposed
        d[...] = x.t()
        return a.sum(1) + b.sum(0) + c.sum(1) + d.sum(0), b.stride(), d.stride()

    kiln.reset()
    compiled = kiln.compile(fn)
    capfd.readouterr()
    with kiln_logs("prims"):
        got = compiled(torch.randn(5, 6))
    log = capfd.readouterr().err
    assert not any("torch.empty" in line or "new_empty" in line for line in _externs(log)), log
    for x in (torch.randn(5, 6), torch.randn(5, 6)):  # a second call sees new values
        got, want = compiled(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]


def test_explicit_generators_draw_from_that_generator():
    # A Generator cannot enter a graph (a graph break); the call runs as
    # torch's, drawing eager's numbers from it.
    generator = torch.Generator(device=TEST_DEVICE)

    def fn(x):
        return x.bernoulli(0.5, generator=generator) * 2

    x = torch.empty(1000)
    generator.manual_seed(3)
    want = fn(x)
    generator.manual_seed(3)
    got = kiln.compile(fn)(x)
    assert torch.equal(got, want)
