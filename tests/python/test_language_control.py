"""Control flow beyond if/for: `match` statements over Python values, and
try/except/finally whose body does not raise (traced), does raise (the
frame runs eagerly so the handler runs) or needs a break (no break inside
the try). Each compared with eager over several calls."""
import collections
import dataclasses
import threading

import pytest
import torch

import kiln
from conftest import assert_same, check_compiled, delta, stats

Point = collections.namedtuple("Point", "x y")


@dataclasses.dataclass
class Box:
    w: int
    h: int


def match_values(x, p):
    match p:
        case 0:
            return x
        case "double":
            return x * 2
        case (a, b):
            return x + a + b
        case [a, *rest]:
            return x * a + len(rest)
        case {"scale": s, **others}:
            return x * s + len(others)
        case Point(x=px, y=py) if px > 0:
            return x + px * py
        case Box(w, h):
            return x * w - h
        case int() | float() as n:
            return x - n
        case _:
            return -x


@pytest.mark.parametrize("subject", [
    0, "double", (1, 2), [3, 4, 5], {"scale": 2, "k": 1}, Point(2, 3), Point(-1, 3),
    Box(2, 5), 7, 2.5, "other", None,
], ids=repr)
def test_match_patterns(subject):
    compiled = kiln.compile(match_values, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x, subject), match_values(x, subject))
    assert stats()["traces"] == 1


def match_shape(x):
    match x.shape:
        case (n,):
            return x * n
        case (n, m) if n == m:
            return x @ x
        case (n, m):
            return x.sum(0) * m
    return x


def test_match_on_tensor_shapes():
    check_compiled(match_shape, lambda: (torch.randn(4, 4),))
    kiln.reset()
    check_compiled(match_shape, lambda: (torch.randn(3, 5),))


def match_tensor_class(x, y):
    match x:
        case torch.Tensor(ndim=2):
            return x.t() + y
        case torch.Tensor():
            return x + y
    return y


def test_match_class_pattern_on_tensor():
    check_compiled(match_tensor_class, lambda: (torch.randn(2, 2), torch.randn(2)))


# ---------------------------------------------------------------------------
# try / except / finally

def try_no_raise(x):
    try:
        y = x + 1
    except ValueError:
        y = x
    finally:
        y = y * 2
    return y.relu()


def try_finally_return(x, log):
    try:
        return x.sin()
    finally:
        log.append(1)


def test_try_except_finally_traced_when_body_does_not_raise():
    check_compiled(try_no_raise, lambda: (torch.randn(4),))


def test_try_finally_runs_on_the_normal_path():
    compiled = kiln.compile(try_finally_return, fullgraph=True)
    log_c, log_e = [], []
    x = torch.randn(3)
    for _ in range(3):
        assert_same(compiled(x, log_c), try_finally_return(x, log_e))
    assert log_c == log_e == [1, 1, 1]


def try_body_raises(x, table):
    try:
        k = table["missing"]
    except KeyError:
        k = 3
    return x * k


def test_try_body_that_raises_runs_the_handler_eagerly():
    compiled = kiln.compile(try_body_raises)
    for _ in range(3):
        x = torch.randn(3)
        assert_same(compiled(x, {"a": 1}), try_body_raises(x, {"a": 1}))
    reasons = kiln.explain(try_body_raises)(torch.randn(3), {"a": 1}).break_reasons
    assert any("KeyError" in r and "inside a try block" in r for r in reasons), reasons


def try_with_break(x):
    y = x + 1
    try:
        print("inside")
        y = y * 2
    except RuntimeError:
        y = y - 1
    return y


def test_no_graph_break_inside_a_try_block(capsys):
    compiled = kiln.compile(try_with_break)
    x = torch.randn(3)
    assert_same(compiled(x), try_with_break(x))
    assert stats()["graph_breaks"] == 0
    reasons = kiln.explain(try_with_break)(x).break_reasons
    assert any("inside a try block" in r for r in reasons), reasons


def helper_handles(t, d):
    try:
        return t * d["k"]
    except KeyError:
        return t


