"""backend="inductor" with kiln.config.cuda_kernels on CUDA
tensors: graphs on one CUDA device are decomposed into prims, and their
fused pointwise and reduction groups run as NVRTC-compiled CUDA kernels
launched on torch's current stream; the rest runs through torch. Compared
with eager. Needs a GPU: skipped where torch sees none."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import train_gpt_under_autocast, kiln_logs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(autouse=True)
def cuda_kernels():
    assert kiln._C.cuda_kernels_available(), "a GPU but no NVRTC or CUDA driver for kiln"
    kiln.config.cuda_kernels = True
    yield


def _check(fn, *args, rtol=1e-4, atol=1e-5, kernels=1):
    """Compiles fn through inductor, compares it with eager on args, and
    returns kiln's counters."""
    compiled = kiln.compile(fn, backend="inductor")
    got = compiled(*args)
    want = fn(*args)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    s = kiln.stats()
    assert s["kernels"] >= kernels, s
    return s


def test_gelu_chain_is_one_kernel_vector_and_scalar():
    def f(x, y):
        return F.gelu(x * y + 1) * 0.5

    # 4096: vector entries; 1003 columns and an offset view: scalar.
    for shape in ((64, 4096), (37, 1003), (5,)):
        x = torch.randn(*shape, device="cuda")
        y = torch.randn(*shape, device="cuda")
        kiln.reset()
        s = _check(f, x, y)
        assert s["kernels"] == 1, s
    big = torch.randn(1 << 20, device="cuda")
    kiln.reset()
    _check(f, big[1:], big[:-1])


def test_broadcast_transposed_and_mixed_dtypes():
    def f(a, b, n):
        return torch.where(a > 0, a * 2, b.t() - n) + 1

    a = torch.randn(40, 50, device="cuda")
    b = torch.randn(50, 40, device="cuda")
    n = torch.arange(50, device="cuda")
    _check(f, a, b, n)

    def g(x, row, col):
        return torch.exp(x - row) * col

    _check(g, torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda"),
           torch.randn(64, 1, device="cuda"))


def test_integer_bool_and_rounding_ops():
    def f(i, x):
        r = torch.round(x * 3.5)
        return i * 3 - i.abs(), r, torch.floor(x) + torch.ceil(x) + torch.trunc(x), (x > 0) & (i > 0)

    i = torch.randint(-50, 50, (33, 65), device="cuda", dtype=torch.int32)
    x = torch.randn(33, 65, device="cuda")
    x[0, :4] = torch.tensor([0.5, 1.5, 2.5, -0.5]) / 3.5
    _check(f, i, x, rtol=0, atol=0)


