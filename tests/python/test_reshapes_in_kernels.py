"""Reshapes that merge dims of a computed value are read inside the kernels
that read them (Note [Reshapes in kernels] in inductor/lower_values.cpp):
each input dim of a merged block reads a digit of the merged index. Results
against eager, the torch ops each call really runs (a dispatch mode sees
the ones kiln calls from C++ too), and the kernels' text where a merge of a
contiguous value must stay a strided load."""
import pytest
import torch

import kiln
from conftest import CountOps, assert_one_kernel, assert_same, kiln_logs, ops_of



def interleaved_rotary(x, cos, sin):
    # timm's EVA rotary embedding: pairs (x0, x1) -> (-x1, x0), flattened.
    rotated = torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)
    return x * cos + rotated * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_interleaved_rotary_is_one_kernel(dtype):
    x = torch.randn(2, 3, 8, 16, dtype=dtype)
    cos, sin = torch.randn(8, 16, dtype=dtype), torch.randn(8, 16, dtype=dtype)
    assert_one_kernel(interleaved_rotary, x, cos, sin, absent=("cat", "stack"))


def test_merge_of_a_transposed_value_copies_nothing():
    def f(x):
        return (x * 3).transpose(1, 2).reshape(x.shape[0], -1) + 1

    x = torch.randn(3, 5, 7)
    compiled = kiln.compile(f, fullgraph=True)
    out, ops = ops_of(compiled, x)
    assert_same(out, f(x))
    assert kiln.stats()["kernels"] == 1, kiln.stats()
    assert not ({"clone", "copy_", "_unsafe_view", "view"} & set(ops)), ops


@pytest.mark.parametrize("shapes", [
    ((6, 4), (4, 6)),                 # one block of two dims each way
    ((2, 3, 4, 5), (6, 20)),          # merges only
    ((2, 3, 4, 5), (3, 40)),          # a block of three dims into two
    ((2, 1, 6, 1, 5), (1, 4, 15)),    # size-1 dims on both sides
    ((4, 9), (2, 2, 3, 3)),           # splits only
])
def test_reshapes_of_computed_values_equal_eager(shapes):
    before, after = shapes

    def f(x):
        return (x.exp() * 2).reshape(after).sin() + 1

    x = torch.randn(before)
    out = kiln.compile(f, fullgraph=True)(x)
    assert_same(out, f(x))
    assert kiln.stats()["kernels"] == 1, kiln.stats()


def test_chained_reshapes_and_permutes_equal_eager():
    def f(x, y):
        a = ((x + 1).reshape(6, 20) * 2).t().reshape(5, 24).sin()
        b = torch.cat([y + 1, y * 2], 1).permute(1, 0, 2).reshape(-1, 4).cos()
        return a, b

    x, y = torch.randn(2, 3, 4, 5), torch.randn(3, 5, 4)
    assert_same(kiln.compile(f, fullgraph=True)(x, y), f(x, y))


def test_merge_of_a_sliced_value_reads_the_slice():
    def f(x):
        return x.sigmoid()[:, 1:3].reshape(-1) + 1

    x = torch.randn(5, 4, 3)
    assert_same(kiln.compile(f, fullgraph=True)(x), f(x))


def test_group_merge_into_a_reduction_stays_a_strided_load(capfd):
    # The digits of a merge meet a contiguous input's strides at the load
    # and fold back into one index: no load at computed indices.
    def f(x):
        y = (x * 2).reshape(2, 4, -1)
        return (y - y.mean(-1, keepdim=True)).reshape(x.shape)

    x = torch.randn(2, 8, 3, 3)
    compiled = kiln.compile(f, fullgraph=True)
    with kiln_logs("kernels"):
        out = compiled(x)
    log = capfd.readouterr().err
    assert_same(out, f(x))
    assert "reduce_sum" in log and "load_at" not in log and "index_div" not in log, log


def test_merge_of_a_permuted_input_reads_it_where_it_lies(capfd):
    # A graph input torch could not view as merged: its digits stay and
    # the kernel reads it at computed indices, no copy first.
    def f(x):
        return x.reshape(-1, 6) * 2

    x = torch.randn(4, 2, 3).permute(2, 0, 1)
    compiled = kiln.compile(f, fullgraph=True)
    out, ops = ops_of(compiled, x)
    assert_same(out, f(x))
    assert kiln.stats()["kernels"] == 1 and "clone" not in ops, (kiln.stats(), ops)


def test_stepped_slice_gradients_interleave_inside_a_kernel():
    # A stepped slice's gradient is g interleaved with zeros by a cat and a
    # merging reshape (Note [Slice gradients joined by cat]): now read
    # inside the kernel that sums the gradients, no torch cat.
    def f(x):
        return (x[..., ::2] * 2).sum() + x[..., 1::2].sin().sum()

    x = torch.randn(3, 4, 12, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    compiled = kiln.compile(f, fullgraph=True)
    compiled(x.detach().clone().requires_grad_()).backward()  # compiles
    out = compiled(x)
    with CountOps() as ops:
        out.backward()
    f(xe).backward()
    torch.testing.assert_close(x.grad, xe.grad)
    assert "cat" not in ops.counts, ops.counts
