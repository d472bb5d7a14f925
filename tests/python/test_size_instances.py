"""Graphs with symbolic sizes through kiln's backends, one instance per size
(Note [Size instances] in interpreter/size_instances.cpp): every call runs
the decomposed, kernel-compiled graph of its size, equal to eager, and the
frame is traced only twice."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import assert_same, kiln_logs


def run_sizes(fn, make_args, sizes, backend="inductor", **compile_kwargs):
    """Calls the compiled fn once per size, comparing with eager each time."""
    compiled = kiln.compile(fn, backend=backend, **compile_kwargs)
    for n in sizes:
        args = make_args(n)
        assert_same(compiled(*args), fn(*args))
    return kiln.stats()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_each_size_runs_a_compiled_instance(backend):
    def fn(x, w):
        return torch.softmax(torch.relu(x @ w) * 2, dim=-1).sum(0)

    w = torch.randn(6, 5)
    s = run_sizes(fn, lambda n: (torch.randn(n, 6), w), [4, 8, 16, 5, 33], backend=backend)
    # A static trace, then one dynamic trace serving every later size.
    assert s["traces"] == 2 and s["recompiles"] == 1, s
    assert s["size_instances"] == 4, s
    assert s["prim_fallbacks"] == 0, s
    assert s["prim_graphs"] == 5, s
    if backend == "inductor":
        assert s["kernels"] >= 5, s


def test_a_size_seen_before_reuses_its_instance():
    def fn(x):
        return (x * 3).cos().mean(-1)

    s = run_sizes(fn, lambda n: (torch.randn(n, 7),), [4, 8, 16, 8, 16, 4, 8])
    # 4 is the static trace's; 8 and 16 are instances, made once each.
    assert s["traces"] == 2 and s["size_instances"] == 2, s
    assert s["prim_fallbacks"] == 0, s


def test_sizes_computed_in_python_fold_into_each_instance():
    def fn(x):
        b = x.shape[0]
        y = x.view(b, -1, 2).sum(-1)
        n = x.size(0) * x.size(1)
        return y.reshape(n // 2) + 1, x.numel(), len(x), x.shape

    s = run_sizes(fn, lambda n: (torch.randn(n, 6),), [3, 5, 9, 12])
    assert s["traces"] == 2 and s["size_instances"] == 3, s
    assert s["prim_fallbacks"] == 0, s


def test_two_symbols_key_the_instances():
    def fn(x, y):
        return torch.tanh(x).sum(1, keepdim=True) * y.mean()

    compiled = kiln.compile(fn)
    shapes = [((4, 6), (3,)), ((5, 7), (9,)), ((6, 7), (9,)), ((5, 7), (4,)), ((5, 7), (9,))]
    for xs, ys in shapes:
        x, y = torch.randn(*xs), torch.randn(*ys)
        assert_same(compiled(x, y), fn(x, y))
    s = kiln.stats()
    assert s["traces"] == 2, s
    # (5,7,9) twice: one instance; (6,7,9) and (5,7,4) new.
    assert s["size_instances"] == 3, s
    assert s["prim_fallbacks"] == 0, s


def test_factories_and_views_with_dynamic_sizes():
    def fn(x):
        ones = torch.ones(x.shape[0], 1)
        pos = torch.arange(x.shape[1]).float()
        return torch.cat([x + pos, ones], dim=1).t().contiguous()

    s = run_sizes(fn, lambda n: (torch.randn(n, n + 1),), [3, 4, 6, 7])
    assert s["size_instances"] == 3 and s["prim_fallbacks"] == 0, s


def test_in_place_write_into_an_input_happens_once():
    def fn(buf, x):
        buf.add_(x)
        return buf * 2

    compiled = kiln.compile(fn)
    for n in [4, 6, 9, 6]:
        buf = torch.zeros(n, 3)
        x = torch.randn(n, 3)
        out = compiled(buf, x)
        assert_same(buf, x)
        assert_same(out, x * 2)
    assert kiln.stats()["size_instances"] == 2, kiln.stats()


def test_training_with_a_varying_batch_matches_eager_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4))
    compiled = kiln.compile(model)
    for n in [4, 7, 12, 5, 12]:
        x = torch.randn(n, 8)
        model.zero_grad()
        F.cross_entropy(model(x), torch.arange(n) % 4).backward()
        expected = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        F.cross_entropy(compiled(x), torch.arange(n) % 4).backward()
        for p, g in zip(model.parameters(), expected):
            assert_same(p.grad, g)
    s = kiln.stats()
    assert s["traces"] == 2 and s["size_instances"] == 3, s
    assert s["prim_fallbacks"] == 0 and s["autograd_graphs"] >= 4, s


def test_random_draws_at_a_new_size_happen_once():
    def fn(x):
        return x + torch.rand(x.shape[0], 2)

    compiled = kiln.compile(fn)
    for n in [3, 5, 8]:
        x = torch.zeros(n, 2)
        torch.manual_seed(n)
        out = compiled(x)
        after = torch.rand(1)
        torch.manual_seed(n)
        expected = fn(x)
        assert_same(out, expected)
        # The generator advanced exactly as eagerly (no draw by a replay).
        assert_same(after, torch.rand(1))


def test_sizes_log_their_instances(capfd):
    def fn(x):
        return x.sin() * 2

    with kiln_logs("dynamic"):
        run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 3, 4])
    err = capfd.readouterr().err
    assert "compiled per size" in err and "size instance" in err and "s0=4" in err, err


def test_sizes_that_keep_changing_stop_compiling_at_first_sight():
    def fn(x):
        return (x * 2).softmax(-1)

    compiled = kiln.compile(fn)
    # 3 static, 4 dynamic (an instance), then 5.. each once: after 8
    # instances never called again, a new size runs the eager replay.
    for n in range(3, 20):
        x = torch.randn(n, 5)
        assert_same(compiled(x), fn(x))
    s = kiln.stats()
    assert s["traces"] == 2 and s["size_instances"] == 8, s
    # A size seen once before compiles at its second call; an instance
    # called again counts as used, so first-sight compiles resume.
    x = torch.randn(19, 5)
    assert_same(compiled(x), fn(x))
    assert kiln.stats()["size_instances"] == 9, kiln.stats()
    x = torch.randn(4, 5)
    assert_same(compiled(x), fn(x))
    x = torch.randn(30, 5)
    assert_same(compiled(x), fn(x))
    assert kiln.stats()["size_instances"] == 9, kiln.stats()
    x = torch.randn(19, 5)
    compiled(x)
    x = torch.randn(31, 5)
    assert_same(compiled(x), fn(x))
    assert kiln.stats()["size_instances"] == 10, kiln.stats()


def test_a_graph_the_backend_runs_eagerly_compiles_no_more_sizes(capfd):
    def fn(x):
        w = x.clone()
        tail = w.as_strided((x.shape[0] - 1,), (1,), 1)
        w[1] = 0.5  # seen through an as_strided view, on the gradient path: kiln's autograd leaves it to torch
        return tail * 2

    compiled = kiln.compile(fn, backend="aot_eager", dynamic=True)
    with kiln_logs("dynamic"):
        for n in [6, 7, 8, 9, 7]:
            x = torch.randn(n, requires_grad=True)
            xe = x.detach().clone().requires_grad_()
            out, ref = compiled(x), fn(xe)
            assert_same(out, ref)
            out.sum().backward()
            ref.sum().backward()
            assert_same(x.grad, xe.grad)
    s = kiln.stats()
    # One instance tried (6) and run eagerly by the backend; 7, 8, 9 compile nothing.
    assert s["traces"] == 1 and s["size_instances"] == 1 and s["prim_fallbacks"] == 1, s
    assert "other sizes run the eager replay without compiling" in capfd.readouterr().err


def test_repeated_layers_replay_once_per_layout(capfd):
    """Note [Replay memo]: the size replay runs each distinct call of a
    layout once; repeated layers take the first one's layout (fewer meta
    calls), and every size still equals eager."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 8) for _ in range(4)]

    def fn(x):
        for layer in layers:
            x = torch.softmax(layer(x).transpose(0, 1), -1).transpose(0, 1) + x
        return x

    # Mostly static calls: compiled per size only without static regions.
    with kiln_logs("dynamic"):
        s = run_sizes(fn, lambda n: (torch.randn(n, 8),), [4, 6, 9, 11], options={"static_regions": False})
    log = capfd.readouterr().err
    assert s["traces"] == 2 and s["size_instances"] == 3 and s["prim_fallbacks"] == 0, s
    hits = [int(line.split(", ")[1].split(" ")[0]) for line in log.splitlines() if "size replay:" in line]
    assert len(hits) == 3 and all(h > 0 for h in hits), log


def test_layouts_that_stay_are_not_made_meta_tensors(capfd):
    """Note [Lazy replay metas]: the weight's chain keeps its traced layout
    at every size, so the replay copies it without making meta tensors;
    only the arguments of the calls that run (the matmul's two) are made."""
    torch.manual_seed(0)
    w = torch.randn(8, 8)

    def fn(x):
        v = w
        for k in range(10):
            v = (v * 0.5 + k).tanh()
        return x @ v

    # Mostly static calls: compiled per size only without static regions.
    with kiln_logs("dynamic"):
        s = run_sizes(fn, lambda n: (torch.randn(n, 8),), [4, 6, 9, 11], options={"static_regions": False})
    log = capfd.readouterr().err
    assert s["traces"] == 2 and s["size_instances"] == 3 and s["prim_fallbacks"] == 0, s
    made = [int(line.split(", ")[2].split(" ")[0]) for line in log.splitlines() if "size replay:" in line]
    assert made and all(m <= 2 for m in made), log