def test_maximum_minimum_propagate_nan():
    def f(x, y):
        return torch.maximum(x, y), torch.minimum(x, y), x.amax(1), x.amin(0)

    x = torch.randn(8, 9, device="cuda")
    y = torch.randn(8, 9, device="cuda")
    x[1, 2] = float("nan")
    y[3, 4] = float("nan")
    _check(f, x, y, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs(dtype):
    def f(x, y):
        return torch.sigmoid(x) * y + x.float().sum(-1, keepdim=True).to(dtype)

    x = torch.randn(32, 96, device="cuda", dtype=dtype)
    y = torch.randn(32, 96, device="cuda", dtype=dtype)
    _check(f, x, y, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("op", ["sum", "prod", "amax", "amin", "mean"])
@pytest.mark.parametrize("dim", [0, -1, None])
@pytest.mark.parametrize("shape", [(33, 47), (3, 70001), (2000, 5)])
def test_reductions_inner_outer_and_all(op, dim, shape):
    torch.manual_seed(0)
    x = torch.rand(*shape, device="cuda") + 0.5
    if op == "prod":
        x = 0.5 + (x - 1) * 0.01  # x * 2 near 1: products stay finite

    def f(x):
        fn = getattr(torch, op)
        if dim is None:
            return fn(x * 2)
        return fn(x * 2, dim)

    _check(f, x, rtol=1e-3 if op == "prod" else 1e-4, atol=1e-4)


def test_argmax_and_argmin_are_kernels():
    """argmax/argmin compile to kernels (an Index expression over the
    reduced dims): first occurrence of ties, first NaN, as eager."""
    torch.manual_seed(0)
    x = torch.randint(0, 5, (64, 1000), device="cuda").float()
    x[3, 17] = float("nan")
    x[5, 900] = float("nan")

    def f(x):
        return x.argmax(1), x.argmin(0), (x * 2).argmax(), x[:, :500].argmin(1, keepdim=True)

    got = kiln.compile(f, backend="inductor")(x)
    for g, w in zip(got, f(x)):
        assert torch.equal(g, w)
    assert kiln.stats()["kernels"] >= 3, kiln.stats()


def test_few_long_rows_split_across_the_gpu():
    """Note [Two-step outer reductions]: a full reduction of 4M floats, and
    3 rows of 256K, become partial rows and a sum of the partials (two
    kernels each), equal to eager's up to rounding."""
    torch.manual_seed(0)
    x = torch.rand(1 << 22, device="cuda")
    y = torch.rand(3, 1 << 18, device="cuda")

    def f(x, y):
        return (x.sum(), x.amax(), (x * 2).mean(), y.sum(-1), y.sum(), y.amax((0, 1), keepdim=True))

    s = _check(f, x, y, rtol=1e-4, atol=1e-2, kernels=2)
    assert s["cuda_kernels_compiled"] >= 2, s


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_integer_reductions_are_exact(dtype):
    x = torch.randint(-4, 5, (65, 300), device="cuda").to(dtype)

    def f(x):
        return x.sum(1), x.sum(0), x.amax(1) if dtype != torch.bool else x.any(1)

    _check(f, x, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(1, 1), (7, 7), (64, 100), (128, 4096), (4, 20000), (3, 1000003)])
def test_softmax_log_softmax_layer_norm(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda")
    w = torch.randn(shape[-1], device="cuda")
    b = torch.randn(shape[-1], device="cuda")

    def f(x, w, b):
        s = torch.softmax(x, -1)
        ls = F.log_softmax(x, -1)
        ln = F.layer_norm(s, (x.shape[-1],), w, b)
        return s, ls, ln

    with torch.no_grad():
        _check(f, x, w, b, rtol=2e-4, atol=1e-5)


def test_softmax_over_a_middle_dim_and_var_mean():
    x = torch.randn(6, 300, 9, device="cuda")

    def f(x):
        return torch.softmax(x, 1), torch.var_mean(x, dim=(0, 2), correction=1)

    _check(f, x, rtol=1e-4, atol=1e-5)


def test_mlp_training_step_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 10)).cuda()
    reference = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="inductor")
    x = torch.randn(32, 64, device="cuda")
    target = torch.randint(0, 10, (32,), device="cuda")
    for _ in range(2):
        F.cross_entropy(compiled(x), target).backward()
        F.cross_entropy(reference(x), target).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5)
    s = kiln.stats()
    assert s["autograd_graphs"] == 1 and s["kernels"] >= 2, s


def test_identical_kernels_compile_once():
    def f(x):
        return torch.softmax(x, -1) * 2

    x = torch.randn(16, 128, device="cuda")
    _check(f, x)
    compiled_before = kiln.stats()["kernels_compiled"]
    kiln.reset()
    _check(lambda x: torch.softmax(x, -1) * 2, x)
    s = kiln.stats()
    assert s["kernels_compiled"] == 0 and s["kernel_cache_hits_memory"] >= 1, (compiled_before, s)


def test_runs_on_the_current_stream():
    def f(x):
        return (x * 2).sum(-1)

    compiled = kiln.compile(f, backend="inductor")
    stream = torch.cuda.Stream()
    x = torch.randn(256, 1024, device="cuda")
    with torch.cuda.stream(stream):
        torch.cuda._sleep(1_000_000)  # keeps the stream busy: a launch elsewhere would finish first
        y = torch.randn(256, 1024, device="cuda").copy_(x)
        got = compiled(y)
    stream.synchronize()
    # A row sum of 1024 in another order than torch's: rounding differs (a launch
    # on the wrong stream would read the copy unfinished: far off).
    torch.testing.assert_close(got, f(x), rtol=1e-4, atol=1e-4)


