"""In-place writes through views of a tensor the graph made (Note [Writes
through views] in prims/view_writes.cpp): functional, so kiln's autograd
and kernels take the graph (Longformer's masked band corners ran its whole
encoder through torch's autograd). Values and gradients against eager,
including views taken before the write and read after it, and fills
(zero_, fill_: their blocks carry no gradient); writes into
views of inputs stay torch's calls and still reach the caller's tensor."""
import pytest
import torch

import kiln
from conftest import TEST_DEVICE, kiln_logs

pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no decomposition of CPU graphs")


def _compare(fn, *shapes, capfd):
    """Runs fn compiled and eagerly on the same leaves; returns kiln's prims log."""
    torch.manual_seed(0)
    leaves = [torch.randn(s, requires_grad=True) for s in shapes]
    twins = [x.detach().clone().requires_grad_(True) for x in leaves]
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(fn)(*leaves)
    log = capfd.readouterr().err
    want = fn(*twins)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    got_grads = torch.autograd.grad(got, leaves, grad)
    want_grads = torch.autograd.grad(want, twins, grad)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
    return log


def test_masking_a_band_through_a_transposed_view(capfd):
    # Longformer's _mask_invalid_locations on its banded scores.
    def fn(x):
        scores = torch.cat([x * 2, x + 1], dim=1)  # [4, 8, 9], made here
        t = scores.view(2, 2, 8, 9).transpose(2, 1)  # [2, 8, 2, 9]
        corner = t[:, :3, :, :4]
        mask = torch.ones(3, 4).tril().bool()[None, :, None, :]
        t[:, :3, :, :4] = torch.full_like(corner, -1e4).where(mask, corner)
        tail = t[:, -3:, :, -4:]
        t[:, -3:, :, -4:] = tail * 3
        return scores.softmax(-1)

    log = _compare(fn, (4, 4, 9), capfd=capfd)
    assert "extern operator.setitem" not in log, log
    assert log.count("(a write through a view)") == 2, log


def test_views_taken_before_the_write_see_it(capfd):
    def fn(x):
        s = x * 2
        row = s[1]  # a view taken before the write, read after it
        cols = s.t()
        cols[2:4] = 0.5  # writes s[:, 2:4]
        return row * 3 + cols.sum(0).unsqueeze(1).expand(3, 6)[0].sum()

    log = _compare(fn, (3, 6), capfd=capfd)
    assert "extern operator.setitem" not in log, log


def test_augmented_assignment_through_a_permuted_and_unsqueezed_view(capfd):
    def fn(x, y):
        s = x * 1.5
        v = s.permute(1, 0).unsqueeze(0)
        v += y
        v[0, 0] *= 2
        return s.tanh()

    log = _compare(fn, (4, 3), (1, 3, 4), capfd=capfd)
    assert "extern operator.iadd" not in log and "extern operator.imul" not in log, log


def test_writes_into_views_of_inputs_stay_torchs_and_reach_the_caller(capfd):
    def fn(x):
        x.t()[1] = 7.0
        return x * 2

    x = torch.randn(3, 4)
    twin = x.clone()
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(fn)(x)
    assert "extern operator.setitem" in capfd.readouterr().err
    want = fn(twin)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, twin)


def test_fills_through_views(capfd):
    # Swin V2's attention zeroes the key third of a cloned qkv bias.
    def fn(x, bias):
        qkv_bias = bias.clone()
        length = qkv_bias.numel() // 3
        qkv_bias[length:2 * length].zero_()
        y = x * 3
        y[0].fill_(2.5)
        return x @ qkv_bias.view(3, 4).t() + y.sum()

    log = _compare(fn, (5, 4), (12,), capfd=capfd)
    assert "extern Tensor.zero_" not in log and "extern Tensor.fill_" not in log, log
    assert log.count("(a write through a view)") == 2, log


def test_augmented_assignment_to_a_python_number_is_the_plain_op(capfd):
    # T5's relative position buckets: `relative_buckets = 0`, then
    # `relative_buckets += (relative_position > 0).to(torch.long) * n`.
    def fn(x):
        buckets = 0
        buckets += (x > 0).to(torch.long) * 4
        scale = 1.5
        scale *= x
        return buckets + scale

    log = _compare(fn, (3, 4), capfd=capfd)
    assert "] extern" not in log, log


def test_a_reshape_that_copied_is_not_written_through(capfd):
    # s.t() cannot be viewed as [12]: reshape copies, and writes into the
    # copy leave s alone (in eager as here).
    def fn(x):
        s = x * 2
        flat = s.t().reshape(12)
        flat[:4] = 0.0
        return torch.cat([(s + 1).flatten(), flat * 3])

    _compare(fn, (3, 4), capfd=capfd)
