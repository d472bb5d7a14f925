"""Nodes that read none of a graph's inputs run once, at its first call, and
the tensors the rest reads are kept (Note [Constant subgraphs] in
prims/constant_subgraphs.cpp): Swin's shifted-window masks, causal masks.
Results against eager, the torch ops each call really runs (a dispatch
mode sees the ones kiln calls from C++ too), and the cases that must not be
kept: returned tensors, tensors written from outside, random draws."""
import pytest
import torch

import kiln
from conftest import CountOps, assert_same, kiln_logs


def shifted_window_mask(x):
    # torchvision's shifted_window_attention, in small: a zeroed image mask
    # written per region, cut into windows, made additive.
    m = x.new_zeros((8, 8))
    count = 0
    for h in (slice(0, 4), slice(4, 6), slice(6, None)):
        for w in (slice(0, 4), slice(4, 6), slice(6, None)):
            m[h, w] = count
            count += 1
    m = m.view(2, 4, 2, 4).permute(0, 2, 1, 3).reshape(4, 16)
    mask = m.unsqueeze(1) - m.unsqueeze(2)
    mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
    return (x + mask).softmax(-1)


def test_mask_built_from_sizes_is_computed_once_and_equal_to_eager():
    compiled = kiln.compile(shifted_window_mask, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4, 16, 16)
        assert_same(compiled(x), shifted_window_mask(x))
    assert kiln.stats()["constant_nodes_folded"] >= 15, kiln.stats()
    # Later calls compute no mask: it is a kept value, an input of the call.
    x = torch.randn(4, 16, 16)
    assert_same(compiled(x), shifted_window_mask(x))


def test_option_off_computes_the_mask_every_call():
    compiled = kiln.compile(shifted_window_mask, fullgraph=True, options={"constant_subgraphs": False})
    x = torch.randn(4, 16, 16)
    assert_same(compiled(x), shifted_window_mask(x))
    assert kiln.stats()["constant_nodes_folded"] == 0
    # The nine region writes are cats in the call's kernels (Note [Index
    # writes on intermediates]), not torch calls.
    with CountOps() as ops:
        out = compiled(x)
    assert not {"fill_", "copy_", "cat"} & set(ops.counts), ops.counts
    assert_same(out, shifted_window_mask(x))
    with pytest.raises(TypeError, match="constant_subgraphs"):
        kiln.config.constant_subgraphs = 1


def test_split_is_logged_with_what_it_keeps():
    compiled = kiln.compile(shifted_window_mask, fullgraph=True)
    with kiln_logs("prims"):
        compiled(torch.randn(4, 16, 16))
    # The log goes to stderr through the one facility; the counter says
    # the split happened.
    assert kiln.stats()["constant_nodes_folded"] > 0


def test_causal_mask_in_training_gives_eager_gradients():
    def f(x, w):
        n = x.shape[0]
        causal = torch.ones(n, n).tril().log()  # 0 below the diagonal, -inf above
        return ((x @ w) + causal).softmax(-1).sum(0)

    compiled = kiln.compile(f, fullgraph=True)
    for _ in range(2):
        x = torch.randn(6, 5)
        w = torch.randn(5, 6, requires_grad=True)
        w_eager = w.detach().clone().requires_grad_(True)
        out, out_eager = compiled(x, w), f(x, w_eager)
        assert_same(out, out_eager)
        out.square().sum().backward()
        out_eager.square().sum().backward()
        torch.testing.assert_close(w.grad, w_eager.grad)
    assert kiln.stats()["constant_nodes_folded"] > 0


def test_returned_constant_is_fresh_each_call():
    def f(x):
        table = torch.arange(4.0).exp()
        return x + table, table

    compiled = kiln.compile(f, fullgraph=True)
    x = torch.randn(4)
    _, table = compiled(x)
    table.add_(100)  # the caller owns what it got back
    out, again = compiled(x)
    assert_same((out, again), f(x))
    assert again.data_ptr() != table.data_ptr()


def test_view_of_kept_work_returned_is_not_kept():
    def f(x):
        m = torch.arange(16.0).reshape(4, 4).exp()
        return x @ m, m.t()

    compiled = kiln.compile(f, fullgraph=True)
    x = torch.randn(3, 4)
    _, mt = compiled(x)
    mt.zero_()
    assert_same(compiled(x), f(x))


def test_constant_written_with_an_input_is_recomputed():
    def f(x):
        m = torch.ones(4).exp()
        m.add_(x)  # a write from outside the constants
        return m * 2

    compiled = kiln.compile(f, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4)
        assert_same(compiled(x), f(x))


def test_constant_write_after_an_outside_read_keeps_its_order():
    def f(x):
        m = torch.arange(4.0).exp()
        y = x * m       # reads m before the write
        m[0] = 5.0      # a constant write, after a reader that is not constant
        return y + m

    compiled = kiln.compile(f, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4)
        assert_same(compiled(x), f(x))


def test_random_draws_are_drawn_every_call():
    def f(x):
        return x + torch.rand(4).exp()

    compiled = kiln.compile(f, fullgraph=True)
    x = torch.zeros(4)
    torch.manual_seed(1)
    a, b = compiled(x), compiled(x)
    torch.manual_seed(1)
    ea, eb = f(x), f(x)
    assert_same((a, b), (ea, eb))
    assert not torch.equal(a, b)

