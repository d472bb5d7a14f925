"""torch.flip decomposes into index_selects at reversed positions, and its
gradient is the same reversal (decompose_Flip in prims/decompose_shape.cpp,
is_reversal in autograd/derivatives_index.cpp): values and gradients as
eager's, no extern and no scatter."""
import pytest
import torch

import kiln
from conftest import TEST_DEVICE, kiln_logs

# Decompositions run where the graph's device has kiln kernels: LLVM's for
# CPU tensors, NVRTC's under KILN_TEST_DEVICE=cuda.
pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no decomposition of CPU graphs")


@pytest.mark.parametrize("dims", [(0,), (1, 2), (-1,), (0, 1, 2)])
def test_flip_and_its_gradient_equal_eager(dims, capfd):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, requires_grad=True)

    def fn(x):
        return torch.flip(x * 2, dims).sin() + x.flip(*dims)

    want = fn(x)
    want_grad, = torch.autograd.grad(want.square().sum(), x)
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(fn)(x)
    log = capfd.readouterr().err
    got_grad, = torch.autograd.grad(got.square().sum(), x)
    assert "extern Tensor.flip" not in log and "extern torch.flip" not in log, log
    assert "scatter(" not in log.split("backward graph")[1], "the gradient scatters"
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


def test_flip_of_a_transposed_tensor_stays_torchs_call(capfd):
    x = torch.randn(4, 3).t()
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(lambda x: x.flip(0) * 2)(x)
    assert "extern Tensor.flip" in capfd.readouterr().err
    want = x.flip(0) * 2
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)
