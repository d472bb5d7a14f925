"""Memory and reference leaks on kiln's hot paths.

Each test warms a path up, then repeats it many times and checks that
nothing accumulates: argument refcounts, the number of gc-tracked objects,
Python-heap memory (tracemalloc) and process RSS (/proc/self/statm), and that
kiln's caches do not keep user objects alive.
"""
import gc
import logging
import os
import sys
import tracemalloc
import weakref

import torch
import torch.nn as nn

import kiln
from conftest import assert_same, stats

OBJ_TOLERANCE = 200            # gc-tracked objects
PY_HEAP_TOLERANCE = 1 << 20    # 1 MB of Python-heap growth
RSS_TOLERANCE = 20 << 20       # 20 MB of resident memory growth


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def assert_no_growth(step, iterations, warmup=200, check_rss=False):
    """Run step() warmup times, then iterations times twice: once counting
    gc-tracked objects (and RSS), once under tracemalloc.

    Logging is switched off meanwhile: pytest's log capture keeps every record,
    which would look like a leak if kiln logs on a path (e.g. the cache limit).
    """
    logging.disable(logging.CRITICAL)
    try:
        _assert_no_growth(step, iterations, warmup, check_rss)
    finally:
        logging.disable(logging.NOTSET)


def _assert_no_growth(step, iterations, warmup, check_rss):
    for _ in range(warmup):
        step()
    gc.collect()
    objs_before = len(gc.get_objects())
    rss_before = rss_bytes()
    for _ in range(iterations):
        step()
    gc.collect()
    obj_growth = len(gc.get_objects()) - objs_before
    rss_growth = rss_bytes() - rss_before
    assert obj_growth < OBJ_TOLERANCE, f"{obj_growth} gc objects added over {iterations} iterations"
    if check_rss:
        assert rss_growth < RSS_TOLERANCE, f"RSS grew {rss_growth / 2**20:.1f} MB over {iterations} iterations"

    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for _ in range(iterations):
            step()
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert end - start < PY_HEAP_TOLERANCE, (
        f"Python heap grew {(end - start) / 1024:.0f} KiB over {iterations} iterations")


def f_hot(x, y):
    return (x * y).relu() + 1


def test_hot_path_refcounts_objects_and_heap():
    compiled = kiln.compile(f_hot)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    rc_x, rc_y = sys.getrefcount(x), sys.getrefcount(y)
    out = compiled(x, y)  # the cold call (trace) must not keep the arguments either
    assert_same(out, f_hot(x, y))
    out_eager = f_hot(x, y)
    assert sys.getrefcount(out) == sys.getrefcount(out_eager), "compiled output has extra references"
    del out, out_eager
    gc.collect()
    assert sys.getrefcount(x) == rc_x and sys.getrefcount(y) == rc_y

    def step():
        compiled(x, y)

    assert_no_growth(step, 10_000, check_rss=True)
    gc.collect()
    assert sys.getrefcount(x) == rc_x and sys.getrefcount(y) == rc_y
    s = stats()
    assert s["traces"] == 1 and s["cache_hits"] >= 20_000, s


def test_hot_path_rss():
    compiled = kiln.compile(f_hot)
    # 32x32 float tensors: leaking one output per call would add > 40 MB
    x, y = torch.randn(32, 32), torch.randn(32, 32)

    def step():
        compiled(x, y)

    assert_no_growth(step, 10_000, check_rss=True)


def test_fresh_inputs_each_call_released():
    compiled = kiln.compile(f_hot)
    refs = []

    def step():
        x, y = torch.randn(32, 32), torch.randn(32, 32)
        out = compiled(x, y)
        if len(refs) < 50:
            refs.append((weakref.ref(x), weakref.ref(y), weakref.ref(out)))

    assert_no_growth(step, 5_000, check_rss=True)
    gc.collect()
    assert all(r() is None for triple in refs for r in triple), "inputs/outputs kept alive"


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


def test_module_hot_path_no_leak():
    model = Small()
    compiled = kiln.compile(model)
    x = torch.randn(2, 8)
    rc_x = sys.getrefcount(x)
    assert_same(compiled(x), model(x))
    with torch.no_grad():
        assert_same(compiled(x), model(x))
    gc.collect()
    assert sys.getrefcount(x) == rc_x
    # steady state: both cache entries (grad and no_grad) exist from here on
    w = model.fc1.weight
    rc_w = sys.getrefcount(w)
    rc_model = sys.getrefcount(model)

    def step():
        with torch.no_grad():
            compiled(x)
        compiled(x)  # with autograd graph, freed when the output dies

    assert_no_growth(step, 3_000, check_rss=True)
    gc.collect()
    assert sys.getrefcount(x) == rc_x
    assert sys.getrefcount(w) == rc_w
    assert sys.getrefcount(model) == rc_model


