"""`with torch.no_grad()` / `torch.enable_grad()` / `torch.set_grad_enabled(b)`
inside compiled code: traced into the graph, same results and autograd
state as eager, and the grad mode never leaks out of a call."""
import pytest
import torch

import kiln
from conftest import assert_same, stats


def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    z = y + x
    with torch.enable_grad():
        w = z * 3
    return y, z, w


def set_grad_enabled_block(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return y + x


def set_grad_enabled_calls(x):
    torch.set_grad_enabled(False)
    y = x * 2
    torch.set_grad_enabled(True)
    return y


def nested_blocks(x, w):
    with torch.no_grad():
        a = x @ w
        with torch.enable_grad():
            b = (x * w.sum()).relu()
    return a, b


def helper_under_no_grad(t):
    with torch.no_grad():
        return t.sigmoid()


def inlined_block(x):
    return helper_under_no_grad(x) * x


CASES = [no_grad_block, set_grad_enabled_block, set_grad_enabled_calls, inlined_block]


def outputs(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("outer_no_grad", [False, True])
def test_grad_mode_blocks_match_eager(fn, outer_no_grad):
    compiled = kiln.compile(fn, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4, requires_grad=True)
        with torch.set_grad_enabled(not outer_no_grad):
            got = outputs(compiled(x))
            mode_after_compiled = torch.is_grad_enabled()
        with torch.set_grad_enabled(not outer_no_grad):
            want = outputs(fn(x))
            mode_after_eager = torch.is_grad_enabled()
        assert mode_after_compiled == mode_after_eager
        assert_same(got, want)
        assert [t.requires_grad for t in got] == [t.requires_grad for t in want]
    assert stats()["graph_breaks"] == 0
    assert torch.is_grad_enabled()


def test_nested_blocks_and_gradients():
    compiled = kiln.compile(nested_blocks, fullgraph=True)
    x = torch.randn(3, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    a, b = compiled(x, w)
    a2, b2 = nested_blocks(x, w)
    assert_same((a, b), (a2, b2))
    assert not a.requires_grad and b.requires_grad
    b.sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    b2.sum().backward()
    assert_same((gx, gw), (x.grad, w.grad))


def test_error_inside_block_restores_grad_mode():
    def fails(x):
        with torch.no_grad():
            y = x * 2
            z = y.view(5)  # invalid for 4 elements: raises at run time
        return z

    compiled = kiln.compile(fails)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            compiled(torch.randn(4))
        assert torch.is_grad_enabled()


def test_graph_text_shows_mode_switches():
    out = kiln.explain(no_grad_block)(torch.randn(2, requires_grad=True))
    assert out.graph_count == 1 and out.graph_break_count == 0
    assert "torch._C._set_grad_enabled(False)" in out.graphs[0]


def test_no_grad_decorated_method_is_traced():
    # `@torch.no_grad()` on a method (rotary embeddings in transformers):
    # torch.utils._contextlib's wrapper is inlined, the block traced.
    class Rotary(torch.nn.Module):
        @torch.no_grad()
        def forward(self, x):
            return x * 2, torch.is_grad_enabled()

    rotary = Rotary()

    def fn(x):
        y, enabled = rotary(x)
        return y + x, enabled

    x = torch.randn(3, requires_grad=True)
    compiled = kiln.compile(fn, fullgraph=True)
    out, enabled = compiled(x)
    want, want_enabled = fn(x)
    assert enabled is want_enabled is False
    assert out.requires_grad and torch.equal(out, want)
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones(3))
