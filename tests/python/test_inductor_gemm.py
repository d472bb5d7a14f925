"""Matrix products under backend="inductor" on the CPU (Note [GEMM nodes]):
with kiln.config.cpu_matmul = "kiln", every float32/float64 matmul node of
the forward and backward graphs runs kiln's generated GEMM kernel. Results
and gradients are compared with eager torch within a tolerance scaled by
the reduction length and |A| @ |B| (torch's reference BLAS rounds in
another order), and the counters say which path ran."""
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln

pytestmark = pytest.mark.skipif(not kiln._C.cpu_kernels_available(),
                                reason="this build has no LLVM code generation")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(autouse=True)
def generated_gemm():
    saved = kiln.config.cpu_kernels, kiln.config.cpu_matmul
    kiln.config.cpu_kernels = True
    kiln.config.cpu_matmul = "kiln"
    yield
    kiln.config.cpu_kernels, kiln.config.cpu_matmul = saved


def close(actual, expected, k):
    """actual within k-scaled rounding of expected (both tensors)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    eps = torch.finfo(expected.dtype).eps
    tol = max(1e-5 if expected.dtype == torch.float32 else 1e-12, 4 * max(k, 1) * eps)
    scale = expected.abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * max(scale, 1.0))


def mm(a, b):
    return torch.mm(a, b)


def bmm(a, b):
    return torch.bmm(a, b)


def matmul(a, b):
    return torch.matmul(a, b)


def linear(x, w, bias):
    return F.linear(x, w, bias)


def check(fn, *args, k, gemms=1):
    compiled = kiln.compile(fn, backend="inductor")
    expected = fn(*args)
    actual = compiled(*args)
    close(actual, expected, k)
    s = kiln.stats()
    assert s["gemm_kernels"] >= gemms and s["gemm_calls"] >= gemms, s
    return s


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 5), (33, 17, 65), (128, 32, 96), (5, 1, 9), (300, 257, 40)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mm_and_matmul_operator(m, k, n, dtype):
    a = torch.randn(m, k, dtype=dtype)
    b = torch.randn(k, n, dtype=dtype)
    check(mm, a, b, k=k)
    kiln.reset()
    check(lambda x, y: (x @ y) * 2, a, b, k=k)


@pytest.mark.parametrize("layout", ["at", "bt", "both"])
def test_transposed_operands_are_read_in_place(layout):
    a = torch.randn(40, 24) if layout == "bt" else torch.randn(24, 40).t()
    b = torch.randn(24, 17) if layout == "at" else torch.randn(17, 24).t()
    check(lambda x, y: torch.matmul(x, y), a, b, k=24)


def test_empty_products():
    # K = 0 gives zeros; M = 0 or N = 0 an empty result.
    s = check(mm, torch.randn(4, 0), torch.randn(0, 6), k=0)
    check(mm, torch.randn(0, 3), torch.randn(3, 6), k=3, gemms=0)
    check(mm, torch.randn(4, 3), torch.randn(3, 0), k=3, gemms=0)
    assert s["gemm_calls"] >= 1


def test_bmm_and_broadcast_batches():
    check(bmm, torch.randn(16, 16, 16), torch.randn(16, 16, 16), k=16)
    check(matmul, torch.randn(8, 16, 32), torch.randn(32, 96), k=32)
    check(matmul, torch.randn(3, 1, 5, 7), torch.randn(4, 7, 9), k=7)
    check(matmul, torch.randn(5, 7), torch.randn(3, 7, 9, dtype=torch.float32), k=7)
    # Vectors: torch.matmul's 1-d cases around the product.
    check(matmul, torch.randn(6, 7), torch.randn(7), k=7)
    check(matmul, torch.randn(7), torch.randn(2, 7, 5), k=7)


def test_attention_products_from_permuted_views():
    def attend(x):
        b, t, c = x.shape
        q = x.view(b, t, 2, c // 2).transpose(1, 2)
        att = (q @ q.transpose(-2, -1)).softmax(-1)
        return (att @ q).transpose(1, 2).reshape(b, t, c)

    check(attend, torch.randn(8, 16, 32), k=16, gemms=2)


def test_linear_addmm_and_baddbmm_like_forms():
    x, w, bias = torch.randn(10, 33), torch.randn(21, 33), torch.randn(21)
    check(linear, x, w, bias, k=33)
    check(lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0), torch.randn(10, 21), x, w.t(), k=33)
    kiln.reset()
    # Bloom's attention scores: a broadcast bias plus a scaled batched product.
    bias, q, k = torch.randn(6, 1, 9), torch.randn(6, 9, 8), torch.randn(6, 8, 9)
    check(lambda i, a, b: torch.baddbmm(i, a, b, beta=1.0, alpha=0.25), bias, q, k, k=8)
    kiln.reset()
    check(lambda i, a, b: i.baddbmm(a, b, beta=2.0), torch.randn(6, 9, 9), q, k, k=8)


def test_baddbmm_gradients_match_eager():
    bias = torch.randn(6, 1, 9, requires_grad=True)
    q, k = torch.randn(6, 9, 8, requires_grad=True), torch.randn(6, 8, 9, requires_grad=True)

    def scores(i, a, b):
        return torch.baddbmm(i, a, b, alpha=0.5).softmax(-1).sum()

    scores(bias, q, k).backward()
    want = [t.grad.clone() for t in (bias, q, k)]
    for t in (bias, q, k):
        t.grad = None
    kiln.compile(scores, backend="inductor")(bias, q, k).backward()
    for t, expected in zip((bias, q, k), want):
        close(t.grad, expected, 9)
    assert kiln.stats()["prim_fallbacks"] == 0


def test_modules_forward_and_gradients_match_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 96), nn.GELU(), nn.Linear(96, 32), nn.ReLU(), nn.Linear(32, 7))
    reference = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="inductor")
    x = torch.randn(8, 16, 32)
    with torch.no_grad():
        close(compiled(x), reference(x), k=96)
    for _ in range(2):
        compiled(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        # dW sums over 128 rows: k = 128.
        close(p.grad, q.grad, k=128)
    s = kiln.stats()
    # 3 forward products; 5 backward (dW for each layer, dX for the last two).
    assert s["gemm_kernels"] >= 8 and s["gemm_calls"] >= 8, s


def test_function_gradients_through_bmm_and_matmul():
    def f(a, b, c):
        return (torch.bmm(a, b) @ c).tanh().sum()

    a = torch.randn(4, 9, 5, requires_grad=True)
    b = torch.randn(4, 5, 11, requires_grad=True)
    c = torch.randn(11, 3, dtype=torch.float32, requires_grad=True)
    compiled = kiln.compile(f, backend="inductor")
    eager_grads = torch.autograd.grad(f(a, b, c), (a, b, c))
    kiln_grads = torch.autograd.grad(compiled(a, b, c), (a, b, c))
    for g, e in zip(kiln_grads, eager_grads):
        close(g, e, k=11)
    assert kiln.stats()["gemm_kernels"] >= 4


def test_gpt_training_step_matches_eager():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from gpt import GPT, batch, dataset
    data, vocab = dataset()
    torch.manual_seed(0)
    model = GPT(vocab)
    reference = copy.deepcopy(model)
    x, y = batch(data, torch.Generator().manual_seed(1))
    compiled = kiln.compile(model, backend="inductor")
    loss = compiled(x, y)
    loss.backward()
    expected = reference(x, y)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    assert kiln.stats()["gemm_calls"] >= 10


def test_aten_policy_makes_no_gemm_nodes():
    kiln.config.cpu_matmul = "aten"
    a, b = torch.randn(5, 6), torch.randn(6, 7)
    compiled = kiln.compile(mm, backend="inductor")
    close(compiled(a, b), torch.mm(a, b), k=6)
    s = kiln.stats()
    assert s["gemm_kernels"] == 0 and s["gemm_calls"] == 0, s


def test_auto_policy_times_each_spec_once():
    kiln.config.cpu_matmul = "auto"
    kiln._C.clear_matmul_choices()
    a, b = torch.randn(64, 48), torch.randn(48, 40)
    compiled = kiln.compile(lambda x, y: x @ y, backend="inductor")
    for _ in range(3):
        close(compiled(a, b), a @ b, k=48)
    s = kiln.stats()
    assert s["gemm_kernels"] == 1 and s["gemm_measured"] == 1, s
    # Every call after the timed one went to the winner.
    assert s["gemm_calls"] + s["gemm_aten_calls"] == 2, s


def test_auto_policy_logs_its_choice():
    code = (
        "import torch, kiln\n"
        "kiln.config.cpu_matmul = 'auto'\n"
        "f = kiln.compile(lambda x, y: x @ y, backend='inductor')\n"
        "a, b = torch.randn(128, 32), torch.randn(32, 96)\n"
        "assert torch.allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)\n"
    )
    env = dict(os.environ, KILN_LOGS="kernels", PYTHONPATH=os.path.join(ROOT, "python"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "gemm float32 m128 n96 k32" in done.stderr and "from now on" in done.stderr, done.stderr


def test_another_layout_compiles_another_kernel():
    # Strides are guarded: a transposed operand recompiles the graph, and
    # the new GEMM node reads it in place.
    a, b = torch.randn(6, 5), torch.randn(5, 4)
    compiled = kiln.compile(mm, backend="inductor")
    close(compiled(a, b), a @ b, k=5)
    at = torch.randn(5, 6).t()
    close(compiled(at, b), at @ b, k=5)
    s = kiln.stats()
    assert s["gemm_kernels"] == 2 and s["gemm_calls"] == 2 and s["gemm_aten_calls"] == 0, s


def test_config_values_are_checked():
    with pytest.raises(ValueError):
        kiln.config.cpu_matmul = "blas"
    with pytest.raises(TypeError):
        kiln.config.cpu_matmul = 1
    kiln.config.cpu_matmul = "auto"
    assert kiln.config.cpu_matmul == "auto"


def test_autocast_around_the_call_compiles_a_bf16_product():
    # Autocast is guarded: the call under it traces again, with autocast's
    # casts as nodes, and its bf16 product is torch's (the kernels are f32/f64).
    a, b = torch.randn(8, 12), torch.randn(12, 5)
    compiled = kiln.compile(mm, backend="inductor")
    close(compiled(a, b), a @ b, k=12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = compiled(a, b), mm(a, b)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    close(compiled(a, b), a @ b, k=12)
    s = kiln.stats()
    assert s["recompiles"] == 1 and s["cache_hits"] == 1, s
    assert s["gemm_calls"] == 2 and s["gemm_aten_calls"] == 0, s
