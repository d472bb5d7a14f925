"""kiln.dynamo_backend: torch.compile(model, backend="kiln") runs Dynamo's
captured graph through kiln's compiler."""
import importlib.metadata

import pytest
import torch
import torch.nn as nn

import kiln
from kiln import dynamo_backend


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


def test_the_entry_point_names_kilns_backend():
    # python/kiln-0.1.dist-info declares it; torch reads the name from there.
    points = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert "kiln" in points.names
    assert points["kiln"].load() is dynamo_backend.backend


def test_torch_compile_with_backend_kiln_matches_eager_and_trains():
    model = _mlp()
    x = torch.randn(5, 8)
    want = model(x)
    want.square().sum().backward()
    wants = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    kiln.reset()
    compiled = torch.compile(model, backend="kiln")
    got = compiled(x)
    torch.testing.assert_close(got, want)
    got.square().sum().backward()
    for p, w in zip(model.parameters(), wants):
        torch.testing.assert_close(p.grad, w)
    s = kiln.stats()
    # Dynamo's graph is one kiln graph, differentiated and compiled by kiln
    # (a build without LLVM replays CPU graphs through torch, and says so).
    assert s["traces"] == 1 and s["prim_fallbacks"] == 0 and s["eager_runs"] == 0 and s["graph_breaks"] == 0, s
    if kiln._C.cpu_kernels_available():
        assert s["autograd_graphs"] == 1 and (s["kernels"] > 0 or s["gemm_kernels"] > 0), s
    for _ in range(3):
        compiled(x)
    assert kiln.stats()["traces"] == 1


def test_options_choose_kilns_backend_and_bad_ones_are_named():
    model = _mlp()
    x = torch.randn(5, 8)
    torch._dynamo.reset()
    kiln.reset()
    got = torch.compile(model, backend="kiln", options={"backend": "aot_eager"})(x)
    torch.testing.assert_close(got, model(x))
    assert kiln.stats()["kernels"] == 0 and kiln.stats()["autograd_graphs"] == 1, kiln.stats()
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown options.*epilogue_fusion"):
        torch.compile(model, backend="kiln", options={"epilogue_fusion": True})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="must be one of"):
        torch.compile(model, backend="kiln", options={"backend": "cudagraphs"})(x)


def test_graph_breaks_stay_dynamos():
    # Dynamo splits the function at the print; kiln compiles each piece.
    def f(x):
        y = torch.relu(x) * 2
        print("", end="")
        return y.sum(1) + 1

    x = torch.randn(4, 6)
    torch._dynamo.reset()
    kiln.reset()
    torch.testing.assert_close(torch.compile(f, backend="kiln")(x), f(x))
    assert kiln.stats()["traces"] == 2 and kiln.stats()["eager_runs"] == 0, kiln.stats()


def test_autocast_blocks_in_dynamos_graph_compile_whole():
    # Dynamo writes a with-autocast block as _enter_autocast/_exit_autocast
    # calls (Llama's rotary embedding turns autocast off inside the model).
    def f(x, w):
        y = x @ w
        with torch.autocast("cpu", enabled=False):
            z = y.float() @ w
        return y, z, (z @ w).sum()

    x, w = torch.randn(6, 6), torch.randn(6, 6)
    torch._dynamo.reset()
    kiln.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = torch.compile(f, backend="kiln")(x, w), f(x, w)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e)
    s = kiln.stats()
    assert s["traces"] == 1 and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s
