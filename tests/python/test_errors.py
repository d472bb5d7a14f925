"""Code the tracer cannot handle, bad arguments, and errors raised by user code.

Unsupported code with fullgraph=False must still give eager's results (and
side effects exactly once) while recording why; with fullgraph=True it raises
kiln.Unsupported naming the reason and file:line. Bad inputs raise ordinary
Python errors, never crash.
"""
import inspect
import os
import re

import pytest
import torch

import kiln
from conftest import assert_same, stats, where


def data_dependent_branch(x):
    y = x * 2
    if y.sum() > 0:  # MARK-branch
        return y + 1
    return y - 1


def calls_print(x):
    y = x.relu()
    print("kiln-test-print", y.shape[0])  # MARK-print
    return y * 3


def calls_item(x):
    s = x.abs().sum().item()  # MARK-item
    return x / s


def data_dependent_loop(x):
    n = 0
    while x.max() > 1:  # MARK-while
        x = x / 2
        n += 1
    return x, n


UNSUPPORTED = [
    (data_dependent_branch, "MARK-branch"),
    (calls_print, "MARK-print"),
    (calls_item, "MARK-item"),
    (data_dependent_loop, "MARK-while"),
]
UNSUPPORTED_IDS = ["branch", "print", "item", "while"]


def fallback_inputs():
    # clearly positive and negative sums so both sides of each branch run
    return [torch.rand(4) + 1, -torch.rand(4) - 1, torch.randn(4) * 5, torch.rand(4) + 2]


def test_unsupported_is_runtime_error():
    assert issubclass(kiln.Unsupported, RuntimeError)


@pytest.mark.parametrize("fn,marker", UNSUPPORTED, ids=UNSUPPORTED_IDS)
def test_unsupported_code_breaks_the_graph(fn, marker, capsys):
    # The instruction kiln cannot trace runs in CPython between graphs.
    compiled = kiln.compile(fn)
    for x in fallback_inputs():
        out_c = compiled(x.clone())
        printed_c = capsys.readouterr().out
        out_e = fn(x.clone())
        printed_e = capsys.readouterr().out
        assert_same(out_c, out_e)
        assert printed_c == printed_e  # side effects happen exactly once
    s = stats()
    assert s["graph_breaks"] >= 1, s
    if marker != "MARK-while":
        assert s["eager_runs"] == 0, s
    # A break inside the loop cannot resume (it would nest a new frame per
    # iteration): the loop's frame runs eagerly, as the reason says.


@pytest.mark.parametrize("fn,marker", UNSUPPORTED, ids=UNSUPPORTED_IDS)
def test_unsupported_fullgraph_raises_with_location(fn, marker, capsys):
    compiled = kiln.compile(fn, fullgraph=True)
    with pytest.raises(kiln.Unsupported) as info:
        compiled(torch.randn(4) + 1)
    msg = str(info.value)
    assert where(fn, marker) in msg, f"expected {where(fn, marker)!r} in {msg!r}"
    if fn is calls_print:
        assert "print" in msg
        # the tracer must not have run the print while tracing
        assert "kiln-test-print" not in capsys.readouterr().out
    if fn is calls_item:
        assert "item" in msg
    # a fullgraph failure is not cached as "run eagerly": it raises every time
    with pytest.raises(kiln.Unsupported):
        compiled(torch.randn(4) + 1)


@pytest.mark.parametrize("fn,marker", UNSUPPORTED, ids=UNSUPPORTED_IDS)
def test_explain_reports_break(fn, marker, capsys):
    report = kiln.explain(fn)(torch.randn(4) + 1)
    assert isinstance(report.graph_count, int)
    assert isinstance(report.graph_break_count, int)
    assert report.graph_break_count >= 1
    assert len(report.break_reasons) >= 1
    assert all(isinstance(r, str) for r in report.break_reasons)
    assert any(where(fn, marker) in r for r in report.break_reasons), report.break_reasons
    fname = os.path.basename(__file__)
    assert all(fname in r for r in report.break_reasons), report.break_reasons


def clean(x):
    return torch.sigmoid(x.relu()) * 2


def test_explain_clean_function():
    report = kiln.explain(clean)(torch.randn(3, 3))
    assert report.graph_count == 1
    assert report.graph_break_count == 0
    assert list(report.break_reasons) == []
    assert len(report.graphs) == 1
    text = report.graphs[0]
    assert isinstance(text, str)
    assert "relu" in text and "sigmoid" in text, text


