"""Nearest upsampling by integer factors becomes a broadcast copy that kiln's
kernels take, with a summing gradient (Note [Nearest upsampling as a
broadcast] in prims/decompose_shape.cpp); every other F.interpolate stays
torch's call. Outputs and input gradients equal eager's exactly (both are
copies and sums of the same elements)."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import TEST_DEVICE, kiln_logs

# Decompositions run where the graph's device has kiln kernels: LLVM's for
# CPU tensors, NVRTC's under KILN_TEST_DEVICE=cuda.
pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no decomposition of CPU graphs")


def _run(fn, x, capfd):
    """(kiln's output, its input gradient, whether F.interpolate stayed an
    extern), then eager's output and gradient."""
    kiln.reset()
    capfd.readouterr()
    leaf = x.detach().requires_grad_(True)
    with kiln_logs("prims"):
        got = kiln.compile(fn)(leaf)
    extern = "extern F.interpolate" in capfd.readouterr().err
    grad_out = torch.randn_like(got)
    got_grad, = torch.autograd.grad(got, leaf, grad_out)
    leaf = x.detach().requires_grad_(True)
    want = fn(leaf)
    want_grad, = torch.autograd.grad(want, leaf, grad_out)
    return got, got_grad, extern, want, want_grad


@pytest.mark.parametrize("shape, kwargs", [
    ((2, 3, 5, 7), dict(scale_factor=2.0)),
    ((2, 3, 5, 7), dict(scale_factor=(3, 2))),
    ((2, 3, 5, 7), dict(size=(15, 14))),
    ((2, 3, 4), dict(scale_factor=3, mode="nearest-exact")),
    ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="nearest")),
    ((1, 2, 3, 4), dict(scale_factor=(1.0, 3.0), recompute_scale_factor=True)),
])
def test_integer_factors_are_a_broadcast_in_kernels(shape, kwargs, capfd):
    def fn(x):
        return F.interpolate(x * 2, **kwargs).tanh()

    torch.manual_seed(0)
    got, got_grad, extern, want, want_grad = _run(fn, torch.randn(shape), capfd)
    assert not extern, "F.interpolate stayed an extern"
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


@pytest.mark.parametrize("shape, kwargs, why", [
    # torch's float index arithmetic gives input 40 for output 41 * 41: not a
    # broadcast (checked below).
    ((1, 1, 64), dict(scale_factor=41.0), "index arithmetic"),
    ((1, 1, 64), dict(size=64 * 41), "index arithmetic"),
    ((2, 3, 4, 6), dict(scale_factor=1.5), "not a multiple"),
    ((2, 3, 4, 6), dict(scale_factor=2.0, mode="bilinear"), "another mode"),
])
def test_other_calls_stay_torch_and_equal_eager(shape, kwargs, why, capfd):
    def fn(x):
        return F.interpolate(x * 2, **kwargs).tanh()

    torch.manual_seed(0)
    got, got_grad, extern, want, want_grad = _run(fn, torch.randn(shape), capfd)
    assert extern, why
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)
    if why == "index arithmetic":
        x = torch.arange(64.0).view(1, 1, 64)
        assert not torch.equal(F.interpolate(x, **kwargs), x.repeat_interleave(41, -1))


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_other_input_layouts_give_torchs_result_layout(layout, capfd):
    # An NHWC input gives a channels-last result; a transposed one (a
    # diffusers VAE's attention output reshaped back to NCHW) as torch lays
    # it out.
    def fn(x):
        return F.interpolate(x * 2, scale_factor=2.0) * 3

    x = torch.randn(2, 3, 4, 5)
    x = x.to(memory_format=torch.channels_last) if layout == "channels_last" else x.transpose(2, 3)
    got, got_grad, extern, want, want_grad = _run(fn, x, capfd)
    assert not extern
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)
