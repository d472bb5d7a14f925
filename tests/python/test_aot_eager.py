"""backend="aot_eager": traced graphs decomposed into prims and run by the
prim executor (forward-only: graphs that need gradients stay eager)."""
import gc
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import kiln_logs, python_calls


def compile_aot(fn):
    return kiln.compile(fn, backend="aot_eager")


def check(fn, make_args, calls=3, atol=1e-5, rtol=1e-5):
    """Compiled and eager agree over several calls with fresh arguments."""
    compiled = compile_aot(fn)
    for _ in range(calls):
        args = make_args()
        got, want = compiled(*args), fn(*args)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g, w, atol=atol, rtol=rtol)
    return compiled


def prim_graphs():
    return kiln.stats()["prim_graphs"]


@torch.no_grad()
def test_mlp_runs_through_prims():
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.SiLU(),
                          nn.LayerNorm(32), nn.Linear(32, 4), nn.Softmax(-1)).eval()
    check(model, lambda: (torch.randn(5, 8),))
    assert prim_graphs() == 1
    assert kiln.stats()["prim_fallbacks"] == 0


@torch.no_grad()
def test_cnn_with_batch_norm_eval_and_pooling():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.fc = nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
            return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)

    net = Net()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    net.eval()
    check(net, lambda: (torch.randn(2, 3, 8, 8),), atol=1e-4)
    assert prim_graphs() == 1


@torch.no_grad()
def test_batch_norm_training_updates_running_statistics_like_torch():
    bn_compiled, bn_eager = nn.BatchNorm1d(6), nn.BatchNorm1d(6)
    bn_eager.load_state_dict(bn_compiled.state_dict())
    compiled = compile_aot(bn_compiled)
    for _ in range(3):
        x = torch.randn(10, 6) * 3 + 1
        torch.testing.assert_close(compiled(x), bn_eager(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bn_compiled.running_mean, bn_eager.running_mean)
    torch.testing.assert_close(bn_compiled.running_var, bn_eager.running_var)
    assert bn_compiled.num_batches_tracked.item() == 3
    assert prim_graphs() == 1


def attention(x, wq, wk, wv, causal_mask):
    q, k, v = x @ wq, x @ wk, x @ wv
    b, t, d = q.shape
    q = q.view(b, t, 2, d // 2).transpose(1, 2)
    k = k.view(b, t, 2, d // 2).transpose(1, 2)
    v = v.view(b, t, 2, d // 2).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) / (d // 2) ** 0.5
    scores = scores.masked_fill(causal_mask[:t, :t] == 0, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return F.layer_norm(out.transpose(1, 2).reshape(b, t, d) + x, (d,))


@torch.no_grad()
def test_hand_written_attention_and_layer_norm():
    mask = torch.tril(torch.ones(6, 6))
    ws = [torch.randn(8, 8) / 3 for _ in range(3)]
    check(attention, lambda: (torch.randn(2, 5, 8), *ws, mask), atol=1e-5)
    assert prim_graphs() == 1


class Block(nn.Module):
    def __init__(self, d=16, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d),
                                 nn.Dropout(0.1))
        self.register_buffer("mask", torch.tril(torch.ones(8, 8)).bool())

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = torch.where(self.mask[:t, :t], att, torch.full_like(att, float("-inf")))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


@torch.no_grad()
def test_gpt_like_block():
    block = Block().eval()
    check(block, lambda: (torch.randn(2, 8, 16),), atol=1e-5)
    assert prim_graphs() == 1


@torch.no_grad()
def test_losses():
    def losses(logits, target, pred, goal, weight):
        return (F.cross_entropy(logits, target), F.cross_entropy(logits, target, weight=weight),
                F.nll_loss(F.log_softmax(logits, 1), target, reduction="sum"),
                F.cross_entropy(logits, target, ignore_index=2, reduction="none"),
                F.mse_loss(pred, goal), F.mse_loss(pred, goal, reduction="none"))

    check(losses, lambda: (torch.randn(6, 5), torch.randint(0, 5, (6,)), torch.randn(3, 4),
                           torch.randn(3, 4), torch.rand(5)))
    assert prim_graphs() == 1


@torch.no_grad()
def test_float64_broadcasting_and_non_contiguous_inputs():
    def fn(a, b):
        return (a * b - 2) / (b.abs() + 1), (a.t() @ b).amax(0), torch.clamp(a, -0.5, 0.5).mean()

    check(fn, lambda: (torch.randn(4, 3, dtype=torch.float64)[:, :3],
                       torch.randn(3, 4, dtype=torch.float64).t()))
    check(lambda a, b: torch.sigmoid(a) + torch.tanh(b) ** 2,
          lambda: (torch.randn(2, 1, 5), torch.randn(3, 1)))
    assert prim_graphs() == 2


def test_dropout_is_deterministic_under_a_fixed_seed():
    def fn(x):
        return F.dropout(x, 0.5, training=True) * 2

    compiled = compile_aot(fn)
    x = torch.ones(100)
    torch.manual_seed(7)
    first = compiled(x)
    torch.manual_seed(7)
    second = compiled(x)
    assert torch.equal(first, second)
    kept = first != 0
    assert 20 < kept.sum() < 80
    assert torch.equal(first[kept], torch.full_like(first[kept], 4.0))
    assert prim_graphs() == 1


def test_graphs_needing_gradients_run_through_kiln_autograd():
    lin = nn.Linear(4, 2)
    reference = nn.Linear(4, 2)
    reference.load_state_dict(lin.state_dict())
    compiled = compile_aot(lin)
    x = torch.randn(3, 4)
    compiled(x).sum().backward()
    reference(x).sum().backward()
    torch.testing.assert_close(lin.weight.grad, reference.weight.grad)
    assert kiln.stats()["autograd_graphs"] == 1 and kiln.stats()["prim_fallbacks"] == 0
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), lin(x))
    assert kiln.stats()["prim_graphs"] == 2  # the training graph, then the no-grad one


@torch.no_grad()
def test_dynamic_shapes_decompose_per_size():
    compiled = kiln.compile(lambda x: torch.relu(x).sum(0), backend="aot_eager", dynamic=True)
    for n in (3, 5, 3):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), torch.relu(x).sum(0))
    # One dynamic trace, one prim graph per size (Note [Size instances]).
    s = kiln.stats()
    assert s["traces"] == 1 and s["size_instances"] == 2, s
    assert s["prim_graphs"] == 2 and s["prim_fallbacks"] == 0, s


