"""Guards and the compile cache, asserted through kiln.stats() deltas.

A compiled graph is reused only while tensor inputs keep their dtype, device,
sizes, strides and requires_grad and the Python values the trace read are
unchanged; otherwise the function is traced again (a recompile), up to
kiln.config.cache_size_limit entries per code object, after which it runs
eagerly.
"""
import os
import subprocess
import sys
import types

import pytest
import torch

import kiln
from conftest import assert_same, delta, stats, kiln_logs


def affine(x):
    return x * 2 + 1


def test_defaults_documented():
    assert kiln.config.cache_size_limit == 8
    s = kiln.stats()
    assert isinstance(s, dict)
    assert all(s[k] == 0 for k in ("traces", "cache_hits", "cache_misses", "recompiles",
                                   "unsupported", "eager_runs", "cache_limit_hits")), s


def test_same_shapes_one_trace_then_hits():
    compiled = kiln.compile(affine)
    before = stats()
    x = torch.randn(3, 4)
    assert_same(compiled(x), affine(x))
    d = delta(before, stats())
    assert d == {"traces": 1, "cache_hits": 0, "cache_misses": 1, "recompiles": 0, "graph_breaks": 0,
                 "unsupported": 0, "eager_runs": 0, "cache_limit_hits": 0}, d
    for i in range(5):
        y = torch.randn(3, 4)  # fresh values, same metadata
        assert_same(compiled(y), affine(y))
    d = delta(before, stats())
    assert d == {"traces": 1, "cache_hits": 5, "cache_misses": 1, "recompiles": 0, "graph_breaks": 0,
                 "unsupported": 0, "eager_runs": 0, "cache_limit_hits": 0}, d


def _expect_recompile(compiled, fn, first_args, second_args):
    """first_args compiled and cached; second_args must miss, recompile once,
    then both variants hit the cache."""
    assert_same(compiled(*first_args), fn(*first_args))
    assert_same(compiled(*first_args), fn(*first_args))
    before = stats()
    assert_same(compiled(*second_args), fn(*second_args))
    d = delta(before, stats())
    assert d["traces"] == 1 and d["recompiles"] == 1 and d["cache_misses"] == 1, d
    assert d["cache_hits"] == 0, d
    before = stats()
    for _ in range(2):
        assert_same(compiled(*second_args), fn(*second_args))
        assert_same(compiled(*first_args), fn(*first_args))
    d = delta(before, stats())
    assert d["traces"] == 0 and d["recompiles"] == 0 and d["cache_hits"] == 4, d


def test_new_shape_recompiles():
    _expect_recompile(kiln.compile(affine), affine, (torch.randn(3, 4),), (torch.randn(5, 4),))


def test_new_rank_recompiles():
    _expect_recompile(kiln.compile(affine), affine, (torch.randn(3, 4),), (torch.randn(3, 4, 1),))


def test_new_dtype_recompiles():
    compiled = kiln.compile(affine)
    x64 = torch.randn(3, 4, dtype=torch.float64)
    _expect_recompile(compiled, affine, (torch.randn(3, 4),), (x64,))
    assert compiled(x64).dtype == torch.float64


def test_int_dtype_recompiles():
    compiled = kiln.compile(affine)
    xi = torch.randint(-5, 5, (3, 4))
    _expect_recompile(compiled, affine, (torch.randn(3, 4),), (xi,))
    assert compiled(xi).dtype == torch.int64


def test_requires_grad_change_recompiles():
    compiled = kiln.compile(affine)
    xg = torch.randn(3, 4, requires_grad=True)
    _expect_recompile(compiled, affine, (torch.randn(3, 4),), (xg,))
    out = compiled(xg)
    assert out.requires_grad
    out.sum().backward()
    assert_same(xg.grad, torch.full((3, 4), 2.0))  # d/dx sum(2x + 1)


def test_noncontiguous_input_recompiles():
    compiled = kiln.compile(affine)
    base = torch.randn(4, 4)
    transposed = torch.randn(4, 4).t()
    assert transposed.shape == base.shape and not transposed.is_contiguous()
    _expect_recompile(compiled, affine, (base,), (transposed,))


def test_sliced_strided_input_correct():
    def f(x):
        return x.sum(dim=0) + x[0]

    compiled = kiln.compile(f)
    big = torch.randn(6, 8)
    for view in (big[:, ::2], big[1:4], big.t(), big[::3, 1:], torch.randn(3, 4)):
        assert_same(compiled(view), f(view))


