"""Max pooling whose input needs a gradient saves its argmax indices for
torch's backward kernel instead of pooling again in the backward (Note [Max
pooling with saved indices] in prims/decompose_pool.cpp). Gradients equal
eager's exactly, ties included (ReLU zeros: torch routes a window's
gradient to one element, which only the saved indices reproduce)."""
import copy

import pytest
import torch
import torch.nn as nn

import kiln
from conftest import TEST_DEVICE, kiln_logs

# Decompositions run where the graph's device has kiln kernels: LLVM's for
# CPU tensors, NVRTC's under KILN_TEST_DEVICE=cuda.
pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no decomposition of CPU graphs")


def _stem(pool):
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), pool, nn.Conv2d(4, 2, 1))


@pytest.mark.parametrize("pool, channels_last", [
    (nn.MaxPool2d(3, 2, 1), False),
    (nn.MaxPool2d(3, 2, 1), True),
    (nn.MaxPool2d(2), False),
    (nn.MaxPool2d((2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1), ceil_mode=True), False),
])
def test_training_pools_through_saved_indices(pool, channels_last, capfd):
    torch.manual_seed(0)
    model = _stem(pool)
    x = torch.randn(2, 3, 9, 10)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    twin = copy.deepcopy(model)
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(twin)(x)
    log = capfd.readouterr().err
    assert "kiln._pooling.max_pool2d.kiln_vjp" in log and "extern_vjp(F.max_pool2d" not in log, log
    want = model(x)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)
    got.square().sum().backward()
    want.square().sum().backward()
    for (label, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=lambda m: f"{label}: {m}")


def test_ties_get_torchs_single_gradient():
    # All-zero windows (a ReLU of negatives): eager gives each window's
    # gradient to one element.
    def fn(x):
        return nn.functional.max_pool2d(x.relu(), 2) * 3

    x = -torch.rand(1, 2, 4, 4)
    x[0, 0, 0, 0] = 1.0
    leaf = x.clone().requires_grad_(True)
    kiln.reset()
    got_grad, = torch.autograd.grad(kiln.compile(fn)(leaf).sum(), leaf)
    leaf = x.clone().requires_grad_(True)
    want_grad, = torch.autograd.grad(fn(leaf).sum(), leaf)
    torch.testing.assert_close(got_grad, want_grad)


def test_inference_keeps_torchs_call(capfd):
    model = _stem(nn.MaxPool2d(2)).eval()
    x = torch.randn(2, 3, 8, 8)
    kiln.reset()
    capfd.readouterr()
    with torch.no_grad(), kiln_logs("prims"):
        got = kiln.compile(model)(x)
    log = capfd.readouterr().err
    assert "extern F.max_pool2d" in log and "kiln._pooling" not in log, log
    with torch.no_grad():
        torch.testing.assert_close(got, model(x))
