"""kiln._fx: kiln.compile(fn, backend=callable) hands each captured graph
to the callable as a torch.fx.GraphModule (torch.compile's custom-backend
contract) and runs what it returns."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import kiln


def test_a_callable_backend_gets_each_graph_once_with_the_first_inputs():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    def f(x, y):
        z = torch.relu(x @ y) + 1
        return {"a": z.sum(0), "b": (z * 2, 3, z.shape)}

    x, y = torch.randn(3, 4), torch.randn(4, 5)
    compiled = kiln.compile(f, backend=backend)
    got, want = compiled(x, y), f(x, y)
    torch.testing.assert_close(got["a"], want["a"])
    torch.testing.assert_close(got["b"][0], want["b"][0])
    assert got["b"][1:] == want["b"][1:] and type(got["b"][2]) is torch.Size
    assert len(seen) == 1
    gm, examples = seen[0]
    assert isinstance(gm, torch.fx.GraphModule)
    assert examples[0] is x and examples[1] is y
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.relu in targets
    compiled(torch.randn(3, 4), torch.randn(4, 5))
    assert len(seen) == 1  # the same graph: compiled once


def test_graph_breaks_hand_each_piece_to_the_backend():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x):
        y = x.sin() * 2
        print("", end="")
        return y.cos().sum()

    x = torch.randn(5)
    torch.testing.assert_close(kiln.compile(f, backend=backend)(x), f(x))
    assert len(graphs) == 2


def test_a_backend_returning_no_callable_is_named():
    def lazy(gm, example_inputs):
        return None

    with pytest.raises(TypeError, match="backend 'lazy' returned NoneType, not a callable"):
        kiln.compile(lambda x: x + 1, backend=lazy)(torch.randn(2))
    with pytest.raises(ValueError, match="or a callable"):
        kiln.compile(lambda x: x, backend=3)


def test_torchs_inductor_behind_kilns_capture_trains_like_eager():
    # kiln's capture, torch's compiler (and its autograd) behind it.
    from torch._inductor.compile_fx import compile_fx
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    x = torch.randn(6, 4)
    want = model(x)
    want.square().sum().backward()
    wants = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    got = kiln.compile(model, backend=compile_fx)(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    got.square().sum().backward()
    for p, w in zip(model.parameters(), wants):
        torch.testing.assert_close(p.grad, w, rtol=1e-5, atol=1e-5)


def test_every_graph_of_the_compile_corpus_survives_the_fx_round_trip():
    # KILN_TEST_BACKEND=fx (conftest.fx_round_trip): every graph the
    # check_compiled corpus captures is converted to FX and run as that
    # GraphModule; results equal eager's, one trace per function as usual.
    here = os.path.dirname(__file__)
    files = sorted(f for f in os.listdir(here)
                   if f.startswith("test_") and f != "test_fx.py" and "check_compiled(" in open(os.path.join(here, f)).read())
    assert len(files) >= 10, files
    env = dict(os.environ, KILN_TEST_BACKEND="fx")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files],
                          cwd=here, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


@pytest.mark.parametrize("name", ["hf-gpt2", "hf-t5-encoder"])
def test_a_transformers_model_through_torchs_inductor_behind_kiln(name):
    # GPT-2 returns a ModelOutput holding a cache object: the backend gets
    # the tensors (Note [Output builders]), kiln builds the output after;
    # constants FX cannot spell (classes) are attributes of the GraphModule.
    # T5 accumulates into a Python 0 (`0 += t`, were FX to write it).
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "zoo"))
    from zoo_models import build, tensors_of
    from torch._inductor.compile_fx import compile_fx
    model, args, kwargs = build(name)
    model.eval()
    handed = []

    def backend(gm, example_inputs):
        handed.append(gm)
        return compile_fx(gm, example_inputs)

    with torch.no_grad():
        want = model(*args, **kwargs)
        got = kiln.compile(model, backend=backend)(*args, **kwargs)
    assert type(got) is type(want) and len(handed) == 1
    for a, b in zip(tensors_of(got), tensors_of(want)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert kiln.stats()["eager_runs"] == 0 and kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
