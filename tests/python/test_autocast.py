"""Autocast's casts as graph nodes (Note [Explicit autocast casts] in
tracer/trace_autocast.cpp): blocks inside the compiled function and
autocast already on around the call, compiled to prims and kernels, against
eager torch under the same autocast."""
import copy

import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import train_gpt_under_autocast

pytestmark = pytest.mark.cpu_semantics("torch.autocast('cpu')")
needs_cpu_kernels = pytest.mark.skipif(not kiln._C.cpu_kernels_available(),
                                       reason="kiln built without LLVM: no CPU kernels")


def stats():
    return kiln.stats()


def graph_text(fn, *args):
    return "\n".join(str(g) for g in kiln.explain(fn)(*args).graphs)


def matmul_then_losses(x, w, t):
    y = x @ w                      # autocast: bf16
    return y, F.mse_loss(y, t), torch.prod(y[0]), y.float().sum(0)   # mse, prod: float32 under CPU autocast


@needs_cpu_kernels
def test_autocast_around_the_call_is_compiled_with_its_casts():
    x, w, t = torch.randn(4, 6), torch.randn(6, 5), torch.randn(4, 5)
    compiled = kiln.compile(matmul_then_losses, backend="inductor")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = compiled(x, w, t), matmul_then_losses(x, w, t)
    assert [g.dtype for g in got] == [e.dtype for e in want] == [torch.bfloat16, torch.float32, torch.float32,
                                                                   torch.float32]
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    s = stats()
    assert s["prim_graphs"] == 1 and s["prim_fallbacks"] == 0, s


def test_autocast_state_is_guarded():
    x, w, t = torch.randn(4, 6), torch.randn(6, 5), torch.randn(4, 5)
    compiled = kiln.compile(matmul_then_losses, backend="aot_eager")
    assert compiled(x, w, t)[0].dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(x, w, t)[0].dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert compiled(x, w, t)[0].dtype == torch.float32
    s = stats()
    assert s["traces"] == 2 and s["recompiles"] == 1 and s["cache_hits"] == 1, s