@torch.no_grad()
def test_unknown_ops_become_externs_and_inputs_pass_through():
    def fn(x):
        y = torch.cumsum(x, 0)  # not in the table: an extern
        return y, x, x.view(-1)

    x = torch.randn(3, 2)
    compiled = compile_aot(fn)
    y, same, flat = compiled(x)
    torch.testing.assert_close(y, torch.cumsum(x, 0))
    assert same is x
    assert flat._base is x or flat.data_ptr() == x.data_ptr()
    assert prim_graphs() == 1


@torch.no_grad()
def test_prim_executor_releases_everything():
    def fn(x):
        return torch.softmax(x * 2, -1).sum(0)

    compiled = compile_aot(fn)
    x = torch.randn(4, 4)
    compiled(x)
    ref = weakref.ref(x)
    before = len(gc.get_objects())
    for _ in range(50):
        compiled(x)
    del x
    gc.collect()
    assert ref() is None
    assert len(gc.get_objects()) - before < 20


def test_aot_eager_is_a_known_backend():
    assert "aot_eager" in kiln.compile.__globals__["BACKENDS"]
    with pytest.raises(ValueError):
        kiln.compile(lambda x: x, backend="nope")


@pytest.mark.parametrize("fill", [1, True, 2.5, 1 + 2j], ids=["int", "bool", "float", "complex"])
def test_full_takes_its_dtype_from_the_fill_value(fill):
    # torch.full((2,), 1) is int64 (bool for True); meta tensors of some
    # torch versions say float32, which the decomposition must not follow.
    check(lambda x: (torch.full((2, 3), fill), x + 1), lambda: (torch.randn(2),))


def test_default_dtype_change_recompiles():
    def factory(x):
        return torch.zeros(3) + x.sum(), torch.tensor(1.5), torch.arange(3) * 0.5

    compiled = compile_aot(factory)
    v = torch.randn(3, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64, torch.float32):
        torch.set_default_dtype(dtype)
        try:
            got, want = compiled(v), factory(v)
        finally:
            torch.set_default_dtype(torch.float32)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, (dtype, g.dtype, w.dtype)
            torch.testing.assert_close(g, w)
    assert kiln.stats()["recompiles"] >= 1