def try_in_callee(x, d):
    return helper_handles(x + 1, d) - 1


def test_try_in_inlined_callee():
    compiled = kiln.compile(try_in_callee)
    for d in ({"k": 2}, {}, {"k": 2}):
        x = torch.randn(3)
        assert_same(compiled(x, d), try_in_callee(x, d))


def try_then_break(x):
    try:
        y = x * 2
    finally:
        y = y + 1
    print("after the try")
    return y.cos()


def test_break_after_a_try_block(capsys):
    compiled = kiln.compile(try_then_break)
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), try_then_break(x))


LOCK = threading.Lock()


def unmodelled_with(x):
    # A context implemented in C: kiln cannot see what entering it does.
    with LOCK:
        y = x + 1
    return y * 2


def test_with_of_unmodelled_context_manager_stays_clean():
    compiled = kiln.compile(unmodelled_with)
    before = stats()
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), unmodelled_with(x))
    with pytest.raises(kiln.Unsupported):
        kiln.compile(unmodelled_with, fullgraph=True)(torch.randn(3))


# ---------------------------------------------------------------------------
# with torch.autocast(...)

def autocast_block(x, w):
    with torch.autocast("cpu"):
        y = x @ w
        z = torch.relu(y) + 1
    return y.dtype, z, z.float().sum(0)


def cpu_amp_block(x, w):
    with torch.cpu.amp.autocast(dtype=torch.bfloat16):
        y = torch.mm(x, w)
        with torch.autocast("cpu", enabled=False):
            inner = torch.mm(x, w)
    return y, inner, y.dtype == torch.bfloat16


@pytest.mark.parametrize("fn", [autocast_block, cpu_amp_block])
def test_autocast_blocks_traced_with_autocast_dtypes(fn):
    check_compiled(fn, lambda: (torch.randn(4, 3), torch.randn(3, 5)))
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.cpu_semantics("torch.autocast('cpu')")
def test_autocast_graph_enters_and_leaves():
    graphs = kiln.explain(autocast_block)(torch.randn(4, 3), torch.randn(3, 5)).graphs
    text = "\n".join(str(g) for g in graphs)
    assert "kiln.enter_autocast('cpu', torch.bfloat16, True, True)" in text, text
    assert "kiln.exit_autocast" in text and "bf16[4, 5]" in text, text


def autocast_raises_at_runtime(x, idx):
    with torch.autocast("cpu"):
        y = x.index_select(0, idx)  # out-of-range indices fail only on real data
    return y


@pytest.mark.cpu_semantics("torch.autocast('cpu'); an out-of-bounds index raises at the call")
def test_error_inside_autocast_block_restores_state():
    compiled = kiln.compile(autocast_raises_at_runtime)
    x = torch.randn(3, 2)
    assert_same(compiled(x, torch.tensor([0, 2])), autocast_raises_at_runtime(x, torch.tensor([0, 2])))
    with pytest.raises((IndexError, RuntimeError)):
        compiled(x, torch.tensor([0, 7]))
    assert not torch.is_autocast_enabled("cpu")


def autocast_with_break(x, w):
    with torch.autocast("cpu"):
        y = x @ w
        print("inside autocast")
    return y


@pytest.mark.cpu_semantics("torch.autocast('cpu')")
def test_trace_stopping_inside_autocast_leaves_it(capsys):
    compiled = kiln.compile(autocast_with_break)
    x, w = torch.randn(2, 3), torch.randn(3, 3)
    assert_same(compiled(x, w), autocast_with_break(x, w))
    assert not torch.is_autocast_enabled("cpu")


def formats_with_locals(x):
    name = "n"
    y = x + 1
    text = "{name}".format(**locals())
    return y * len(text)


def test_locals_is_never_run_at_a_graph_break():
    # Run by a transformed code or resume function, locals() would return
    # kiln's own slots: the frame runs eagerly instead.
    compiled = kiln.compile(formats_with_locals)
    x = torch.randn(3)
    assert_same(compiled(x), formats_with_locals(x))
    assert stats()["graph_breaks"] == 0
