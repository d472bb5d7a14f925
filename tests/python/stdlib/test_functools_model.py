"""functools inside compiled code (stdlib/functools_model.cpp): partial
objects, made before the call or inside it, are called by calling their
function with the stored arguments; reduce folds its function over the
items. Each step is traced like any call (inlined or a graph node)."""
import functools
import operator

import torch
import torch.nn.functional as F

import kiln
from conftest import assert_same, check_compiled, stats

GELU_TANH = functools.partial(F.gelu, approximate="tanh")


def scale_then_shift(x, scale, shift=0.0):
    return x * scale + shift


SCALE_BY_3 = functools.partial(scale_then_shift, scale=3.0)


def partials_made_before(x):
    return GELU_TANH(x), SCALE_BY_3(x), SCALE_BY_3(x, shift=1.0), SCALE_BY_3(x, scale=0.5)


def test_partials_made_before_the_call():
    check_compiled(partials_made_before, lambda: (torch.randn(4),))


def partials_made_inside(x, y):
    add_y = functools.partial(torch.add, y)
    clamp = functools.partial(torch.clamp, min=-0.5)
    twice = functools.partial(functools.partial(scale_then_shift, x), 2.0)
    local = functools.partial(lambda a, b, c=0: a * b + c, c=1)
    return add_y(x), clamp(x, max=0.5), twice(shift=3.0), local(x, y)


def test_partials_made_inside_the_call():
    check_compiled(partials_made_inside, lambda: (torch.randn(3), torch.randn(3)))


def reductions(xs, x):
    total = functools.reduce(torch.add, xs)
    product = functools.reduce(operator.mul, xs, x)
    numbers = functools.reduce(lambda a, b: a * 10 + b, [1, 2, 3])
    chained = functools.reduce(lambda acc, t: torch.maximum(acc, t.relu()), xs[1:], xs[0])
    return total, product, numbers, chained


def test_reduce_over_tensors_and_numbers():
    check_compiled(reductions, lambda: ([torch.randn(3) for _ in range(4)], torch.randn(3)))


def test_partial_made_before_is_guarded():
    holder = {"act": functools.partial(F.leaky_relu, negative_slope=0.1)}

    def act(x):
        return holder["act"](x)

    compiled = kiln.compile(act)
    x = torch.randn(5)
    assert_same(compiled(x), act(x))
    holder["act"] = functools.partial(F.leaky_relu, negative_slope=0.3)
    assert_same(compiled(x), act(x))
    assert stats()["traces"] == 2


def partial_alive_across_a_break(x):
    act = functools.partial(F.gelu, approximate="tanh")
    y = act(x)
    print("between graphs")
    return act(y) + 1


def test_partial_rebuilt_at_a_graph_break(capsys):
    compiled = kiln.compile(partial_alive_across_a_break)
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), partial_alive_across_a_break(x))
    explained = kiln.explain(partial_alive_across_a_break)(torch.randn(3))
    assert explained.graph_count == 2 and explained.graph_break_count == 1, str(explained)
    assert "print()" in explained.break_reasons[0]


def unsupported_functools(x):
    y = x + 1
    cached = functools.lru_cache(maxsize=None)(lambda n: n * 2)
    return y * cached(3)


def reduce_of_nothing(x):
    return functools.reduce(torch.add, [], x) + functools.reduce(torch.add, [])


def test_unmodelled_functools_breaks_cleanly():
    compiled = kiln.compile(unsupported_functools)
    x = torch.randn(2)
    assert_same(compiled(x), unsupported_functools(x))
    explained = kiln.explain(unsupported_functools)(x)
    assert explained.graph_break_count == 1 and "lru_cache" in explained.break_reasons[0]
    # An empty reduce without a start raises TypeError in kiln as in Python.
    for fn in (kiln.compile(reduce_of_nothing), reduce_of_nothing):
        try:
            fn(torch.randn(2))
        except TypeError as error:
            assert "empty" in str(error)
        else:
            raise AssertionError("expected TypeError")


@functools.lru_cache
def cached_scale(n):
    return n * 2.0


@functools.cache
def features_available():
    return True


def cached_calls(x):
    # transformers' is_torch_greater_or_equal("2.9.0") and is_*_available().
    y = x * cached_scale(3)
    if features_available():
        y = y + 1
    return y


def test_lru_cache_wrappers_trace_as_the_function_they_wrap():
    check_compiled(cached_calls, lambda: (torch.randn(4),))


@functools.lru_cache
def package_present(name):
    # What transformers' is_*_available() does on its first call: code no
    # trace enters (vars() of a module); the cached answer is a constant.
    return name in vars(__import__("sys"))["modules"]


def guarded_by_a_cached_check(x):
    return x * 2 if package_present("torch") else x


def test_lru_cache_calls_with_constant_arguments_fold_to_the_cached_result():
    check_compiled(guarded_by_a_cached_check, lambda: (torch.randn(4),))