def test_explain_with_kwargs_and_module():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    report = kiln.explain(model)(torch.randn(2, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert "relu" in report.graphs[0]

    def f(x, *, scale):
        return x.exp() * scale

    report = kiln.explain(f)(torch.randn(2), scale=3.0)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert "exp" in report.graphs[0]


def inner_breaks(x):
    print("inner")  # MARK-inner-print
    return x + 1


def outer_calls_breaking_helper(x):
    return inner_breaks(x * 2) * 3


def test_break_inside_inlined_helper_is_located_in_helper(capsys):
    compiled = kiln.compile(outer_calls_breaking_helper)
    x = torch.randn(3)
    assert_same(compiled(x), outer_calls_breaking_helper(x))
    assert capsys.readouterr().out == "inner\ninner\n"
    with pytest.raises(kiln.Unsupported) as info:
        kiln.compile(outer_calls_breaking_helper, fullgraph=True)(x)
    assert where(inner_breaks, "MARK-inner-print") in str(info.value)
    report = kiln.explain(outer_calls_breaking_helper)(x)
    assert report.graph_break_count >= 1
    assert any(where(inner_breaks, "MARK-inner-print") in r for r in report.break_reasons)


# ---------------------------------------------------------------------------
# kiln.disable
# ---------------------------------------------------------------------------

def pure_helper(x):
    return x.sin() * 2


@kiln.disable
def disabled_helper(x):
    return x.sin() * 2


def breaking_caller_plain(x):
    y = x + 1
    print("caller")
    return pure_helper(y)


def breaking_caller_disabled(x):
    y = x + 1
    print("caller")
    return disabled_helper(y)


def test_disable_prevents_compiling_after_a_graph_break(capsys):
    # Control: a plain helper called after a graph break gets compiled.
    x = torch.randn(3)
    plain = kiln.explain(breaking_caller_plain)(x)
    assert any("sin" in graph for graph in plain.graphs), plain
    compiled = kiln.compile(breaking_caller_plain)
    assert_same(compiled(x), breaking_caller_plain(x))
    kiln.reset()
    # The disabled helper never is: no graph holds its ops.
    explained = kiln.explain(breaking_caller_disabled)(x)
    assert explained.graph_break_count >= 2, explained  # print, then the disabled call
    assert not any("sin" in graph for graph in explained.graphs), explained
    compiled = kiln.compile(breaking_caller_disabled)
    for _ in range(3):
        x = torch.randn(3)
        assert_same(compiled(x), breaking_caller_disabled(x))


def test_disable_called_from_clean_compiled_function():
    def f(x):
        return disabled_helper(x * 3) + x

    compiled = kiln.compile(f)
    for _ in range(3):
        x = torch.randn(4)
        assert_same(compiled(x), f(x))


def test_disable_returns_eager_callable():
    def g(x, k=2):
        return x * k

    dg = kiln.disable(g)
    x = torch.randn(3)
    assert_same(dg(x), g(x))
    assert_same(dg(x, k=5), g(x, k=5))
    compiled = kiln.compile(dg)
    assert_same(compiled(x), g(x))
    assert stats()["traces"] == 0


# ---------------------------------------------------------------------------
# Bad arguments to kiln.compile and to compiled functions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("obj,type_name", [(42, "int"), ("abc", "str"), (None, None),
                                           ([1, 2], "list"), (3.5, "float")],
                         ids=["int", "str", "none", "list", "float"])
def test_compile_non_callable_type_error(obj, type_name):
    if obj is None:
        # compile(None) is the bare decorator factory form; not an error
        deco = kiln.compile(None)
        compiled = deco(clean)
        x = torch.randn(2)
        assert_same(compiled(x), clean(x))
        return
    with pytest.raises(TypeError) as info:
        kiln.compile(obj)
    assert type_name in str(info.value)


def test_unknown_backend_value_error():
    with pytest.raises(ValueError) as info:
        kiln.compile(clean, backend="no-such-backend")
    msg = str(info.value)
    assert "eager" in msg and "inductor" in msg
    with pytest.raises(ValueError):
        kiln.compile(backend="no-such-backend")(clean)