def test_no_grad_block_results_carry_no_gradient():
    def fn(x):
        with torch.no_grad():
            y = x * 2
        z = y + x
        return y, z

    x = torch.randn(4, requires_grad=True)
    got, want = compile_aot(fn)(x), fn(x)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want] == [False, True]
    (gx,) = torch.autograd.grad(got[1].sum(), x)
    (wx,) = torch.autograd.grad(want[1].sum(), x)
    torch.testing.assert_close(gx, wx)


def number_raised_to_a_tensor(x):
    t = 0.5 ** x
    return t.view(-1)[[0, 1]], torch.pow(2, x).stride(), x.__rpow__(3).is_contiguous()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_number_raised_to_a_transposed_tensor_is_contiguous_as_in_torch(backend):
    # Note [Meta layouts]: torch's meta kernel gives pow(number, tensor) the
    # exponent's layout, its CPU kernel a contiguous result; kiln follows the
    # real kernel, so the view(-1) works as in eager.
    x = torch.randn(6, 5).t()
    got = kiln.compile(number_raised_to_a_tensor, backend=backend)(x)
    want = number_raised_to_a_tensor(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:]


def channels_last_convolutions(x, w, w_t):
    # A depthwise conv of a channels-last input (ConvNeXt's blocks), then a
    # pointwise op and a view that reads the layout.
    y = F.conv2d(x, w, padding=1, groups=x.shape[1]) * 2 + 1
    z = F.conv_transpose2d(x, w_t)
    return y, y.stride(), y.permute(0, 2, 3, 1).view(-1, x.shape[1]), z.stride(), z.relu()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("weight_channels_last", [False, True])
def test_convolutions_of_channels_last_operands_are_channels_last_as_in_torch(backend, weight_channels_last):
    # Note [Meta layouts]: torch's meta kernel makes every convolution's
    # result contiguous, its CPU and CUDA kernels channels-last when the
    # input or the weight is. kiln follows the real kernel, so the strides
    # read, the view that needs them and the kernels after the conv (which
    # would copy a result of another layout on every call) see eager's.
    torch.manual_seed(0)
    x = torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(8, 1, 3, 3)
    w_t = torch.randn(8, 4, 2, 2)
    if weight_channels_last:
        x = x.contiguous()
        w = w.to(memory_format=torch.channels_last)
        w_t = w_t.to(memory_format=torch.channels_last)
    got = kiln.compile(channels_last_convolutions, backend=backend)(x, w, w_t)
    want = channels_last_convolutions(x, w, w_t)
    assert got[1] == want[1] and got[3] == want[3]
    assert got[0].stride() == want[0].stride()
    for g, e in zip(got[::2], want[::2]):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_attention_with_dropout_decomposes_with_its_gradient(backend):
    # F.scaled_dot_product_attention with dropout_p > 0 is decomposed (Note
    # [Attention on the GPU]). With the identity as values the output is the
    # dropped-out weights themselves, so the mask kiln drew can be read back
    # and eager's attention recomputed with it, gradients included.
    if backend == "inductor" and not kiln._C.cpu_kernels_available():
        pytest.skip("this build has no CPU kernels (no LLVM): inductor runs CPU graphs eagerly")
    torch.manual_seed(0)
    q, k = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(2))
    eye = torch.eye(16).expand(2, 3, 16, 16)
    p = 0.25

    def f(q, k):
        return F.scaled_dot_product_attention(q, k, eye, dropout_p=p)

    kiln.reset()
    compiled = kiln.compile(f, backend=backend)
    got = compiled(q, k)
    assert prim_graphs() == 1
    assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
    kept = got != 0
    assert 0.6 < kept.float().mean() < 0.9
    weights = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1)
    want = weights * kept / (1 - p) @ eye
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad((got * torch.arange(16.0)).sum(), (q, k))
    wants = torch.autograd.grad((want * torch.arange(16.0)).sum(), (q, k))
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_attention_rows_with_every_key_masked_give_zeros(backend):
    # As torch's attention: a query row whose keys are all masked (bool
    # False or float -inf) is zeros, and so is its gradient, not NaN.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 4, requires_grad=True) for _ in range(3))
    keep = torch.ones(8, 8, dtype=torch.bool).tril()
    keep[2] = False
    additive = torch.zeros(8, 8).masked_fill(~keep, float("-inf"))

    for mask in (keep, additive):
        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        kiln.reset()
        got = kiln.compile(f, backend=backend)(q, k, v)
        assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
        want = f(q, k, v)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert torch.equal(got[:, :, 2], torch.zeros_like(got[:, :, 2]))
        grads = torch.autograd.grad(got.sum(), (q, k, v))
        wants = torch.autograd.grad(want.sum(), (q, k, v))
        for g, w in zip(grads, wants):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.cpu_semantics("torch's CPU flash attention kernel and its backward")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float", "gqa"])
