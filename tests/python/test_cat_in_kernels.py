"""Cats of few pieces are computed inside the kernels that read them (Note
[Cat in kernels] in inductor/lower_values.cpp): torch.roll (Swin's shifted
windows), rotate_half (Llama's rotary embedding), F.pad's constant borders.
Results against eager, and the torch ops each call really runs (a dispatch
mode sees the ones kiln calls from C++ too): no cat is left where a kernel
reads it, and a cat of many pieces stays torch's call."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import assert_one_kernel, assert_same, ops_of



def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def shifted_windows(x, w):
    # torchvision's Swin block, in small: shift, cut into windows, project.
    b, h, wd, c = x.shape
    x = torch.roll(F.layer_norm(x, (c,)), shifts=(-2, -2), dims=(1, 2))
    x = x.view(b, h // 4, 4, wd // 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, c)
    return x @ w


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_embedding_reads_its_halves_in_one_kernel(dtype):
    q = torch.randn(2, 4, 6, 16, dtype=dtype)
    cos, sin = torch.randn(6, 16, dtype=dtype), torch.randn(6, 16, dtype=dtype)
    assert_one_kernel(rotary, q, cos, sin)


def test_roll_over_two_dims_is_read_in_place():
    def f(x):
        return torch.roll(x * 2, shifts=(-3, 2), dims=(1, 2)) + 1

    x = torch.randn(2, 7, 9, 5)
    compiled = kiln.compile(f, fullgraph=True)
    out, ops = ops_of(compiled, x)
    assert_same(out, f(x))
    assert "cat" not in ops and "roll" not in ops, ops


def test_shifted_windows_equal_eager():
    x, w = torch.randn(2, 8, 8, 12), torch.randn(12, 12)
    compiled = kiln.compile(shifted_windows, fullgraph=True)
    out, ops = ops_of(compiled, x, w)
    torch.testing.assert_close(out, shifted_windows(x, w))
    assert "cat" not in ops and "roll" not in ops, ops


def test_constant_pad_borders_come_from_the_kernel():
    def f(x):
        return F.pad(x.relu(), (1, 2, 0, 3)) * 3

    x = torch.randn(2, 7, 9, 5)
    compiled = kiln.compile(f, fullgraph=True)
    out, ops = ops_of(compiled, x)
    assert_same(out, f(x))
    assert "cat" not in ops, ops


def test_cat_of_three_pieces_into_a_reduction():
    def f(a, b, c):
        return torch.cat([a.sin(), b, c * 2], 1).sum(-1)

    args = torch.randn(3, 2, 4), torch.randn(3, 5, 4), torch.randn(3, 1, 4)
    compiled = kiln.compile(f, fullgraph=True)
    out, ops = ops_of(compiled, *args)
    torch.testing.assert_close(out, f(*args))
    assert "cat" not in ops, ops


def test_stack_and_a_cat_also_returned():
    def f(a, b):
        s = torch.stack([a.exp(), b], dim=1)
        c = torch.cat([a, b * 3], dim=0)
        return s * 2, c, c.cos()

    a, b = torch.randn(4, 6), torch.randn(4, 6)
    compiled = kiln.compile(f, fullgraph=True)
    out, _ = ops_of(compiled, a, b)
    assert_same(out, f(a, b))


def test_cat_of_many_pieces_stays_torch_call():
    def f(*xs):
        return torch.cat([x + 1 for x in xs], dim=1).relu()

    xs = [torch.randn(2, i + 1, 3) for i in range(6)]
    compiled = kiln.compile(f, fullgraph=True)
    out, ops = ops_of(compiled, *xs)
    assert_same(out, f(*xs))
    assert ops.get("cat", 0) == 1, ops


def test_cat_read_at_a_broadcast_index():
    # The cat's dim is read at one index for all points: one piece, no select.
    def f(a, b, x):
        return x * torch.cat([a, b], dim=0)[3]

    a, b, x = torch.randn(2, 5), torch.randn(3, 5), torch.randn(4, 5)
    compiled = kiln.compile(f, fullgraph=True)
    out, _ = ops_of(compiled, a, b, x)
    assert_same(out, f(a, b, x))


def test_gradients_through_roll_and_rotary_equal_eager():
    def f(x, q, cos, sin):
        return (torch.roll(x.tanh(), shifts=(1, -2), dims=(0, 1)) * 2).sum() + rotary(q, cos, sin).square().sum()

    def leaves():
        torch.manual_seed(0)
        return [torch.randn(5, 6, requires_grad=True), torch.randn(2, 3, 8, requires_grad=True),
                torch.randn(3, 8), torch.randn(3, 8)]

    compiled = kiln.compile(f, fullgraph=True)
    got_args, want_args = leaves(), leaves()
    compiled(*got_args).backward()
    f(*want_args).backward()
    for got, want in zip(got_args[:2], want_args[:2]):
        torch.testing.assert_close(got.grad, want.grad)
    assert kiln.stats()["autograd_graphs"] >= 1, kiln.stats()