SCALE = 3


def uses_global_int(x):
    return x * SCALE


def test_changed_global_int_recompiles_and_is_used():
    global SCALE
    compiled = kiln.compile(uses_global_int)
    x = torch.randn(4)
    try:
        SCALE = 3
        assert_same(compiled(x), x * 3)
        assert_same(compiled(x), x * 3)
        before = stats()
        SCALE = 5
        out = compiled(x)
        assert_same(out, x * 5)
        d = delta(before, stats())
        assert d["recompiles"] == 1 and d["traces"] == 1, d
        SCALE = 3
        assert_same(compiled(x), x * 3)  # back to the first entry
    finally:
        SCALE = 3


GLOBAL_BIAS = torch.ones(4)


def uses_global_tensor(x):
    return x + GLOBAL_BIAS


def test_rebound_global_tensor_is_used():
    global GLOBAL_BIAS
    compiled = kiln.compile(uses_global_tensor)
    x = torch.randn(4)
    original = GLOBAL_BIAS
    try:
        assert_same(compiled(x), x + 1)
        GLOBAL_BIAS = torch.full((4,), 7.0)
        assert_same(compiled(x), x + 7)
        GLOBAL_BIAS.fill_(-2.0)  # mutated in place
        assert_same(compiled(x), x - 2)
    finally:
        GLOBAL_BIAS = original


def _helper_a(x):
    return x + 100


def _helper_b(x):
    return x - 100


HELPER = _helper_a


def uses_global_function(x):
    return HELPER(x) * 2


def test_rebound_global_function_is_used():
    global HELPER
    compiled = kiln.compile(uses_global_function)
    x = torch.randn(3)
    try:
        assert_same(compiled(x), (x + 100) * 2)
        HELPER = _helper_b
        assert_same(compiled(x), (x - 100) * 2)
    finally:
        HELPER = _helper_a


def test_changed_python_int_argument_recompiles():
    def f(x, n):
        return x * n + n

    compiled = kiln.compile(f)
    x = torch.randn(3)
    _expect_recompile(compiled, f, (x, 2), (x, 3))


def scale_by(x, v):
    return x * v


def by_string(x, v):
    return x * 2 if v == "double" else x * x


def by_bool(x, v):
    return x.relu() if v else x.abs()


def by_optional(x, v):
    if v is None:
        return x - 1
    return x * v


@pytest.mark.parametrize("fn,first,second", [
    (scale_by, 0.5, 1.5),
    (by_string, "double", "square"),
    (by_bool, True, False),
    (by_optional, None, 2.0),
], ids=["float", "str", "bool", "none"])
def test_changed_python_value_argument_recompiles(fn, first, second):
    compiled = kiln.compile(fn)
    x = torch.randn(5)
    _expect_recompile(compiled, fn, (x, first), (x, second))


def test_closure_value_change_is_used():
    k = 2

    def f(x):
        return x * k

    compiled = kiln.compile(f)
    x = torch.randn(3)
    assert_same(compiled(x), x * 2)
    k = 10
    assert_same(compiled(x), x * 10)


def test_list_argument_length_and_values():
    def f(xs, scales):
        out = xs[0] * scales[0]
        for t, s in zip(xs[1:], scales[1:]):
            out = out + t * s
        return out

    compiled = kiln.compile(f)
    a, b, c = torch.randn(3), torch.randn(3), torch.randn(3)
    for args in [([a, b], [1, 2]), ([a, b], [1, 2]), ([a, b, c], [1, 2, 3]), ([a, b], [5, 6])]:
        assert_same(compiled(*args), f(*args))


def test_cache_size_limit_falls_back_to_eager():
    saved = kiln.config.cache_size_limit
    try:
        kiln.config.cache_size_limit = 2
        compiled = kiln.compile(affine, dynamic=False)
        shapes = [(2,), (3,), (4,)]
        for shape in shapes[:2]:
            x = torch.randn(*shape)
            assert_same(compiled(x), affine(x))
        s = stats()
        assert s["traces"] == 2 and s["cache_limit_hits"] == 0, s
        x = torch.randn(*shapes[2])
        assert_same(compiled(x), affine(x))
        s = stats()
        assert s["traces"] == 2, s
        assert s["cache_limit_hits"] >= 1, s
        assert s["eager_runs"] >= 1, s
        # the two cached shapes still hit the cache
        before = stats()
        for shape in shapes[:2]:
            x = torch.randn(*shape)
            assert_same(compiled(x), affine(x))
        assert delta(before, stats())["cache_hits"] == 2
        # and the over-limit shape keeps running eagerly with right results
        for _ in range(3):
            x = torch.randn(*shapes[2])
            assert_same(compiled(x), affine(x))
        assert stats()["traces"] == 2
    finally:
        kiln.config.cache_size_limit = saved
    assert kiln.config.cache_size_limit == saved