def _softmax_layer_norm(x, w, b):
    return F.layer_norm(torch.softmax(x, -1), (x.shape[-1],), w, b)


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_max_autotune_times_candidates_once_and_matches_eager(mode, capfd):
    # A shape of its own per mode: the process's choice cache would
    # otherwise answer from an earlier test.
    cols = 3072 if mode == "max-autotune" else 2560
    torch.manual_seed(0)
    x = torch.randn(96, cols, device="cuda")
    w = torch.randn(cols, device="cuda")
    b = torch.randn(cols, device="cuda")
    want = _softmax_layer_norm(x, w, b)
    kiln.reset()
    with kiln_logs("autotune"):
        compiled = kiln.compile(_softmax_layer_norm, backend="inductor", mode=mode)
        with torch.no_grad():
            first = compiled(x, w, b)
            second = compiled(x, w, b)
    torch.testing.assert_close(first, want, rtol=2e-4, atol=1e-5)
    torch.testing.assert_close(second, want, rtol=2e-4, atol=1e-5)
    s = kiln.stats()
    assert s["kernels"] == 1 and s["kernels_autotuned"] == 1, s
    log = capfd.readouterr().err
    assert "[kiln:autotune]" in log and "(default)" in log, log
    assert log.count("tpr=") >= 4 and log.count("  * ") == 1, log  # every candidate, one winner
    assert "failed" not in log, log
    # A new compile of the same program reuses the choice: nothing timed.
    kiln.reset()
    again = kiln.compile(_softmax_layer_norm, backend="inductor", mode=mode)
    with torch.no_grad():
        torch.testing.assert_close(again(x, w, b), want, rtol=2e-4, atol=1e-5)
    s = kiln.stats()
    assert s["kernels"] == 1 and s["kernels_autotuned"] == 0, s


def test_max_autotune_over_several_kernels_and_training():
    # Pointwise, reduction and backward kernels each tune at their first
    # launch; results stay eager's.
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(48, 200), nn.GELU(), nn.LayerNorm(200), nn.Linear(200, 7)).cuda()
    reference = copy.deepcopy(model)
    kiln.reset()
    compiled = kiln.compile(model, backend="inductor", mode="max-autotune")
    x = torch.randn(40, 48, device="cuda")
    target = torch.randint(0, 7, (40,), device="cuda")
    for _ in range(2):
        F.cross_entropy(compiled(x), target).backward()
        F.cross_entropy(reference(x), target).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5)
    s = kiln.stats()
    assert s["kernels"] >= 2 and s["kernels_autotuned"] >= 1, s


def test_default_mode_times_nothing():
    x = torch.randn(24, 1536, device="cuda")
    w = torch.randn(1536, device="cuda")
    b = torch.randn(1536, device="cuda")
    kiln.reset()
    with torch.no_grad():
        s = _check(_softmax_layer_norm, x, w, b, rtol=2e-4, atol=1e-5)
    assert s["kernels_autotuned"] == 0, s


@pytest.mark.parametrize("cols", [31, 1000, 4096, 5000])
def test_every_forced_launch_candidate_matches_eager(cols):
    # What benchmarks/inductor_cuda.py --sweep times: each candidate forced
    # in turn, on the GPU (the host emulation checks them without one).
    torch.manual_seed(2)
    x = torch.randn(33, cols, device="cuda")
    w = torch.randn(cols, device="cuda")
    b = torch.randn(cols, device="cuda")
    want = _softmax_layer_norm(x, w, b)
    index, count = 0, 1
    try:
        while index < count:
            kiln._C.force_cuda_launch_candidate(index)
            kiln.reset()
            compiled = kiln.compile(_softmax_layer_norm, backend="inductor")
            with torch.no_grad():
                got = compiled(x, w, b)
            forced = kiln._C.forced_cuda_launches()
            assert len(forced) == 1 and forced[0][1] == index, forced
            count = forced[0][2]
            torch.testing.assert_close(got, want, rtol=2e-4, atol=1e-5, msg=lambda m: f"{forced[0][3]}: {m}")
            index += 1
    finally:
        kiln._C.force_cuda_launch_candidate(-1)
    assert count >= 2 or cols == 31


