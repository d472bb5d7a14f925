"""Ops the library sweep found kept as torch calls, now prims: softplus
(its gradient finite where beta x passes the threshold), torch.outer,
Tensor.repeat, repeat_interleave by an int, swapaxes/swapdims, square,
arange with keywords, average pools whose windows tile the input. Values and
gradients as eager's, no extern."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import TEST_DEVICE, kiln_logs

# Decompositions run where the graph's device has kiln kernels: LLVM's for
# CPU tensors, NVRTC's under KILN_TEST_DEVICE=cuda.
pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no decomposition of CPU graphs")


def test_ops_decompose_with_eager_values_and_gradients(capfd):
    def fn(x):
        m = x.view(3, 4)
        y = F.softplus(x * 40, beta=2, threshold=5) + F.softplus(x)
        z = torch.outer(x[:3], x[3:7]).repeat(2, 1, 2).sum(0)
        w = torch.swapaxes(m, 0, 1) * torch.arange(start=1, end=4) + m.swapdims(0, 1).square()
        r = m.repeat_interleave(2, dim=1) * torch.repeat_interleave(x, 2).view(3, 8)
        return y.sum() + z.sum() + w.sum() + r.square().sum()

    torch.manual_seed(0)
    x = torch.randn(12, requires_grad=True)
    want = fn(x)
    want_grad, = torch.autograd.grad(want, x)
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(fn)(x)
    log = capfd.readouterr().err
    got_grad, = torch.autograd.grad(got, x)
    assert "[kiln:prims] extern" not in log, log
    assert torch.isfinite(got_grad).all()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


def test_tiling_average_pools_decompose_in_torchs_layout(capfd):
    # Note [Tiling average pools]: windows that tile the input (floor mode
    # drops the last row) are prims; a channels-last input keeps its format;
    # overlapping windows stay torch's call.
    def fn(x, y):
        return F.avg_pool2d(x, 2) * 3, F.avg_pool2d(y, 3, stride=1)

    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8).to(memory_format=torch.channels_last).requires_grad_(True)
    y = torch.randn(2, 3, 6, 6, requires_grad=True)
    want = fn(x, y)
    wants = torch.autograd.grad(sum(w.square().sum() for w in want), (x, y))
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(fn)(x, y)
    log = capfd.readouterr().err
    grads = torch.autograd.grad(sum(g.square().sum() for g in got), (x, y))
    assert log.count("[kiln:prims] extern F.avg_pool2d") == 1, log
    for g, w in zip(got + grads, want + wants):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w)