def test_default_cache_size_limit_is_eight():
    compiled = kiln.compile(affine, dynamic=False)
    for n in range(1, 10):
        x = torch.randn(n)
        assert_same(compiled(x), affine(x))
    s = stats()
    assert s["traces"] == 8, s
    assert s["recompiles"] == 7, s
    assert s["cache_limit_hits"] >= 1 and s["eager_runs"] >= 1, s


LOG_SCRIPT = """
import torch, kiln
kiln.config.cache_size_limit = 1
def affine(x):
    return x * 2 + 1
compiled = kiln.compile(affine)
for n in (2, 3, 4):
    x = torch.randn(n)
    assert torch.equal(compiled(x), affine(x))
s = kiln.stats()
assert s["traces"] == 1 and s["cache_limit_hits"] >= 1, s
print("script-ok")
"""


def test_cache_limit_is_logged(tmp_path):
    # Logs are opt-in (KILN_LOGS, read once per process): check in a fresh one.
    script = tmp_path / "cache_limit_script.py"
    script.write_text(LOG_SCRIPT)
    env = dict(os.environ)
    env["KILN_LOGS"] = "all"
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "script-ok" in proc.stdout
    log = proc.stderr.lower().replace("_", " ")
    assert "[kiln:" in proc.stderr, proc.stderr
    assert "cache size limit" in log or ("cache" in log and "limit" in log), (
        "hitting the cache size limit was not logged:\n" + proc.stderr)


def test_reset_drops_cache_and_traces_again():
    compiled = kiln.compile(affine)
    x = torch.randn(3)
    compiled(x)
    compiled(x)
    assert stats()["traces"] == 1 and stats()["cache_hits"] == 1
    kiln.reset()
    assert all(v == 0 for v in stats().values())
    assert_same(compiled(x), affine(x))
    assert stats()["traces"] == 1 and stats()["cache_misses"] == 1 and stats()["cache_hits"] == 0


def test_distinct_functions_have_separate_caches():
    def f(x):
        return x + 1

    def g(x):
        return x - 1

    cf, cg = kiln.compile(f), kiln.compile(g)
    x = torch.randn(3)
    for _ in range(3):
        assert_same(cf(x), f(x))
        assert_same(cg(x), g(x))
    s = stats()
    assert s["traces"] == 2 and s["recompiles"] == 0 and s["cache_hits"] == 4, s


def test_same_function_compiled_twice():
    c1, c2 = kiln.compile(affine), kiln.compile(affine)
    x = torch.randn(3)
    assert_same(c1(x), affine(x))
    assert_same(c2(x), affine(x))
    s = stats()
    assert s["traces"] + s["cache_hits"] == 2 and s["unsupported"] == 0, s


def test_grad_mode_respected_across_cache():
    def f(x, w):
        return x @ w

    compiled = kiln.compile(f)
    x, w = torch.randn(2, 3), torch.randn(3, 3, requires_grad=True)
    out = compiled(x, w)
    assert out.requires_grad
    with torch.no_grad():
        out = compiled(x, w)
    assert not out.requires_grad
    out = compiled(x, w)
    assert out.requires_grad


def reciprocal_scale(x, v):
    return x / v


def test_negative_zero_float_argument_is_distinguished():
    # 0.0 == -0.0, but x / 0.0 and x / -0.0 differ: the guard must tell them apart.
    compiled = kiln.compile(reciprocal_scale)
    x = torch.ones(2)
    assert_same(compiled(x, 0.0), torch.full((2,), float("inf")))
    assert_same(compiled(x, -0.0), torch.full((2,), float("-inf")))
    assert_same(compiled(x, 0.0), torch.full((2,), float("inf")))


ZERO = 0.0


def divides_by_global(x):
    return x / ZERO