def test_gpt_training_step_under_bf16_autocast_matches_eager():
    # Autocast on around the call (guarded): its casts are graph nodes, the
    # bf16 products go to torch, the rest runs as CUDA kernels.
    s = train_gpt_under_autocast("cuda", "inductor", loss_tol=2e-3, grad_tol=3e-2)
    assert s["autograd_graphs"] == 1 and s["prim_fallbacks"] == 0 and s["kernels"] > 0, s


@pytest.mark.parametrize("mask", ["causal", "none", "padding"])
def test_attention_stays_one_torch_call_with_gradients(mask, capfd):
    # Note [Attention on the GPU]: no L x S score matrix is decomposed on the
    # GPU; the projection around the call still fuses, gradients match eager.
    # A padding mask broadcast over queries is made contiguous for torch's
    # fused kernels. float32 operands run torch's memory-efficient kernel:
    # with a mask the graph calls it itself (Note [Fused attention
    # kernels]); without one the call stays torch's.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, device="cuda", requires_grad=True) for _ in range(3))
    keep = torch.arange(64, device="cuda") < 50

    def f(q, k, v):
        kwargs = {"is_causal": True} if mask == "causal" else {}
        if mask == "padding":
            kwargs["attn_mask"] = keep[None, None, None, :].expand(2, 1, 64, 64)
        return F.scaled_dot_product_attention(q * 0.5, k, v, **kwargs).relu() + 1

    want = f(q, k, v)
    want.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    kiln.reset()
    compiled = kiln.compile(f, backend="inductor")
    with kiln_logs("prims"):
        got = compiled(q, k, v)
    log = capfd.readouterr().err
    called = "extern kiln._attention.attention" if mask == "padding" else "extern F.scaled_dot_product_attention"
    assert called in log, log
    got.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for t, g in zip((q, k, v), grads):
        torch.testing.assert_close(t.grad, g, rtol=1e-4, atol=1e-4)
    assert kiln.stats()["kernels"] >= 1


