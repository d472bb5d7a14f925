"""The public surface of the kiln package: compile's call and decorator forms,
its options, stats(), reset(), config, explain() and disable()."""
import warnings

import pytest
import torch

import kiln
from conftest import STAT_KEYS, assert_same, check_compiled, delta, stats, kiln_logs


def poly(x):
    return x * x - 3 * x + 2


def test_public_names_exist():
    for name in ("compile", "disable", "reset", "explain", "stats", "config", "Unsupported"):
        assert hasattr(kiln, name), name
    assert callable(kiln.compile) and callable(kiln.disable) and callable(kiln.explain)


def test_call_form():
    check_compiled(poly, lambda: (torch.randn(5),), fullgraph=False)


def test_bare_decorator_form():
    @kiln.compile
    def f(x):
        return torch.cos(x) + x

    before = stats()
    for _ in range(3):
        x = torch.randn(4)
        assert_same(f(x), torch.cos(x) + x)
    d = delta(before, stats())
    assert d["traces"] == 1 and d["cache_hits"] == 2, d


def test_decorator_with_arguments():
    @kiln.compile(fullgraph=True)
    def f(x, y):
        return torch.maximum(x, y) * 2

    @kiln.compile()
    def g(x):
        return x.exp()

    @kiln.compile(backend="eager", dynamic=False)
    def h(x):
        return x.log1p()

    for _ in range(3):
        x, y = torch.randn(3), torch.randn(3)
        assert_same(f(x, y), torch.maximum(x, y) * 2)
        assert_same(g(x), x.exp())
        assert_same(h(x.abs()), x.abs().log1p())
    s = stats()
    assert s["traces"] == 3 and s["cache_hits"] == 6, s


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_valid_backends(backend):
    check_compiled(poly, lambda: (torch.randn(2, 3),), backend=backend)


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_valid_modes(mode):
    check_compiled(poly, lambda: (torch.randn(2, 3),), mode=mode)
    kiln.reset()
    check_compiled(poly, lambda: (torch.randn(2, 3),), backend="inductor", mode=mode)


@pytest.mark.cpu_semantics("max-autotune times CUDA kernels only")
def test_max_autotune_is_quiet_and_times_nothing_on_cpu():
    # It tunes CUDA kernels only (Note [CUDA autotuning]); on the CPU it is
    # the default mode, and no longer warns that it does nothing.
    kiln.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        compiled = kiln.compile(poly, backend="inductor", mode="max-autotune")
    x = torch.randn(8, 3)
    assert_same(compiled(x), poly(x))
    assert kiln.stats()["kernels_autotuned"] == 0


@pytest.mark.parametrize("dynamic", [None, False, True])
def test_dynamic_flag_results_correct_across_shapes(dynamic):
    compiled = kiln.compile(poly, dynamic=dynamic)
    for n in (2, 3, 4, 3, 2, 7):
        x = torch.randn(n, 2)
        assert_same(compiled(x), poly(x))
    assert stats()["unsupported"] == 0


def test_compile_module_returns_module_and_decorator_form_for_module():
    model = torch.nn.Linear(3, 2)
    compiled = kiln.compile(model)
    assert isinstance(compiled, torch.nn.Module)
    compiled2 = kiln.compile(fullgraph=True)(model)
    assert isinstance(compiled2, torch.nn.Module)
    x = torch.randn(4, 3)
    assert_same(compiled(x), model(x))
    assert_same(compiled2(x), model(x))


def test_stats_is_snapshot_dict():
    compiled = kiln.compile(poly)
    s0 = kiln.stats()
    assert isinstance(s0, dict)
    assert set(STAT_KEYS) <= set(s0)
    assert all(isinstance(s0[k], int) for k in STAT_KEYS)
    compiled(torch.randn(3))
    s1 = kiln.stats()
    assert s0["traces"] == 0, "an earlier snapshot changed after a call"
    assert s1["traces"] == 1
    s1["traces"] = 1000  # mutating a snapshot does not touch kiln's counters
    assert kiln.stats()["traces"] == 1


def test_reset_zeroes_every_counter_and_retraces():
    compiled = kiln.compile(poly)
    x = torch.randn(3)
    for _ in range(3):
        compiled(x)
    compiled(torch.randn(4))
    s = stats()
    assert s["traces"] == 2 and s["cache_hits"] == 2 and s["recompiles"] == 1, s
    kiln.reset()
    assert all(v == 0 for v in stats().values()), stats()
    assert_same(compiled(x), poly(x))
    s = stats()
    assert s["traces"] == 1 and s["recompiles"] == 0 and s["cache_misses"] == 1, s