def test_cpu_attention_with_gradients_calls_the_flash_kernel_and_its_backward(backend, mask, capfd):
    # Note [CPU flash attention with gradients]: the graph calls torch's CPU
    # flash kernel (output and logsumexp) and its backward kernel, not
    # F.scaled_dot_product_attention with a gradient that runs it again.
    # A boolean mask becomes torch's additive one; grouped heads are
    # repeated as torch's call repeats them: values and gradients are
    # eager's to the bit (grouped heads' key/value gradients sum the repeats
    # in another order: within rounding).
    if backend == "inductor" and not kiln._C.cpu_kernels_available():
        pytest.skip("this build has no CPU kernels (no LLVM): inductor runs CPU graphs eagerly")
    torch.manual_seed(0)
    heads_kv = 2 if mask == "gqa" else 4
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    k, v = (torch.randn(2, heads_kv, 16, 8, requires_grad=True) for _ in range(2))
    keep = torch.rand(2, 1, 16, 16) < 0.8
    keep[..., 0] = True
    bias = torch.randn(2, 1, 16, 16)

    def f(q, k, v):
        kwargs = {"is_causal": True} if mask in ("causal", "gqa") else {}
        if mask == "bool":
            kwargs["attn_mask"] = keep
        elif mask == "float":
            kwargs["attn_mask"] = bias
        elif mask == "gqa":
            kwargs["enable_gqa"] = True
        return F.scaled_dot_product_attention(q * 0.5, k.transpose(1, 2).transpose(1, 2), v, **kwargs).relu()

    want = f(q, k, v)
    wants = torch.autograd.grad((want * want).sum(), (q, k, v))
    compiled = kiln.compile(f, backend=backend)
    with kiln_logs("prims"):
        got = compiled(q, k, v)
    grads = torch.autograd.grad((got * got).sum(), (q, k, v))
    log = capfd.readouterr().err
    assert "kiln._attention.attention" in log and "extern_vjp(" not in log, log
    assert torch.equal(got, want)
    for g, w in zip(grads, wants):
        if mask == "gqa":
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(g, w), (g - w).abs().max()
    assert kiln.stats()["autograd_graphs"] == 1 and kiln.stats()["prim_fallbacks"] == 0, kiln.stats()