_BACKENDS = {"cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
             "flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION}


@pytest.mark.parametrize("backend,mask", [
    ("cudnn", "causal"), ("cudnn", "none"), ("cudnn", "bool_padding"), ("cudnn", "bool_full"), ("cudnn", "float"),
    ("cudnn", "gqa"), ("flash", "causal"), ("flash", "none")])
def test_attention_calls_torchs_fused_kernel_and_its_backward(backend, mask, capfd):
    # Note [Fused attention kernels]: 16-bit attention that torch runs with
    # cuDNN or flash attention calls that kernel from the graph, a boolean
    # mask converted in the graph; the gradient calls the backward kernel
    # with the forward's saved outputs (no extern_vjp rerunning the
    # forward). Values and gradients as eager's under the same backend.
    torch.manual_seed(0)
    heads_kv = 2 if mask == "gqa" else 4
    q = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(2, heads_kv, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    keep = torch.arange(64, device="cuda") < 50
    full = torch.rand(2, 1, 64, 64, device="cuda") < 0.8
    bias = torch.randn(2, 1, 64, 64, device="cuda", dtype=torch.bfloat16)

    def f(q, k, v):
        kwargs = {"is_causal": True} if mask in ("causal", "gqa") else {}
        if mask == "bool_padding":
            kwargs["attn_mask"] = keep[None, None, None, :].expand(2, 1, 64, 64)
        elif mask == "bool_full":
            kwargs["attn_mask"] = full
        elif mask == "float":
            kwargs["attn_mask"] = bias
        elif mask == "gqa":
            kwargs["enable_gqa"] = True
        return F.scaled_dot_product_attention(q * 0.5, k, v, **kwargs).relu() + 1

    with torch.nn.attention.sdpa_kernel(_BACKENDS[backend]):
        want = f(q, k, v)
        wants = torch.autograd.grad(want.float().sum(), (q, k, v))
        kiln.reset()
        compiled = kiln.compile(f, backend="inductor")
        with kiln_logs("prims"):
            got = compiled(q, k, v)
            grads = torch.autograd.grad(got.float().sum(), (q, k, v))
    log = capfd.readouterr().err
    assert "kiln._attention.attention" in log and "kiln._attention.attention.kiln_vjp" in log, log
    assert "F.scaled_dot_product_attention" not in log and "extern_vjp(" not in log, log
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
    assert kiln.stats()["autograd_graphs"] == 1 and kiln.stats()["prim_fallbacks"] == 0, kiln.stats()


@pytest.mark.parametrize("case", ["learned_bias", "learned_bias_over_heads", "learned_bias_unaligned_keys",
                                  "float32_padding_mask"])
def test_memory_efficient_attention_with_gradients_calls_its_backward_kernel(case, capfd):
    # Note [Fused attention kernels]: where torch runs the memory-efficient
    # kernel with gradients (a float bias that needs one, as T5's learned
    # position bias; float32 operands), the graph calls that kernel and
    # its backward kernel, which gives the bias gradient too (summed back
    # over the batch or heads it was broadcast across): no extern_vjp
    # running the attention forward again in the backward.
    torch.manual_seed(0)
    dtype = torch.float32 if case == "float32_padding_mask" else torch.bfloat16
    keys = 40 if case == "learned_bias_unaligned_keys" else 64
    q = torch.randn(2, 4, 64, 64, device="cuda", dtype=dtype, requires_grad=True)
    k, v = (torch.randn(2, 4, keys, 64, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2))
    bias_shape = {"learned_bias": (1, 4, 64, keys), "learned_bias_over_heads": (2, 1, 64, keys),
                  "learned_bias_unaligned_keys": (2, 4, 64, keys)}.get(case)
    bias = None if bias_shape is None else torch.randn(bias_shape, device="cuda", dtype=dtype, requires_grad=True)
    keep = torch.arange(keys, device="cuda") < 50
    operands = (q, k, v) if bias is None else (q, k, v, bias)

    def f(q, k, v, bias=None):
        mask = keep[None, None, None, :].expand(2, 1, 64, keys) if bias is None else bias * 2
        return F.scaled_dot_product_attention(q * 0.5, k, v, attn_mask=mask).relu() + 1

    want = f(*operands)
    wants = torch.autograd.grad(want.float().sum(), operands)
    kiln.reset()
    compiled = kiln.compile(f, backend="inductor")
    with kiln_logs("prims"):
        got = compiled(*operands)
        grads = torch.autograd.grad(got.float().sum(), operands)
    log = capfd.readouterr().err
    assert "kiln._attention.attention" in log and "kiln._attention.attention.kiln_vjp" in log, log
    assert "F.scaled_dot_product_attention" not in log and "extern_vjp(" not in log, log
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol * 5)
    assert kiln.stats()["autograd_graphs"] == 1 and kiln.stats()["prim_fallbacks"] == 0, kiln.stats()


@pytest.mark.parametrize("rows,reads", [(32, (512, 512)), (2, (8, 512)), (64, (8, 512))])
def test_gradient_of_a_small_table_read_many_times_is_a_reduction(rows, reads, capfd):
    # Note [Gradients of few rows]: T5's position-bias table (32 rows read at
    # 512 x 512 positions) and BERT's token types (2 rows, every token): the
    # table's gradient is a compare-and-sum per row, not a scatter_add whose
    # atomics all hit a few rows. A larger table (64 rows) keeps the scatter.
    torch.manual_seed(0)
    table = torch.randn(rows, 8, device="cuda", requires_grad=True)
    index = torch.randint(0, rows, reads, device="cuda")

    def f(table, index):
        return (F.embedding(index, table) * 2).sin()

    want = f(table, index)
    (wanted,) = torch.autograd.grad(want.sum(), table)
    kiln.reset()
    compiled = kiln.compile(f, backend="inductor")
    with kiln_logs("prims"):
        got = compiled(table, index)
        (grad,) = torch.autograd.grad(got.sum(), table)
    log = capfd.readouterr().err
    backward = log[log.index("backward graph for"):]
    assert ("scatter(" in backward) == (rows == 64), backward
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, wanted, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask", ["bool", "float", "none"])
def test_decode_step_attention_calls_the_memory_efficient_kernel(dtype, mask, capfd):
    # A decode step's one-row queries run torch's memory-efficient kernel;
    # without gradients the graph calls it itself (no per-call backend
    # choice), the bias padded and broadcast as torch's own call does.
    torch.manual_seed(0)
    q = torch.randn(2, 4, 1, 64, device="cuda", dtype=dtype)
    k, v = (torch.randn(2, 4, 33, 64, device="cuda", dtype=dtype) for _ in range(2))
    masks = {"bool": torch.rand(2, 1, 1, 33, device="cuda") < 0.8,
             "float": torch.randn(2, 1, 1, 33, device="cuda", dtype=dtype), "none": None}

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=masks[mask]) * 2

    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION), torch.no_grad():
        want = f(q, k, v)
        compiled = kiln.compile(f, backend="inductor")
        with kiln_logs("prims"):
            got = compiled(q, k, v)
    log = capfd.readouterr().err
    assert "kiln._attention.attention" in log and "F.scaled_dot_product_attention" not in log, log
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("keys", [33, 48])
def test_decode_step_bias_is_laid_out_aligned_in_the_graph(keys, capfd):
    # Note [Attention bias alignment]: the memory-efficient kernel's bias
    # rows are padded to 16 elements by the graph (the kernel making the
    # bias writes the padding: a cat with zeros, read through a slice), so
    # neither the C++ call nor kiln._attention.attention (taken under a
    # torch-function mode) pads it again; both match eager.
    torch.manual_seed(0)
    q = torch.randn(2, 4, 1, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 4, keys, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    keep = torch.rand(2, 1, 1, keys, device="cuda") < 0.8

    def f(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep) * 2

    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION), torch.no_grad():
        want = f(q, k, v, keep)
        compiled = kiln.compile(f, backend="inductor")
        with kiln_logs("prims"):
            got = compiled(q, k, v, keep)
        with Passing():
            got_python = compiled(q, k, v, keep)
    log = capfd.readouterr().err
    assert "kiln._attention.attention" in log, log
    assert ("cat(" in log) == (keys % 16 != 0), log
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got_python, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("grad", [True, False])
def test_attention_of_head_split_projections_matches_eager(dtype, grad):
    # GPT-2's layout: q, k, v are head-split views of one projection, and
    # torch's fused kernels return the output in the query's dim order while
    # the traced (meta) call gave it contiguous: kiln's kernels after the
    # call must read it as it really is laid out.
    torch.manual_seed(0)
    B, L, H, D = 2, 64, 4, 32
    x = torch.randn(B, L, 3 * H * D, device="cuda", dtype=dtype, requires_grad=grad)
    mask = (torch.rand(B, 1, L, L, device="cuda") < 0.9) | torch.eye(L, dtype=torch.bool, device="cuda")

    def f(x):
        q, k, v = (t.view(B, L, H, D).transpose(1, 2) for t in x.split(H * D, dim=2))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(B, L, H * D) * 2 + 1

    want = f(x)
    kiln.reset()
    with torch.set_grad_enabled(grad):
        got = kiln.compile(f, backend="inductor")(x)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    if grad:
        (g,) = torch.autograd.grad(got.float().square().sum(), x)
        (w,) = torch.autograd.grad(want.float().square().sum(), x)
        torch.testing.assert_close(g, w, rtol=tol * 5, atol=tol * 5)