def test_negative_zero_global_is_distinguished():
    global ZERO
    compiled = kiln.compile(divides_by_global)
    x = torch.ones(2)
    try:
        ZERO = 0.0
        assert_same(compiled(x), divides_by_global(x))
        ZERO = -0.0
        assert_same(compiled(x), divides_by_global(x))
        assert bool((compiled(x) < 0).all())
    finally:
        ZERO = 0.0


def test_nan_float_argument_hits_cache():
    # A NaN argument is the same Python value every call: no retrace per call.
    compiled = kiln.compile(reciprocal_scale)
    x = torch.ones(2)
    for _ in range(4):
        assert_same(compiled(x, float("nan")), reciprocal_scale(x, float("nan")))
    s = stats()
    assert s["traces"] == 1 and s["cache_hits"] == 3, s


def filled(x, v):
    return torch.full((2,), v), torch.arange(v if not isinstance(v, bool) else 3)


@pytest.mark.parametrize("first,second", [(1, True), (2, 2.0), (0, False)],
                         ids=["int_then_bool", "int_then_float", "zero_then_false"])
def test_equal_python_values_of_different_types_are_distinguished(first, second):
    compiled = kiln.compile(filled)
    x = torch.randn(2)
    for v in (first, second, first, second):
        out_c, out_e = compiled(x, v), filled(x, v)
        assert_same(out_c, out_e)
        assert out_c[0].dtype == out_e[0].dtype


def test_mutated_default_and_containers_seen():
    d = torch.ones(2)

    def with_tensor_default(x, b=d):
        return x + b

    def with_int_default(x, k=2):
        return x * k

    table = {"s": 2}
    holder = types.SimpleNamespace(k=3)

    def reads_containers(x):
        return x * table["s"] + holder.k

    x = torch.randn(2)
    c1, c2, c3 = (kiln.compile(f) for f in (with_tensor_default, with_int_default, reads_containers))
    assert_same(c1(x), x + 1)
    assert_same(c2(x), x * 2)
    assert_same(c3(x), x * 2 + 3)
    d.fill_(3)
    with_int_default.__defaults__ = (5,)
    table["s"] = 7
    holder.k = -1
    assert_same(c1(x), x + 3)
    assert_same(c2(x), x * 5)
    assert_same(c3(x), x * 7 - 1)


def test_channels_last_input_recompiles_and_keeps_layout():
    def f(x):
        return x * 2 + 1

    compiled = kiln.compile(f)
    x = torch.randn(2, 3, 4, 4)
    assert_same(compiled(x), f(x))
    y = x.to(memory_format=torch.channels_last)
    out = compiled(y)
    assert_same(out, f(y))
    assert out.stride() == f(y).stride()
    assert stats()["recompiles"] == 1


def test_factories_guard_the_default_device():
    def with_factory(x):
        return x + torch.ones(3)

    def without_factory(x):
        return x * 2

    from kiln import _C
    _, text = _C.trace_dump(with_factory, (torch.randn(3),), {}, False, False)
    assert f"DefaultDevice {torch.empty(0).device}" in text, text
    _, text = _C.trace_dump(without_factory, (torch.randn(3),), {}, False, False)
    assert "DefaultDevice" not in text, text


@pytest.mark.skipif(not hasattr(torch, "set_default_device") or not torch.cuda.is_available(),
                    reason="torch.set_default_device (torch >= 2.0) and a CUDA device")
def test_default_device_change_recompiles():
    def make(n):
        return torch.arange(n) * 2.0

    compiled = kiln.compile(make)
    previous = torch.get_default_device()
    try:
        torch.set_default_device("cpu")
        assert_same(compiled(4), make(4))
        torch.set_default_device("cuda")
        out = compiled(4)
        assert out.device.type == "cuda"
        assert_same(out, make(4))
    finally:
        torch.set_default_device(previous)
    assert stats()["recompiles"] == 1


@pytest.mark.cpu_semantics("torch.autocast('cpu')")
def test_inference_mode_autocast_and_default_dtype_respected():
    def mm(x, w):
        return x @ w

    def factory(x):
        return torch.zeros(3) + x.sum(), torch.tensor(1.5)

    c_mm, c_factory = kiln.compile(mm), kiln.compile(factory)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    assert_same(c_mm(x, w), mm(x, w))
    with torch.inference_mode():
        out_c, out_e = c_mm(x, w), mm(x, w)
    assert out_c.is_inference() == out_e.is_inference()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_c, out_e = c_mm(x, w), mm(x, w)
    assert out_c.dtype == out_e.dtype == torch.bfloat16
    assert c_mm(x, w).dtype == torch.float32
    v = torch.randn(3)
    assert_same(c_factory(v), factory(v))
    torch.set_default_dtype(torch.float64)
    try:
        assert_same(c_factory(v), factory(v))
    finally:
        torch.set_default_dtype(torch.float32)