@pytest.mark.cpu_semantics("torch's CPU flash attention kernel")
def test_attention_kernel_runs_from_cpp_on_plain_tensors():
    # Note [Native views]: the executor calls torch's attention kernel from
    # C++ (runtime/aten_calls.cpp) where every operand is a plain tensor, and
    # kiln._attention.attention, the same call, where a torch-function mode
    # is active; both give eager's values and gradients.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return F.scaled_dot_product_attention(q * 0.5, k, v, is_causal=True).relu()

    want = f(q, k, v)
    wants = torch.autograd.grad(want.square().sum(), (q, k, v))
    compiled = kiln.compile(f, backend="aot_eager")
    compiled(q, k, v)  # compiles

    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def under_mode(*args):
        with Passing():
            return compiled(*args)

    for run, expected in ((compiled, 0), (under_mode, 1)):
        got, calls = python_calls("attention", run, q, k, v, file_suffix="_attention.py")
        assert calls == expected, (run, calls)
        assert torch.equal(got, want)
        grads = torch.autograd.grad(got.square().sum(), (q, k, v))
        for g, w in zip(grads, wants):
            assert torch.equal(g, w), (g - w).abs().max()
    assert kiln.stats()["autograd_graphs"] == 1 and kiln.stats()["prim_fallbacks"] == 0, kiln.stats()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_advanced_indexing_and_same_device_moves_run_without_python(backend):
    # transformers' padding masks: mask[batch_idx, kv_idx] with broadcast
    # index tensors (negative indices too) runs as at::index from C++ (Note
    # [Native views]) and `.to(x.device)` of a tensor already there is no
    # call at all (decompose_To); both equal eager. An index out of range is
    # torch's error, raised from the compiled call.
    if backend == "inductor" and not kiln._C.cpu_kernels_available():
        pytest.skip("this build has no CPU kernels (no LLVM): inductor runs CPU graphs eagerly")
    torch.manual_seed(0)
    keep = torch.rand(3, 7) < 0.7
    x = torch.randn(5, 4)

    def f(keep, x, rows):
        batch = torch.arange(keep.shape[0], device=keep.device)[:, None, None, None]
        kv = torch.arange(keep.shape[1])[None, None, None, :].to(keep.device)
        picked = keep[batch, kv].to(x.device) & (kv < 5)
        return picked, x[rows] * 2, x.to(device=x.device, dtype=torch.float64) + 1

    rows = torch.tensor([0, -1, 2, 2])
    want = f(keep, x, rows)
    kiln.reset()
    compiled = kiln.compile(f, backend=backend)
    got = compiled(keep, x, rows)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)
    assert kiln.stats()["graph_breaks"] == 0 and kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
    with pytest.raises(Exception, match="index out of range in self") as raised:
        compiled(keep, x, torch.tensor([0, 9, 1, 1]))
    assert "frame #" not in str(raised.value)  # torch's message, not its C++ backtrace


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_norm_and_global_pooling_decompose_with_their_gradients(backend, dtype, capfd):
    # Note [Group norm and global pooling as prims]: no extern, so no
    # extern gradient rerunning them; values and gradients as eager's.
    torch.manual_seed(0)
    x = torch.randn(2, 8, 5, 6, dtype=dtype, requires_grad=True)
    w = torch.randn(8, dtype=dtype, requires_grad=True)
    bias = torch.randn(8, dtype=dtype, requires_grad=True)

    def f(x, w, bias):
        y = F.group_norm(x, 4, w, bias, eps=1e-5).relu()
        return y * F.adaptive_avg_pool2d(y, 1) + F.adaptive_avg_pool2d(x, (1, 1))

    want = f(x, w, bias)
    wants = torch.autograd.grad(want.float().square().sum(), (x, w, bias))
    with kiln_logs("prims"):
        got = kiln.compile(f, backend=backend)(x, w, bias)
    grads = torch.autograd.grad(got.float().square().sum(), (x, w, bias))
    log = capfd.readouterr().err
    assert "extern F.group_norm" not in log and "extern F.adaptive_avg_pool2d" not in log, log
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got, want, **tol)
    for g, e in zip(grads, wants):
        torch.testing.assert_close(g, e, **tol)
    assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_group_norm_of_other_layouts_decomposes_in_torchs_layout(backend, layout, capfd):
    # Both decompose, read through a contiguous copy, the result laid out
    # as torch's CPU kernel does: channels-last for an input that suggests
    # it (diffusers' VAE: an attention output transposed back to NCHW),
    # else contiguous (Note [Meta layouts]: the meta kernel says contiguous).
    torch.manual_seed(0)
    base = torch.randn(2, 8, 5, 6)
    x = base.to(memory_format=torch.channels_last) if layout == "channels_last" else base.transpose(2, 3)
    x = x.detach().requires_grad_(True)
    w = torch.randn(8, requires_grad=True)

    def f(x, w):
        return F.group_norm(x, 4, w, None, eps=1e-5).relu()

    want = f(x, w)
    wants = torch.autograd.grad(want.square().sum(), (x, w))
    with kiln_logs("prims"):
        got = kiln.compile(f, backend=backend)(x, w)
    grads = torch.autograd.grad(got.square().sum(), (x, w))
    assert "extern F.group_norm" not in capfd.readouterr().err
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)
    for g, e in zip(grads, wants):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_decompose_with_their_gradients(backend, dtype, capfd):
    # Note [Norms as prims]: F.normalize, the norm spellings and F.rms_norm
    # are prims (no extern rerun in the backward); values as eager's (bit
    # for bit for rms_norm in bfloat16, as torch's CPU kernel rounds once).
    torch.manual_seed(0)
    x = torch.randn(3, 5, 8, dtype=dtype, requires_grad=True)
    w = torch.randn(8, dtype=dtype, requires_grad=True)

    def f(x, w):
        y = F.normalize(x, dim=-1) + F.normalize(x, p=1, dim=1) * x.norm(dim=-1, keepdim=True)
        y = y * torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True) + torch.norm(x) + x.norm(p=2, dim=0)
        return y + F.rms_norm(x, (8,), w)

    want = f(x, w)
    with kiln_logs("prims"):
        got = kiln.compile(f, backend=backend)(x, w)
    log = capfd.readouterr().err
    for name in ("F.normalize", "torch.norm", "Tensor.norm", "linalg.vector_norm", "F.rms_norm"):
        assert f"extern {name}" not in log, log
    assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
    if dtype == torch.bfloat16:
        torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)
        with torch.no_grad():
            r = lambda x, w: F.rms_norm(x, (8,), w)
            assert torch.equal(kiln.compile(r, backend=backend)(x, w), r(x, w))
        return
    torch.testing.assert_close(got, want)
    wants = torch.autograd.grad(want.square().sum(), (x, w))
    grads = torch.autograd.grad(got.square().sum(), (x, w))
    for g, e in zip(grads, wants):  # sums of squares of sums: float32 rounding of their order
        torch.testing.assert_close(g, e, rtol=2e-4, atol=2e-4)