def test_attention_kernel_in_inference_converts_the_mask_in_the_graph(capfd):
    # Note [Fused attention kernels]: without gradients the kernel returns
    # only its output; the boolean mask is converted by a graph node.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.rand(2, 1, 64, 64, device="cuda") < 0.8

    def f(q, k, v):
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(h, k, v, attn_mask=mask)

    want = f(q, k, v)
    kiln.reset()
    compiled = kiln.compile(f, backend="inductor")
    with kiln_logs("prims"):
        with torch.no_grad():
            got = compiled(q, k, v)
    log = capfd.readouterr().err
    assert "kiln._attention.attention" in log and "F.scaled_dot_product_attention" not in log, log
    assert "where(" in log, log
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_attention_torch_would_run_as_math_is_decomposed(capfd):
    # Note [Attention on the GPU]: where torch's own choice is its math
    # backend (here forced through the backend flags, read at compile
    # time), the attention is decomposed into kiln's kernels; a query row
    # whose keys are all masked gives zeros, as torch's math backend does.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, device="cuda", requires_grad=True) for _ in range(3))
    mask = torch.ones(64, 64, dtype=torch.bool, device="cuda").tril()
    mask[5] = False

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2

    kiln.reset()
    compiled = kiln.compile(f, backend="inductor")
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        want = f(q, k, v)
        with kiln_logs("prims"):
            got = compiled(q, k, v)
    log = capfd.readouterr().err
    assert "extern F.scaled_dot_product_attention" not in log, log
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(got[:, :, 5], torch.zeros_like(got[:, :, 5]))
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    wants = torch.autograd.grad(want.sum(), (q, k, v))
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def _kiln_kernel_launches(fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("kiln_"))