def test_casts_are_graph_nodes():
    x, w, t = torch.randn(4, 6), torch.randn(6, 5), torch.randn(4, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        text = graph_text(matmul_then_losses, x, w, t)
    assert "Tensor.to(%0, torch.bfloat16) : bf16[4, 6]" in text, text
    assert "Tensor.to(%1, torch.bfloat16) : bf16[6, 5]" in text, text
    # mse_loss and prod take the bf16 product as float32.
    assert text.count("torch.float32) : f32[") >= 2, text
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dump = kiln.trace_dump(matmul_then_losses, x, w, t)
    assert "\nAutocast cpu bfloat16\n" in dump, dump
    assert "\nAutocast off\n" in kiln.trace_dump(matmul_then_losses, x, w, t)


def block_inside(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.relu(x @ w) + 1
        inner = torch.mm(x, w)
        with torch.autocast("cpu", enabled=False):
            plain = torch.mm(x, w)
    return y, inner, plain, y.float().sum(0)


@needs_cpu_kernels
def test_blocks_inside_the_function_compile_to_kernels():
    x, w = torch.randn(5, 3), torch.randn(3, 7)
    compiled = kiln.compile(block_inside, backend="inductor")
    got, want = compiled(x, w), block_inside(x, w)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e)
    s = stats()
    assert s["prim_graphs"] == 1 and s["prim_fallbacks"] == 0 and s["kernels"] > 0, s
    assert not torch.is_autocast_cpu_enabled()


@needs_cpu_kernels
def test_bf16_intermediates_round_like_eager_inside_kernels():
    # A fused kernel computes bf16 values in float32; each op's result is
    # rounded to bf16 as eager stores it, so the results agree exactly.
    # (No Python scalars: torch 1.13's CPU kernels round those to bf16
    # first, torch 2 and CUDA keep them in float32, as kiln does.)
    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            z = y * y + y
        return z, z.float().sum(0)
    x, w = torch.randn(64, 32), torch.randn(32, 16)
    compiled = kiln.compile(fn, backend="inductor")
    (z, total), (want_z, want_total) = compiled(x, w), fn(x, w)
    torch.testing.assert_close(z, want_z, rtol=0, atol=0)
    torch.testing.assert_close(total, want_total)
    assert stats()["kernels"] > 0


@pytest.mark.parametrize("backend", [pytest.param("inductor", marks=needs_cpu_kernels), "aot_eager"])
def test_training_step_under_autocast_matches_eager(backend):
    s = train_gpt_under_autocast("cpu", backend, loss_tol=1e-3, grad_tol=2e-2)
    assert s["autograd_graphs"] == 1 and s["prim_fallbacks"] == 0 and s["graph_breaks"] == 0, s


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_ops_own_upcasts_are_not_autocast_casts(device):
    # SDPA's math backend copies bf16 inputs to float32 inside the op, before
    # any other op shows; autocast itself cast nothing (the inputs are already
    # bf16), so the call is explicit with no casts and its graph decomposes.
    from kiln import _autocast
    q = torch.empty(2, 4, 16, 8, device="meta", dtype=torch.bfloat16)
    mask = torch.empty(2, 1, 16, 16, device="meta", dtype=torch.bool)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for kwargs in ({}, {"attn_mask": mask}, {"is_causal": True}):
            assert _autocast.explicit_casts(F.scaled_dot_product_attention, (q, q, q), kwargs,
                                            torch.device(device)) == [], kwargs
        # A composite autocast passes through: its own up-cast is followed by
        # a matmul autocast casts again, which no input cast expresses.
        def upcast_then_mm(a):
            return torch.mm(a.float(), a.float()).to(a.dtype)
        square = torch.empty(8, 8, device="meta", dtype=torch.bfloat16)
        assert _autocast.explicit_casts(upcast_then_mm, (square,), {}, "cpu") is None


def test_casts_are_explicit_only_when_they_reproduce_autocast():
    from kiln import _autocast
    x, w = torch.randn(4, 4, device="meta"), torch.randn(4, 4, device="meta")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # A matmul: both inputs cast to bf16.
        casts = _autocast.explicit_casts(torch.mm, (x, w), {}, "cpu")
        assert sorted((id(t), d) for t, d in casts) == sorted([(id(x), torch.bfloat16), (id(w), torch.bfloat16)])
        # Autocast leaves relu alone.
        assert _autocast.explicit_casts(torch.relu, (x,), {}, "cpu") == []
        # mse_loss of bf16 inputs computes in float32: its inputs cast up.
        xb = torch.randn(4, 4, device="meta", dtype=torch.bfloat16)
        up = _autocast.explicit_casts(F.mse_loss, (xb, xb), {}, "cpu")
        assert [d for _, d in up] == [torch.float32]
        # A composite whose matmul runs in bf16 and whose sum with x widens
        # back to float32: no casts of its inputs reproduce both.
        assert _autocast.explicit_casts(lambda a: torch.mm(a, a) + a, (x,), {}, "cpu") is None


def test_casts_are_found_once_per_op_and_argument_metadata(monkeypatch):
    # Note [Autocast casts cache]: a repeated layer's op reuses the casts
    # found for its first instance, naming the new call's tensors.
    from kiln import _autocast
    found = []
    find = _autocast._find_explicit_casts
    monkeypatch.setattr(_autocast, "_find_explicit_casts", lambda *a: found.append(a[0]) or find(*a))
    monkeypatch.setattr(_autocast, "_casts_cache", {})

    def pair(dtype=torch.float32):
        return torch.randn(4, 4, device="meta", dtype=dtype), torch.randn(4, 4, device="meta", dtype=dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x, w = pair()
        first = _autocast.explicit_casts(torch.mm, (x, w), {}, "cpu")
        y, v = pair()
        again = _autocast.explicit_casts(torch.mm, (y, v), {}, "cpu")
        assert sorted((id(t), d) for t, d in first) == sorted([(id(x), torch.bfloat16), (id(w), torch.bfloat16)])
        assert sorted((id(t), d) for t, d in again) == sorted([(id(y), torch.bfloat16), (id(v), torch.bfloat16)])
        assert len(found) == 1
        # Other dtypes, values or sizes are other keys.
        xb, wb = pair(torch.bfloat16)
        assert _autocast.explicit_casts(torch.mm, (xb, wb), {}, "cpu") == []
        assert [d for _, d in _autocast.explicit_casts(F.mse_loss, (xb, wb), {}, "cpu")] == [torch.float32] * 2
        assert _autocast.explicit_casts(torch.sum, (xb,), {"dtype": torch.float32}, "cpu") is not None
        assert _autocast.explicit_casts(torch.mm, (torch.randn(4, 2, device="meta"), w.t()[:2]), {}, "cpu")
        assert len(found) == 5
        # A None answer (no casts reproduce autocast) is kept too.
        composite = lambda a: torch.mm(a, a) + a  # noqa: E731
        assert _autocast.explicit_casts(composite, (x,), {}, "cpu") is None
        assert _autocast.explicit_casts(composite, (y,), {}, "cpu") is None
        assert len(found) == 6
    with torch.autocast("cpu", dtype=torch.float16):
        assert [d for _, d in _autocast.explicit_casts(torch.mm, (y, v), {}, "cpu")] == [torch.float16] * 2
    assert len(found) == 7
    # A sparse argument has no strides: no key, found each time.
    assert _autocast._signature((torch.eye(3).to_sparse(),), []) is None
    # One tensor in two places is another key than two tensors alike.
    _autocast._casts_cache.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        square = _autocast.explicit_casts(torch.mm, (x, x), {}, "cpu")
        assert {id(t) for t, _ in square} == {id(x)}
        y2, v2 = pair()
        both = _autocast.explicit_casts(torch.mm, (y2, v2), {}, "cpu")
        assert sorted(id(t) for t, _ in both) == sorted([id(y2), id(v2)])


def test_inference_under_autocast_makes_factory_tensors_on_meta():
    # A composite op that makes a tensor from nothing on the claimed device
    # (CUDA SDPA's mask handling does) must not mix a real tensor with the
    # meta fakes: kiln._autocast.infer makes it on meta (_MetaFactories).
    from kiln import _autocast

    def composite(x):
        return x * torch.ones(x.shape[-1], device=x.device)

    fake = torch.empty(3, 4, device="meta")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = _autocast.infer(composite, (fake,), {}, "cpu")
    assert out.device.type == "meta" and out.shape == (3, 4)


def test_in_place_activation_on_a_result_under_autocast_trains_whole():
    # Autocast's inference of an op runs it on fakes that claim the device; an
    # op's result among them must stay a non-leaf, or F.relu(x, inplace=True)
    # on it raises where eager does not (every conv net's ReLU(inplace=True)
    # broke its frame under autocast training).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=True),
                                torch.nn.Conv2d(8, 4, 3), torch.nn.Hardswish(inplace=True))
    twin = copy.deepcopy(model)
    x = torch.randn(2, 3, 10, 10)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(x).float().sum()
    want.backward()
    kiln.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = kiln.compile(twin)(x).float().sum()
    got.backward()
    s = kiln.stats()
    assert s["graph_breaks"] == 0 and s["unsupported"] == 0 and s["prim_fallbacks"] == 0, s
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    for (label, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=5e-2, atol=5e-2, msg=lambda m: f"{label}: {m}")


def test_an_expanded_result_reshapes_under_autocast_training():
    # The fake of an op's result must keep the result's strides: reshape of
    # an expanded tensor copies, but when the fake looked dense reshape chose
    # a view, which the meta tensor underneath refused (transformers'
    # repeat_kv broke every Llama attention under autocast training on CUDA).
    def f(x, w):
        h = (x @ w)[:, :, None, :].expand(2, 3, 2, 4)
        return h.reshape(2, 6, 4).float().sum()

    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 4), torch.randn(4, 4, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = f(x, w)
    want.backward()
    want_grad, w.grad = w.grad, None
    kiln.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = kiln.compile(f)(x, w)
    got.backward()
    s = kiln.stats()
    assert s["graph_breaks"] == 0 and s["unsupported"] == 0, s
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(w.grad, want_grad)


def dynamo_spelled_blocks(x, w):
    # How Dynamo's generated code (an FX graph's forward) spells
    # `with torch.autocast(...)`: torch.compile(backend="kiln") hands kiln this.
    outer = torch.amp.autocast_mode._enter_autocast("cpu", torch.bfloat16, True, None)
    y = x @ w
    inner = torch.amp.autocast_mode._enter_autocast("cpu", None, False, None)
    z = y.float() @ w
    torch.amp.autocast_mode._exit_autocast(inner)
    u = z @ w
    torch.amp.autocast_mode._exit_autocast(outer)
    return y, z, u, u.float() @ w


def test_blocks_spelled_as_enter_and_exit_calls_are_traced_as_blocks():
    x, w = torch.randn(6, 6), torch.randn(6, 6)
    got, want = kiln.compile(dynamo_spelled_blocks)(x, w), dynamo_spelled_blocks(x, w)
    assert [g.dtype for g in got] == [e.dtype for e in want] == [torch.bfloat16, torch.float32, torch.bfloat16,
                                                                   torch.float32]
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    s = stats()
    assert s["traces"] == 1 and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s
    assert not torch.is_autocast_enabled("cpu")