def test_norm_gradients_at_zero_and_other_orders():
    # A zero row's 2-norm has gradient 0 in torch (not sqrt's NaN); orders
    # kiln does not model stay torch's calls, with torch's gradients.
    x = torch.randn(6, 4)
    x[2] = 0
    x.requires_grad_()

    def f(x):
        return F.normalize(x, dim=1) * 3 + x.norm(dim=1, keepdim=True) + x.norm(p=3, dim=1, keepdim=True)

    got = kiln.compile(f)(x)
    g, = torch.autograd.grad(got.sum(), x)
    e, = torch.autograd.grad(f(x).sum(), x)
    torch.testing.assert_close(got, f(x))
    torch.testing.assert_close(g, e)
    assert torch.isfinite(g).all()


def test_adaptive_pooling_to_other_sizes_stays_torchs_call():
    x = torch.randn(2, 3, 8, 8, requires_grad=True)

    def f(x):
        return F.adaptive_avg_pool2d(x, (2, 4)) * 2

    got = kiln.compile(f, backend="aot_eager")(x)
    torch.testing.assert_close(got, f(x))
    g, = torch.autograd.grad(got.sum(), x)
    e, = torch.autograd.grad(f(x).sum(), x)
    torch.testing.assert_close(g, e)


@torch.no_grad()
def test_object_argument_only_returned_passes_through_the_prim_graph():
    class Cache:
        pass

    def fn(x, cache):
        return x.relu() * 2, cache

    compiled = kiln.compile(fn, backend="aot_eager")
    cache = Cache()
    x = torch.randn(3, 4)
    y, same = compiled(x, cache)
    assert same is cache
    torch.testing.assert_close(y, x.relu() * 2)
    s = kiln.stats()
    assert s["prim_graphs"] == 1 and s["prim_fallbacks"] == 0, s


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_sizes_computed_by_torch_of_python_ints_decompose(backend, capfd):
    # Longformer: chunk counts by torch.div of Python ints (0-dim tensors)
    # size views and a full_like of overlapping as_strided windows.
    def f(x):
        n, w = x.shape[1], 4
        chunks = torch.div(n, 2 * w, rounding_mode="trunc")
        h = x.view(x.shape[0], chunks, 2 * w, x.shape[2])
        size, stride = list(h.size()), list(h.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        windows = h.as_strided(size=size, stride=stride)
        return h * 2 + chunks, torch.full_like(windows, 0.5) + windows

    x = torch.randn(2, 16, 3)
    want = f(x)
    with kiln_logs("prims"):
        got = kiln.compile(f, backend=backend)(x)
    log = capfd.readouterr().err
    for name in ("extern torch.div", "extern Tensor.view", "extern torch.full_like"):
        assert name not in log, log
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("diagonal", [0, 2, -1])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_tril_and_triu_decompose_with_their_gradients(backend, diagonal, capfd):
    def f(x):
        masks = torch.ones(5, 5, dtype=torch.bool).tril(diagonal), torch.arange(12).view(3, 4).triu(diagonal)
        return (torch.tril(x, diagonal) * 2 + x.triu(diagonal - 1).sin(),) + masks

    x = torch.randn(2, 4, 5, requires_grad=True)
    want = f(x)
    with kiln_logs("prims"):
        got = kiln.compile(f, backend=backend)(x)
    log = capfd.readouterr().err
    assert "extern torch.tril" not in log and "extern Tensor.triu" not in log and "extern Tensor.tril" not in log, log
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(torch.autograd.grad(got[0].sum(), x)[0], torch.autograd.grad(want[0].sum(), x)[0])
