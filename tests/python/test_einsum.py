"""torch.einsum of one or two operands decomposes into sums, permutes and one
batched matmul (Note [Einsum as a matmul] in prims/decompose_einsum.cpp):
values, result layouts and gradients as eager's; other forms stay torch's
call."""
import pytest
import torch

import kiln
from conftest import TEST_DEVICE, kiln_logs

# Decompositions run where the graph's device has kiln kernels: LLVM's for
# CPU tensors, NVRTC's under KILN_TEST_DEVICE=cuda.
pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no decomposition of CPU graphs")

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 5), (2, 3, 5, 8)]),
    ("bcxd,bcyd->bcxy", [(2, 3, 4, 6), (2, 3, 5, 6)]),  # Longformer's sliding chunks
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("i,j->ij", [(3,), (4,)]),  # outer product: nothing contracted
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ik,kj", [(3, 4), (4, 5)]),  # implicit output
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("bn,anm,bm->ba", None),  # three operands: torch's call
    ("ij,jk->ki", [(3, 4), (4, 5)]),  # a transposed result
    ("bij->bji", [(2, 3, 4)]),
    ("bij->b", [(2, 3, 4)]),
    ("ij,bjk->bik", [(1, 4), (2, 4, 5)]),
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),  # a batch dim of size 1 broadcasts
    ("abc,cd->abd", [(2, 3, 4), (4, 6)]),
    ("ijk,jk->i", [(3, 4, 5), (4, 5)]),  # two contracted dims
    ("ij,jk->ikj", [(3, 4), (4, 5)]),  # a label of both operands kept: a batch dim, last
    ("iij->j", None),  # a diagonal: torch's call
]


def _operands(equation, shapes):
    if shapes is None:
        shapes = {"bn,anm,bm->ba": [(2, 3), (4, 3, 5), (2, 5)], "iij->j": [(3, 3, 4)]}[equation]
    return [torch.randn(s, requires_grad=True) for s in shapes]


@pytest.mark.parametrize("equation, shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_equals_eager(equation, shapes, capfd):
    torch.manual_seed(0)
    operands = _operands(equation, shapes)

    def fn(*xs):
        return torch.einsum(equation, *xs) * 2

    want = fn(*operands)
    wants = torch.autograd.grad(want.square().sum(), operands)
    kiln.reset()
    capfd.readouterr()
    with kiln_logs("prims"):
        got = kiln.compile(fn)(*operands)
    extern = "extern torch.einsum" in capfd.readouterr().err
    grads = torch.autograd.grad(got.square().sum(), operands)
    assert extern == (shapes is None), f"extern: {extern}"  # (None: kept as torch's call)
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, wants):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_operands_as_one_list_and_a_transposed_view():
    # einsum(eq, [a, b]) and a single-operand permutation, whose result is a
    # view of its operand in torch: writes through it reach the operand.
    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def fn(a, b):
        t = torch.einsum("ij->ji", a)
        return torch.einsum("ij,jk->ik", [a, b]), t.sum(0)

    got = kiln.compile(fn)(a, b)
    want = fn(a, b)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_autocast_contracts_in_the_lower_precision():
    a, b = torch.randn(2, 3, 8), torch.randn(2, 8, 4)

    def fn(a, b):
        with torch.autocast(a.device.type, dtype=torch.bfloat16):
            return torch.einsum("bij,bjk->bik", a, b)

    got = kiln.compile(fn)(a, b)
    want = fn(a, b)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
