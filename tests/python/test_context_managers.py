"""`with` over contexts whose class defines __enter__/__exit__ in Python
(contextlib.nullcontext, a library's own flag or timer): traced inline as
CPython runs them, results and the contexts' state as eager's (Note
[Python context managers])."""
import contextlib

import pytest

import torch

import kiln
from conftest import assert_same


class Scale:
    """Sets a factor while the block runs and counts entries."""

    def __init__(self, factor):
        self.factor = factor
        self.active = False
        self.entries = 0

    def __enter__(self):
        self.active = True
        self.entries += 1
        return self

    def __exit__(self, exc_type, exc, tb):
        self.active = False
        return False


def maybe_context(flag):
    # transformers' maybe_autocast: a real context or a no-op one.
    return torch.no_grad() if flag else contextlib.nullcontext()


def null_context(x):
    with contextlib.nullcontext():
        y = x * 2
    return y + 1


def chosen_context(x):
    with maybe_context(False):
        y = x.sin()
    with maybe_context(True):
        z = y * 3
    return y, z


def context_made_in_frame(x):
    with Scale(3.0) as s:
        y = x * s.factor
        inside = s.active
    return y, inside, s.active, s.entries


def context_passed_in(x, ctx):
    with ctx as entered:
        y = x * entered.factor
    return y + 1


def nested(x):
    with contextlib.nullcontext(x) as a:
        with Scale(2.0) as s:
            b = a * s.factor
    return b


def run_both(fn, *args):
    want = fn(*args)
    kiln.reset()
    got = kiln.compile(fn)(*args)
    return got, want


def test_python_contexts_trace_whole_and_match_eager():
    x = torch.randn(5)
    for fn in (null_context, chosen_context, context_made_in_frame, nested):
        explained = kiln.explain(fn)(x)
        assert explained.graph_break_count == 0, (fn.__name__, explained.break_reasons)
        got, want = run_both(fn, x)
        assert_same(got, want)


def test_a_context_passed_in_sees_its_enter_and_exit():
    x = torch.randn(4)
    want_ctx, got_ctx = Scale(2.0), Scale(2.0)
    assert kiln.explain(context_passed_in)(x, Scale(2.0)).graph_break_count == 0
    want = context_passed_in(x, want_ctx)
    kiln.reset()
    compiled = kiln.compile(context_passed_in)
    got = compiled(x, got_ctx)
    assert_same(got, want)
    assert (got_ctx.active, got_ctx.entries) == (want_ctx.active, want_ctx.entries) == (False, 1)
    got = compiled(x, got_ctx)  # the second call replays the stores again
    assert got_ctx.entries == 2 and not got_ctx.active


def test_a_break_inside_a_python_context_runs_the_frame_eagerly_and_correctly():
    def f(x):
        with Scale(2.0) as s:
            y = x * s.factor
            print_free = y.sum().item()  # a data-dependent read breaks the graph
        return y + print_free

    x = torch.randn(3)
    got, want = run_both(f, x)
    assert_same(got, want)


class Flags:
    scaling = False


FLAGS = Flags()


@contextlib.contextmanager
def doubled(value):
    yield value * 2


@contextlib.contextmanager
def scaling_on():
    FLAGS.scaling = True
    try:
        yield
    finally:
        FLAGS.scaling = False


def generator_context(x):
    with doubled(3.0) as factor:
        y = x * factor
    return y


def generator_context_with_finally(x):
    with scaling_on():
        y = x * 2 if FLAGS.scaling else x
    return y, FLAGS.scaling


def test_contextmanager_generators_trace_whole_and_match_eager():
    x = torch.randn(4)
    for fn in (generator_context, generator_context_with_finally):
        explained = kiln.explain(fn)(x)
        assert explained.graph_break_count == 0, (fn.__name__, explained.break_reasons)
        got, want = run_both(fn, x)
        assert_same(got, want)
    assert FLAGS.scaling is False


def test_stop_iteration_inside_a_generator_is_a_runtime_error_as_in_eager():
    # PEP 479: a generator that lets StopIteration escape raises RuntimeError.
    def gen(items):
        it = iter(items)
        yield next(it)
        yield next(it)

    def f(x):
        total = x
        for item in gen([1.0]):
            total = total + item
        return total

    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="StopIteration"):
        f(x)
    with pytest.raises(RuntimeError, match="StopIteration"):
        kiln.compile(f)(x)