class Bag:
    """A user container: len() runs Python code."""

    def __init__(self):
        self.items = [1, 2]

    def __len__(self):
        return len(self.items)


class Switch:
    """A user object whose == runs Python code."""

    def __init__(self):
        self.on = False

    def __eq__(self, other):
        return self.on

    __hash__ = object.__hash__


BAG = Bag()
SWITCH = Switch()


def uses_user_len(x):
    return x * len(BAG)


def uses_user_eq(x):
    return x * 2 if SWITCH == 1 else x - 1


def test_user_dunder_results_are_not_baked_in():
    # len() / == on user objects run user code; their results may change
    # between calls without any attribute kiln can see changing. A compiled
    # function must not keep returning the first call's answer.
    c_len, c_eq = kiln.compile(uses_user_len), kiln.compile(uses_user_eq)
    x = torch.ones(2)
    try:
        assert_same(c_len(x), uses_user_len(x))
        assert_same(c_eq(x), uses_user_eq(x))
        BAG.items.append(3)
        SWITCH.on = True
        assert_same(c_len(x), uses_user_len(x))  # x * 3
        assert_same(c_eq(x), uses_user_eq(x))    # x * 2
    finally:
        BAG.items[:] = [1, 2]
        SWITCH.on = False


class _Settings:
    pass


def _has_branch(x, cfg):
    return x * 2 if hasattr(cfg, "a") else x * 3


def _getattr_default(x, cfg):
    return x * getattr(cfg, "b", 5)


@pytest.mark.parametrize("fn", [_has_branch, _getattr_default])
def test_attribute_presence_is_guarded(fn):
    # hasattr() and getattr()'s default decide on whether an attribute
    # exists: setting or deleting it between calls must retrace, not replay.
    compiled = kiln.compile(fn)
    cfg, x = _Settings(), torch.ones(2)
    assert_same(compiled(x, cfg), fn(x, cfg))
    cfg.a, cfg.b = 1, 7
    before = stats()
    assert_same(compiled(x, cfg), fn(x, cfg))
    assert delta(before, stats())["recompiles"] == 1
    del cfg.a, cfg.b
    assert_same(compiled(x, cfg), fn(x, cfg))


def test_environment_variable_reads_are_guarded_one_by_one(monkeypatch):
    # Note [Environment variables]: a read is evaluated and guarded on its
    # own name; changing it retraces, changing another variable does not.
    import os

    def fn(x):
        scale = 2.0 if os.environ.get("KILN_TEST_SWITCH", "0") == "1" else 3.0
        if "KILN_TEST_OTHER" in os.environ:
            scale += 1
        return x * scale * float(os.getenv("KILN_TEST_FACTOR", "1"))

    monkeypatch.delenv("KILN_TEST_SWITCH", raising=False)
    monkeypatch.delenv("KILN_TEST_OTHER", raising=False)
    monkeypatch.setenv("KILN_TEST_FACTOR", "2")
    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.ones(2)
    assert_same(compiled(x), fn(x))
    monkeypatch.setenv("KILN_TEST_UNRELATED", "1")
    before = stats()
    assert_same(compiled(x), fn(x))
    assert delta(before, stats())["recompiles"] == 0
    for name, value in (("KILN_TEST_SWITCH", "1"), ("KILN_TEST_OTHER", ""), ("KILN_TEST_FACTOR", "5")):
        monkeypatch.setenv(name, value)
        before = stats()
        assert_same(compiled(x), fn(x))
        assert delta(before, stats())["recompiles"] == 1, name


def test_recompile_log_names_every_entrys_failed_guard(capfd):
    # The newest entry's failure alone hides why older ones missed.
    def f(x, scale):
        return x * scale

    compiled = kiln.compile(f, backend="eager", dynamic=False)
    compiled(torch.randn(2), 2.0)
    compiled(torch.randn(3), 2.0)
    with kiln_logs("recompiles"):
        compiled(torch.randn(3), 5.0)
    log = capfd.readouterr().err
    assert "entry 1: L['scale'] == 5.0, expected 2.0" in log, log
    assert "entry 0: L['x']: sizes (3) != expected (2)" in log, log