def _weight_casts_per_step(step, capfd):
    """Whether one warm step ran the graph's weight casts as a step of
    their own (kiln.cast_all, Note [Batched weight casts]), from the
    executor's perf log."""
    capfd.readouterr()
    with kiln_logs("perf"):
        step()
        torch.cuda.synchronize()
    return "kiln.cast_all" in capfd.readouterr().err


@pytest.mark.parametrize("keep", [True, False])
def test_inference_keeps_kernels_of_parameters_until_they_change(keep, capfd):
    # Note [Kernels of parameters]: autocast's bfloat16 copies of the
    # weights are kept between inference calls and made again when a
    # parameter changes in place or is replaced.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).cuda()
    x = torch.randn(16, 64, device="cuda")

    def step(m):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            return m(x)

    saved = kiln.config.parameter_kernel_cache
    kiln.config.parameter_kernel_cache = keep
    try:
        kiln.reset()
        compiled = kiln.compile(model)
        torch.testing.assert_close(step(compiled), step(model), rtol=2e-2, atol=2e-2)
        first = _kiln_kernel_launches(lambda: step(compiled))
        again = _kiln_kernel_launches(lambda: step(compiled))
        assert again == first
        # Kept, the casts run no more; uncached they run each call, batched
        # into one foreach copy (which also takes the input's cast, so the
        # kernel counts of the two are equal).
        assert _weight_casts_per_step(lambda: step(compiled), capfd) == (not keep)
        with torch.no_grad():
            model[0].weight.mul_(2)  # in place: the version counter moves
        torch.testing.assert_close(step(compiled), step(model), rtol=2e-2, atol=2e-2)
        model[2].weight.data = torch.randn(32, 128, device="cuda")  # replaced
        torch.testing.assert_close(step(compiled), step(model), rtol=2e-2, atol=2e-2)
    finally:
        kiln.config.parameter_kernel_cache = saved


def test_an_object_passed_through_keeps_the_kernels():
    # A model's output holding its KV cache object: the object is an input
    # the prim graph only returns, and has no device (generate() on the GPU
    # ran without a single kiln kernel before).
    class Cache:
        def __init__(self):
            self.steps = 0

    def f(x, cache):
        return torch.relu(x * 2 + 1).sum(-1), cache

    x = torch.randn(8, 64, device="cuda")
    cache = Cache()
    compiled = kiln.compile(f, backend="inductor")
    with torch.no_grad():
        got, returned = compiled(x, cache)
    assert returned is cache
    torch.testing.assert_close(got, f(x, cache)[0])
    s = kiln.stats()
    assert s["prim_graphs"] == 1 and s["kernels"] >= 1, s