def test_unknown_mode_value_error():
    with pytest.raises(ValueError) as info:
        kiln.compile(clean, mode="ludicrous")
    msg = str(info.value)
    for valid in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert valid in msg, msg
    with pytest.raises(ValueError):
        kiln.compile(mode="ludicrous")(clean)


def wrong_arity(x, y):
    return x + y


@pytest.mark.parametrize("call", [
    lambda f, x: f(x),
    lambda f, x: f(x, x, x),
    lambda f, x: f(x, z=x),
    lambda f, x: f(x, x, y=x),
    lambda f, x: f(),
], ids=["too_few", "too_many", "unexpected_kw", "duplicate", "none"])
def test_wrong_arguments_same_type_error_as_eager(call):
    compiled = kiln.compile(wrong_arity)
    x = torch.randn(2)
    with pytest.raises(TypeError) as eager_info:
        call(wrong_arity, x)
    for _ in range(2):
        with pytest.raises(TypeError) as compiled_info:
            call(compiled, x)
        assert str(compiled_info.value) == str(eager_info.value)
    # and the compiled function still works afterwards
    assert_same(compiled(x, x), wrong_arity(x, x))


def test_module_wrong_arguments_type_error():
    model = torch.nn.Linear(3, 3)
    compiled = kiln.compile(model)
    with pytest.raises(TypeError) as eager_info:
        model(torch.randn(3), torch.randn(3))
    with pytest.raises(TypeError) as compiled_info:
        compiled(torch.randn(3), torch.randn(3))
    assert str(compiled_info.value) == str(eager_info.value)


def shape_mismatch(x, y):
    return x @ y


def test_runtime_error_from_torch_propagates():
    compiled = kiln.compile(shape_mismatch)
    with pytest.raises(RuntimeError):
        compiled(torch.randn(2, 3), torch.randn(4, 5))
    # valid shapes still work on the same compiled function
    a, b = torch.randn(2, 3), torch.randn(3, 5)
    assert_same(compiled(a, b), shape_mismatch(a, b))


def raises_on_flag(x, flag):
    if flag:
        raise ValueError(f"bad flag for tensor of size {x.shape[0]}")
    return x + 1


def test_user_exception_propagates():
    compiled = kiln.compile(raises_on_flag)
    x = torch.randn(3)
    assert_same(compiled(x, False), raises_on_flag(x, False))
    for _ in range(2):
        with pytest.raises(ValueError, match="bad flag for tensor of size 3"):
            compiled(x, True)
    assert_same(compiled(x, False), raises_on_flag(x, False))


def test_non_tensor_inputs_mix():
    def f(x, items, mapping):
        return x * items[1] + mapping["b"], len(items)

    compiled = kiln.compile(f)
    x = torch.randn(3)
    for items, mapping in [((1, 2), {"b": 3}), ((1, 2), {"b": 3}), ((4, 5, 6), {"b": -1.5})]:
        assert_same(compiled(x, items, mapping), f(x, items, mapping))


def uses_with_block(x):
    y = x * 2
    with torch.no_grad():  # MARK-with
        z = y + 1
    return z


def uses_try_block(x):
    try:  # MARK-try
        return x.relu()
    except RuntimeError:
        return x


@pytest.mark.parametrize("fn", [uses_with_block, uses_try_block], ids=["with", "try"])
def test_every_unsupported_reason_has_a_location(fn):
    # Whatever kiln cannot trace, the error and explain() say where: file:line
    # inside the function.
    x = torch.randn(3, requires_grad=True)
    compiled = kiln.compile(fn)
    assert_same(compiled(x), fn(x))
    lines, first = inspect.getsourcelines(fn)
    last = first + len(lines) - 1
    pattern = re.compile(re.escape(os.path.basename(__file__)) + r":(\d+)")

    def located(text):
        return any(first <= int(m) <= last for m in pattern.findall(text))

    try:
        kiln.compile(fn, fullgraph=True)(x)
    except kiln.Unsupported as e:
        assert located(str(e)), f"no {os.path.basename(__file__)}:LINE in {str(e)!r}"
    report = kiln.explain(fn)(x)
    for reason in report.break_reasons:
        assert located(reason), f"no {os.path.basename(__file__)}:LINE in {reason!r}"