def test_reset_then_module_retraces():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    compiled(x)
    compiled(x)
    kiln.reset()
    assert_same(compiled(x), model(x))
    assert stats()["traces"] == 1


def test_config_cache_size_limit_settable():
    saved = kiln.config.cache_size_limit
    try:
        kiln.config.cache_size_limit = 3
        assert kiln.config.cache_size_limit == 3
        compiled = kiln.compile(poly, dynamic=False)
        for n in range(1, 6):
            x = torch.randn(n)
            assert_same(compiled(x), poly(x))
        s = stats()
        assert s["traces"] == 3 and s["cache_limit_hits"] >= 1, s
    finally:
        kiln.config.cache_size_limit = saved


def test_explain_does_not_change_results():
    x = torch.randn(4)
    report = kiln.explain(poly)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert any("mul" in g for g in report.graphs), report.graphs
    compiled = kiln.compile(poly)
    assert_same(compiled(x), poly(x))


def test_compiled_function_keeps_identity_attributes():
    compiled = kiln.compile(poly)
    assert callable(compiled)
    # the wrapper is a usable callable in higher-order code
    xs = [torch.randn(2) for _ in range(3)]
    assert_same(list(map(compiled, xs)), list(map(poly, xs)))


def test_many_small_functions_each_traced_once():
    fns = [
        lambda x: x + 1,
        lambda x: x * 2,
        lambda x: x.sin(),
        lambda x: x.exp().neg(),
        lambda x: torch.tanh(x) + torch.sigmoid(x),
    ]
    compiled = [kiln.compile(f) for f in fns]
    for _ in range(3):
        x = torch.randn(3)
        for f, cf in zip(fns, compiled):
            assert_same(cf(x), f(x))
    s = stats()
    assert s["traces"] == len(fns) and s["cache_hits"] == 2 * len(fns), s