def test_new_sizes_of_a_dynamic_graph_compile_no_cuda_kernel():
    """Note [CUDA run-time layout]: a size instance's kernels take their
    outer sizes and strides as arguments, so lengths after the first
    instance reuse its NVRTC kernels (layer norm over the hidden size, a
    biased GELU, a residual add), each length equal to eager."""
    torch.manual_seed(0)
    ln = nn.LayerNorm(64).cuda()
    w = torch.randn(64, 64, device="cuda") * 0.1
    b = torch.randn(64, device="cuda")

    def block(x, mask):
        h = ln(x)
        return x + F.gelu(h @ w + b) * mask.unsqueeze(-1)

    compiled = kiln.compile(block, backend="inductor")
    compiled_after = []
    for n in (16, 24, 40, 33, 17, 40):
        x = torch.randn(3, n, 64, device="cuda")
        mask = (torch.rand(3, n, device="cuda") > 0.2).float()
        torch.testing.assert_close(compiled(x, mask), block(x, mask), rtol=1e-4, atol=1e-5)
        compiled_after.append(kiln.stats()["cuda_kernels_compiled"])
    s = kiln.stats()
    assert s["traces"] == 2 and s["size_instances"] == 4 and s["prim_fallbacks"] == 0, s
    # The static trace (16) and the first instance (24) compile; 40, 33 and
    # 17 compile nothing (the second 40 reuses its instance).
    assert compiled_after[1] > compiled_after[0] > 0, compiled_after
    assert compiled_after[2:] == [compiled_after[1]] * 4, compiled_after


def test_decode_steps_share_the_padded_bias_kernel_across_lengths():
    """Note [CUDA run-time layout]: the bias padded to 16 keys is a cat
    whose bound is the key length, a size constant taken as an argument, so
    decoding lengths after the first instance compile no CUDA kernel."""
    torch.manual_seed(0)

    def step(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep) * 2

    compiled = kiln.compile(step, backend="inductor")
    compiled_after = []
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION), torch.no_grad():
        for keys in (21, 33, 35, 38, 45):
            q = torch.randn(2, 4, 1, 64, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(2, 4, keys, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            keep = torch.rand(2, 1, 1, keys, device="cuda") < 0.8
            torch.testing.assert_close(compiled(q, k, v, keep), step(q, k, v, keep), rtol=2e-2, atol=2e-2)
            compiled_after.append(kiln.stats()["cuda_kernels_compiled"])
    s = kiln.stats()
    assert s["traces"] == 2 and s["size_instances"] == 4 and s["prim_fallbacks"] == 0, s
    # 21: static; 33: the first instance; 35, 38, 45 reuse its kernels.
    assert compiled_after[1] > compiled_after[0], compiled_after
    assert compiled_after[2:] == [compiled_after[1]] * 3, compiled_after


def test_weight_casts_of_an_autocast_training_step_are_batched(capfd):
    # Note [Batched weight casts]: the bfloat16 casts of the weights (Linear
    # layers without a bias, as in Llama) run as one foreach copy; gradients
    # match eager.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.SiLU(), nn.Linear(128, 128, bias=False), nn.SiLU(),
                          nn.Linear(128, 32, bias=False)).cuda()
    reference = copy.deepcopy(model)
    x = torch.randn(16, 64, device="cuda")
    kiln.reset()
    compiled = kiln.compile(model, backend="inductor")
    with kiln_logs("prims"):
        for m in (compiled, reference):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(x).float().square().mean()
            loss.backward()
    log = capfd.readouterr().err
    assert "extern kiln.cast_all" in log, log
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=1e-4)
    assert kiln.stats()["autograd_graphs"] == 1
