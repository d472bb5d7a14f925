"""Stores to caller-visible state inside compiled code (attributes of
modules and objects, globals) happen once per call, in order, with later
reads in the same call seeing them; also across graph breaks."""
import contextlib
import copy
import io
import types

import torch
from torch import nn

import kiln
from conftest import assert_same, stats

STEP = 0
STATE = types.SimpleNamespace(last=None, calls=0)


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.count = 0

    def forward(self, x):
        global STEP
        y = self.fc(x)
        self.count = self.count + 1
        self.last_mean = y.mean()
        STEP = STEP + 1
        STATE.calls = STATE.calls + 1
        STATE.last = y.sum()
        return y * self.count  # reads the value stored above


def test_module_and_global_stores_match_eager():
    global STEP
    eager_model = Counting()
    compiled_model = copy.deepcopy(eager_model)
    compiled = kiln.compile(compiled_model, fullgraph=True)
    x = torch.randn(2, 3)
    for _ in range(3):
        STEP, STATE.calls = 0, 0
        got = compiled(x)
        compiled_state = (STEP, STATE.calls, STATE.last)
        STEP, STATE.calls = 0, 0
        want = eager_model(x)
        eager_state = (STEP, STATE.calls, STATE.last)
        assert_same(got, want)
        assert compiled_state[:2] == eager_state[:2] == (1, 1)
        assert_same(compiled_state[2], eager_state[2])
        assert compiled_model.count == eager_model.count
        assert_same(compiled_model.last_mean, eager_model.last_mean)
    assert stats()["graph_breaks"] == 0 and stats()["unsupported"] == 0


def store_then_break(x):
    global STEP
    STEP = STEP + 10
    STATE.last = x * 2
    print("between", STEP)
    return STATE.last + STEP


def test_stores_before_a_graph_break_happen_first():
    global STEP
    compiled = kiln.compile(store_then_break)
    for _ in range(2):
        STEP = 1
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            got = compiled(torch.ones(2))
        assert out.getvalue() == "between 11\n"  # the print saw the store
        assert STEP == 11
        assert_same(STATE.last, torch.full((2,), 2.0))
        assert_same(got, torch.full((2,), 13.0))
    assert stats()["graph_breaks"] >= 1


def test_store_of_registered_parameter_breaks_instead():
    class Swaps(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        def forward(self, x):
            self.w = nn.Parameter(x.detach().clone())
            return self.w * 2

    model = Swaps()
    compiled = kiln.compile(model)
    x = torch.randn(2)
    assert_same(compiled(x), x * 2)
    assert_same(model.w.data, x)


def mutates_arguments(x, xs, d):
    xs.append(x * 2)
    xs[0] = xs[0] + 1
    d["k"] = x.sum()
    d.pop("drop", None)
    alias = xs
    alias.reverse()
    return len(xs), x + 1


def mutates_across_a_break(x, xs):
    xs.append(x)
    print("between", len(xs))
    xs.append(x * 3)
    return xs[-1]


def make_args():
    return torch.ones(2), [torch.zeros(2)], {"drop": 1, "a": 2}


def test_argument_list_and_dict_mutations_are_written_back():
    compiled = kiln.compile(mutates_arguments, fullgraph=True)
    for _ in range(3):
        got_args, want_args = make_args(), make_args()
        got = compiled(*got_args)
        want = mutates_arguments(*want_args)
        assert_same(got, want)
        assert_same(got_args[1], want_args[1])
        assert_same(got_args[2], want_args[2])
        assert list(got_args[2]) == list(want_args[2])  # key order too
    assert stats()["traces"] == 1


def test_argument_mutation_across_a_graph_break():
    compiled = kiln.compile(mutates_across_a_break)
    for _ in range(2):
        xs_c, xs_e = [], []
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            got = compiled(torch.ones(2), xs_c)
        assert out.getvalue() == "between 1\n"
        want = mutates_across_a_break(torch.ones(2), xs_e)
        assert_same(got, want)
        assert_same(xs_c, xs_e)
    assert stats()["graph_breaks"] >= 1


# Note [Deferred logging]: logger calls run after the graph, in order.
LOG = __import__("logging").getLogger("kiln.tests.deferred")


def logs_around_a_break(x):
    LOG.warning("before %s", 1)
    y = x * 2
    print("between")
    LOG.warning("after %s", 2)
    return y + 1


def test_logger_calls_run_after_the_graph_each_call(caplog):
    import logging

    def fn(x):
        LOG.warning("scaling by %s", 2)
        return x * 2

    compiled = kiln.compile(fn)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        for _ in range(3):
            assert_same(compiled(torch.ones(2)), torch.ones(2) * 2)
    assert [r.getMessage() for r in caplog.records] == ["scaling by 2"] * 3
    s = stats()
    assert s["traces"] == 1 and s["graph_breaks"] == 0, s


def test_logger_calls_keep_their_order_across_a_graph_break(caplog):
    import logging

    compiled = kiln.compile(logs_around_a_break)
    with caplog.at_level(logging.WARNING, logger=LOG.name), contextlib.redirect_stdout(io.StringIO()) as out:
        for _ in range(2):
            assert_same(compiled(torch.ones(2)), torch.ones(2) * 3)
    assert [r.getMessage() for r in caplog.records] == ["before 1", "after 2"] * 2
    assert out.getvalue() == "between\n" * 2
    assert stats()["graph_breaks"] >= 1


def test_logger_call_with_a_traced_value_breaks_the_graph(caplog):
    import logging

    def fn(x):
        y = x.sum()
        LOG.warning("sum %s", y)
        return y * 2

    compiled = kiln.compile(fn)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        assert_same(compiled(torch.ones(2)), fn(torch.ones(2)))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and messages[0] == messages[1], messages  # compiled, then eager