@pytest.mark.timing_dependent_kernels("the racing threads decide which sizes trace static")
def test_threads_share_a_compiled_function():
    import threading

    def f(x):
        return (x * 2).sin() + x.shape[0]

    compiled = kiln.compile(f)
    errors = []

    def worker(n):
        try:
            for _ in range(200):
                x = torch.randn(n)
                torch.testing.assert_close(compiled(x), f(x))
        except Exception as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (2, 3, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    s = stats()
    assert 2 <= s["traces"] <= 4 and s["unsupported"] == 0, s
    assert s["traces"] + s["cache_hits"] == 800, s


def test_plain_code_in_other_threads_is_not_traced():
    import threading
    import time

    stop = threading.Event()
    ran = [0]

    def plain(x):
        return x * 3

    def other():
        while not stop.is_set():
            plain(torch.ones(2))
            ran[0] += 1

    def slow(x):
        for _ in range(20):
            x = x + 1
        return x

    compiled = kiln.compile(slow, dynamic=False)
    thread = threading.Thread(target=other)
    thread.start()
    try:
        while ran[0] == 0:  # the other thread is really running alongside
            time.sleep(0.001)
        for i in range(500):
            x = torch.randn(i % 3 + 1)
            assert_same(compiled(x), slow(x))
    finally:
        stop.set()
        thread.join()
    s = stats()
    assert ran[0] > 0
    assert s["traces"] == 3 and s["cache_hits"] == 497, s


REENTRANT_RESET = {
    # kiln.reset() from user code that kiln itself runs while it traces,
    # checks guards or runs a graph.
    "property_during_trace": """
class Weird:
    @property
    def k(self):
        kiln.reset()
        return 2
W = Weird()
def f(x):
    return x * W.k
c = kiln.compile(f)
for _ in range(3):
    assert torch.equal(c(torch.ones(2)), torch.full((2,), 2.0))
""",
    "getattr_during_trace": """
class G:
    def __getattr__(self, name):
        kiln.reset()
        return 2
W = G()
def f(x):
    return x * W.k
c = kiln.compile(f)
for _ in range(3):
    assert torch.equal(c(torch.ones(2)), torch.full((2,), 2.0))
""",
    "finalizer_during_calls": """
class Fin:
    def __del__(self):
        kiln.reset()
def f(x):
    return x * 3
c = kiln.compile(f)
for i in range(2000):
    a = Fin(); a.cycle = a; del a   # freed by some later gc pass, inside kiln
    x = torch.randn(i % 5 + 1)
    assert torch.equal(c(x), x * 3)
""",
}


@pytest.mark.parametrize("case", sorted(REENTRANT_RESET))
def test_reset_reentered_from_user_code_does_not_crash(case, tmp_path):
    # Run in a child process: a crash must fail this test, not kill the suite.
    import os
    import subprocess
    import sys

    script = tmp_path / f"{case}.py"
    script.write_text("import warnings\nwarnings.simplefilter('ignore')\nimport torch, kiln\n"
                      + REENTRANT_RESET[case] + "\nprint('script-ok')\n")
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "script-ok" in proc.stdout, (
        f"exit code {proc.returncode}\n{proc.stderr[-2000:]}")


def test_inductor_says_when_it_replays_eagerly(monkeypatch):
    import warnings

    from kiln import compile_api

    available = kiln._C.cpu_kernels_available()
    for kernels in (True, False):
        monkeypatch.setattr(compile_api, "_warned_inductor", set())
        monkeypatch.setattr(kiln.config, "cpu_kernels", kernels)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kiln.compile(lambda x: x + 1, backend="inductor")
        mentions = [str(w.message) for w in caught if "replayed through torch" in str(w.message)]
        if kernels and available:
            assert mentions == [], mentions
        else:
            assert len(mentions) == 1, [str(w.message) for w in caught]
            assert ("cpu_kernels is off" if not kernels else "no LLVM") in mentions[0]


def test_inductor_says_when_cuda_graphs_replay_eagerly(monkeypatch):
    """Where torch sees a GPU, kiln.compile warns once when CUDA graphs would
    replay through torch: CUDA kernels turned off, or NVRTC or the driver
    missing (both faked here, so the test runs without a GPU)."""
    import warnings

    from kiln import compile_api

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for kernels, loadable, expected in ((True, True, None), (False, True, "cuda_kernels is off"),
                                        (True, False, "NVRTC or the CUDA driver")):
        monkeypatch.setattr(compile_api, "_warned_inductor", {"CPU"})
        monkeypatch.setattr(kiln.config, "cuda_kernels", kernels)
        monkeypatch.setattr(kiln._C, "cuda_kernels_available", lambda: loadable)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kiln.compile(lambda x: x + 1, backend="inductor")
            kiln.compile(lambda x: x + 2, backend="inductor")
        mentions = [str(w.message) for w in caught if "CUDA graphs" in str(w.message)]
        if expected is None:
            assert mentions == [], mentions
        else:
            assert len(mentions) == 1 and expected in mentions[0], mentions


def test_cuda_kernels_are_on_by_default_and_keep_their_old_name():
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", "import kiln; print(kiln.config.cuda_kernels)"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr[-2000:]
    saved = kiln.config.cuda_kernels
    try:
        with pytest.warns(DeprecationWarning, match="use kiln.config.cuda_kernels"):
            kiln.config.experimental_cuda_kernels = not saved
        assert kiln.config.cuda_kernels is (not saved)
        assert kiln.config.experimental_cuda_kernels is (not saved)
        with pytest.raises(TypeError, match="cuda_kernels must be a bool"):
            kiln.config.cuda_kernels = 1
    finally:
        kiln.config.cuda_kernels = saved


def test_is_compiling_answers_true_inside_a_kiln_trace_only():
    def f(x):
        return x + 1 if kiln.is_compiling() else x - 1

    x = torch.zeros(2)
    assert not kiln.is_compiling()
    assert torch.equal(f(x), x - 1)
    assert torch.equal(kiln.compile(f, fullgraph=True)(x), x + 1)
    assert "is_compiling" in kiln.__all__


def test_allow_in_graph_makes_a_call_one_graph_node(capfd):
    # Note [Callables allowed in the graph]: traced on meta fakes, called
    # as written at run time, differentiated by torch.
    ran_on = []

    @kiln.allow_in_graph
    def scaled_gelu(x, scale):
        ran_on.append(x.device.type)
        return torch.nn.functional.gelu(x) * scale

    def f(x):
        return scaled_gelu(x * 2, 3.0).sum(0) + 1

    x = torch.randn(4, 5, requires_grad=True)
    kiln.reset()
    with kiln_logs("graph"):
        got = kiln.compile(f, fullgraph=True)(x)
    assert "scaled_gelu(%1, 3.0)" in capfd.readouterr().err
    assert ran_on == ["meta", "cpu"]
    want = f(x)
    torch.testing.assert_close(got, want)
    (g,) = torch.autograd.grad(got.sum(), x)
    (w,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(g, w)
    with pytest.raises(TypeError, match="expects a function"):
        kiln.allow_in_graph(int)
