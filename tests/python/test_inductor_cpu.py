"""backend="inductor" with kiln.config.experimental_cpu_kernels: graphs are
decomposed into prims, pointwise groups run as LLVM-compiled CPU kernels
(extern nodes of the prim graph), the rest through torch; training graphs
go through kiln's autograd with kernels in both the forward and the
backward. Compared with eager."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln

pytestmark = pytest.mark.skipif(not kiln._C.cpu_kernels_available(),
                                reason="this build has no LLVM code generation")


@pytest.fixture(autouse=True)
def cpu_kernels():
    kiln.config.experimental_cpu_kernels = True
    yield
    kiln.config.experimental_cpu_kernels = False


def test_gelu_chain_is_one_kernel():
    def f(x, y):
        return F.gelu(x * y + 1) * 0.5

    compiled = kiln.compile(f, backend="inductor")
    for shape in ((1000, 1003), (7,), (3, 1)):
        x, y = torch.randn(*shape), torch.randn(*shape)
        torch.testing.assert_close(compiled(x, y), f(x, y))
    assert kiln.stats()["kernels"] >= 1


def test_broadcast_transposed_and_mixed_dtypes():
    def f(a, b, n):
        return torch.where(a > 0, a * 2, b.t() - n) + 1

    compiled = kiln.compile(f, backend="inductor")
    a = torch.randn(4, 5)
    b = torch.randn(5, 4)
    n = torch.arange(5)
    torch.testing.assert_close(compiled(a, b, n), f(a, b, n))
    assert kiln.stats()["kernels"] >= 1


def test_mlp_inference_and_training_match_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="inductor")
    x = torch.randn(6, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), reference(x))
    for _ in range(2):
        compiled(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    s = kiln.stats()
    assert s["autograd_graphs"] == 1 and s["kernels"] >= 2, s


def test_off_by_default_inductor_replays_eagerly():
    kiln.config.experimental_cpu_kernels = False
    compiled = kiln.compile(lambda x: x.exp() + 1, backend="inductor")
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x.exp() + 1)
    assert kiln.stats()["kernels"] == 0 and kiln.stats()["prim_graphs"] == 0