def f_branchy(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def test_eager_fallback_path_no_leak():
    compiled = kiln.compile(f_branchy)
    pos_x, neg_x = torch.ones(4, 4), -torch.ones(4, 4)
    rc_p, rc_n = sys.getrefcount(pos_x), sys.getrefcount(neg_x)
    assert_same(compiled(pos_x), f_branchy(pos_x))
    assert_same(compiled(neg_x), f_branchy(neg_x))
    assert stats()["graph_breaks"] >= 1

    def step():
        compiled(pos_x)
        compiled(neg_x)

    assert_no_growth(step, 5_000, check_rss=True)
    gc.collect()
    assert sys.getrefcount(pos_x) == rc_p and sys.getrefcount(neg_x) == rc_n


def test_guard_failure_path_no_leak():
    # Two cached entries: every call with the second shape fails the first
    # entry's guards before hitting the second.
    compiled = kiln.compile(f_hot)
    a = (torch.randn(4, 4), torch.randn(4, 4))
    b = (torch.randn(2, 8), torch.randn(2, 8))
    t = (torch.randn(4, 4).t(), torch.randn(4, 4))  # non-contiguous: stride guard fails
    rcs = [sys.getrefcount(v) for v in (*a, *b, *t)]
    for args in (a, b, t):
        assert_same(compiled(*args), f_hot(*args))
    assert stats()["traces"] == 3

    def step():
        compiled(*a)
        compiled(*b)
        compiled(*t)

    assert_no_growth(step, 4_000, check_rss=True)
    assert stats()["traces"] == 3
    gc.collect()
    assert [sys.getrefcount(v) for v in (*a, *b, *t)] == rcs


def test_retrace_after_reset_no_leak():
    # The trace path itself: reset + trace + run, many times.
    compiled = kiln.compile(f_hot)
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    rc_x = sys.getrefcount(x)

    def step():
        kiln.reset()
        compiled(x, y)

    assert_no_growth(step, 300, warmup=20)
    assert stats()["traces"] == 1
    gc.collect()
    assert sys.getrefcount(x) == rc_x


def test_recompile_path_no_leak():
    # A new Python int each call: guard failure + trace, up to the cache limit,
    # then eager runs; reset periodically so the trace path runs again.
    def f(x, n):
        return x * n

    compiled = kiln.compile(f)
    x = torch.randn(3)
    rc_x = sys.getrefcount(x)
    counter = [0]

    def step():
        counter[0] += 1
        n = counter[0] % 12
        if n == 0:
            kiln.reset()
        compiled(x, n)

    assert_no_growth(step, 600, warmup=24)
    gc.collect()
    assert sys.getrefcount(x) == rc_x


def test_cache_limit_eager_path_no_leak():
    saved = kiln.config.cache_size_limit
    try:
        kiln.config.cache_size_limit = 2
        compiled = kiln.compile(f_hot, dynamic=False)
        args = [(torch.randn(n, 4), torch.randn(n, 4)) for n in (2, 3, 5)]
        rcs = [sys.getrefcount(t) for pair in args for t in pair]
        for pair in args:
            assert_same(compiled(*pair), f_hot(*pair))
        assert stats()["cache_limit_hits"] >= 1

        def step():
            for pair in args:
                compiled(*pair)

        assert_no_growth(step, 3_000, check_rss=True)
        gc.collect()
        assert [sys.getrefcount(t) for pair in args for t in pair] == rcs
    finally:
        kiln.config.cache_size_limit = saved


def f_print_free_unsupported(x):
    return x * x.sum().item()


def test_exception_paths_no_leak():
    compiled = kiln.compile(f_hot)
    strict = kiln.compile(f_print_free_unsupported, fullgraph=True)
    x = torch.randn(3)
    rc_x = sys.getrefcount(x)

    def step():
        try:
            compiled(x)  # missing argument
        except TypeError:
            pass
        try:
            strict(x)
        except kiln.Unsupported:
            pass

    assert_no_growth(step, 1_000, warmup=20)
    gc.collect()
    assert sys.getrefcount(x) == rc_x


def test_cache_does_not_keep_arguments_alive():
    compiled = kiln.compile(f_hot)
    x, y = torch.randn(5), torch.randn(5)
    rx, ry = weakref.ref(x), weakref.ref(y)
    out = compiled(x, y)
    ro = weakref.ref(out)
    compiled(x, y)
    del x, y, out
    gc.collect()
    assert rx() is None and ry() is None and ro() is None
    # the cache entry is still usable with new tensors
    x = torch.randn(5)
    assert_same(compiled(x, x), f_hot(x, x))
    assert stats()["traces"] == 1


def test_reset_releases_compiled_module_and_function():
    model = Small()
    compiled = kiln.compile(model)
    compiled(torch.randn(2, 8))

    captured = torch.randn(1000)

    def f(x):
        return x + captured[:3]

    cf = kiln.compile(f)
    cf(torch.randn(3))

    refs = [weakref.ref(model), weakref.ref(compiled), weakref.ref(f), weakref.ref(captured)]
    del model, compiled, f, cf, captured
    kiln.reset()
    gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    assert not alive, f"objects still alive after reset: {alive}"


def test_deleted_compiled_module_is_freed_without_reset():
    # Dropping the last user reference to a model (and its compiled wrapper)
    # frees it and its parameters even though kiln.reset() was never called:
    # the forward code object's cache must not own the module.
    model = Small()
    compiled = kiln.compile(model)
    compiled(torch.randn(2, 8))
    with torch.no_grad():
        compiled(torch.randn(3, 8))
    refs = [weakref.ref(model), weakref.ref(model.fc1.weight), weakref.ref(compiled)]
    del model, compiled
    gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    assert not alive, f"still alive without reset (0=model, 1=weight, 2=wrapper): {alive}"


def f_long(x):
    for _ in range(30):
        x = x * 1.01 + 0.5
    return x


def test_recompiling_same_function_repeatedly_no_growth():
    # A pattern seen in user code: kiln.compile(fn)(x) inside a loop. Each
    # wrapper dies right away; whatever kiln cached for it must not pile up.
    x = torch.randn(4)
    expected = f_long(x)

    def step():
        assert_same(kiln.compile(f_long)(x), expected)

    assert_no_growth(step, 1_500, warmup=50, check_rss=True)


def f_dynamic(x):
    b = x.shape[0]
    return x.view(b, -1).relu() * b


def test_dynamic_shapes_path_no_leak():
    compiled = kiln.compile(f_dynamic)
    inputs = [torch.randn(n, 2, 3) for n in (2, 3, 5, 8, 13)]
    for x in inputs:
        assert_same(compiled(x), f_dynamic(x))
    rcs = [sys.getrefcount(x) for x in inputs]
    i = [0]

    def step():
        compiled(inputs[i[0] % len(inputs)])
        i[0] += 1

    assert_no_growth(step, 5_000)
    gc.collect()
    assert [sys.getrefcount(x) for x in inputs] == rcs
    s = stats()
    assert s["traces"] == 2, s


def f_decode_step(x, cache, w1, w2):
    # A token through two projections and a growing cache: static regions
    # (Note [Static regions]), the cat and the attention replayed eagerly.
    keys = torch.cat([cache, x], dim=0)
    h = torch.softmax(x @ keys.t(), dim=-1) @ keys
    y = torch.tanh(h @ w1) * 2.0 + 1.0
    return torch.relu(y @ w2) - 0.5, keys


def test_static_regions_path_no_leak():
    w1, w2 = torch.randn(8, 8), torch.randn(8, 8)
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled = kiln.compile(f_decode_step, backend="inductor" if kernels else "aot_eager")
    x = torch.randn(1, 8)
    caches = [torch.randn(n, 8) for n in (3, 4, 6, 9, 14)]
    with torch.no_grad():
        for cache in caches:
            assert_same(compiled(x, cache, w1, w2), f_decode_step(x, cache, w1, w2))
    rcs = [sys.getrefcount(c) for c in caches] + [sys.getrefcount(x), sys.getrefcount(w1)]
    i = [0]

    def step():
        with torch.no_grad():
            compiled(x, caches[i[0] % len(caches)], w1, w2)
        i[0] += 1

    assert_no_growth(step, 3_000)
    gc.collect()
    assert [sys.getrefcount(c) for c in caches] + [sys.getrefcount(x), sys.getrefcount(w1)] == rcs
    s = kiln.stats()
    assert s["traces"] == 2 and s["static_regions"] == 1 and s["size_instances"] == 0, s


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        return (x * self.w).tanh().exp()


def test_training_step_through_kiln_autograd_no_leak():
    model = _Scale()
    compiled = kiln.compile(model, backend="aot_eager")
    x = torch.randn(8, 16)
    rc_x = sys.getrefcount(x)

    def step():
        model.w.grad = None
        compiled(x).sum().backward()

    step()
    assert kiln.stats()["autograd_graphs"] == 1, kiln.stats()
    assert_no_growth(step, 2_000)
    gc.collect()
    assert sys.getrefcount(x) == rc_x


class _Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 + x * 0


def test_traced_function_backward_no_leak():
    # Note [Traced Function backwards]: the call node and the backward graph
    # it holds live with the compiled graph; a step releases what it made,
    # and reset frees the node (its capsule) with the graph.
    def f(x):
        return _Doubled.apply(x).sin().sum()

    compiled = kiln.compile(f, backend="inductor")
    x = torch.randn(8, 16, requires_grad=True)
    rc_x = sys.getrefcount(x)

    def step():
        x.grad = None
        compiled(x).backward()

    step()
    assert kiln.stats()["autograd_graphs"] == 1, kiln.stats()
    assert_no_growth(step, 2_000)
    gc.collect()
    assert sys.getrefcount(x) == rc_x
    calls = [o for o in gc.get_objects() if type(o).__name__ == "TracedFunctionCall"]
    assert calls, "the compiled graph holds its TracedFunctionCall"
    probe = weakref.ref(calls[0]) if hasattr(calls[0], "__weakref__") else None
    del calls
    kiln.reset()
    gc.collect()
    if probe is not None:
        assert probe() is None, "reset keeps a TracedFunctionCall alive"
