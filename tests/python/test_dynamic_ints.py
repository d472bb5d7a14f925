"""Dynamic Python ints: an int read through a source whose value alone
failed a guard is traced as a size symbol of its own, so a counter does not
recompile at every value. See Note [Dynamic ints] in
tracer/dynamic_shapes.cpp."""
import pytest
import torch

import kiln
from conftest import assert_same, stats, kiln_logs


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_an_int_argument_that_changes_is_traced_once_more(backend):
    def fn(x, n):
        return x[:, :n] * n + torch.arange(n).float(), n + 1

    compiled = kiln.compile(fn, backend=backend)
    x = torch.randn(3, 16)
    for n in (4, 5, 9, 2, 13, 7):
        assert_same(compiled(x, n), fn(x, n))
    s = stats()
    assert s["traces"] == 2 and s["recompiles"] == 1 and s["eager_runs"] == 0, s
    if backend != "eager":
        # each value's instance is compiled with the int a constant
        assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()


class Counter:
    def __init__(self):
        self.seen = 0


def test_a_counter_attribute_is_written_back_by_the_graph():
    def fn(counter, x):
        counter.seen += x.shape[0]
        return x * counter.seen

    compiled = kiln.compile(fn, backend="aot_eager")
    mine, theirs = Counter(), Counter()
    mine.seen = theirs.seen = 3
    for _ in range(6):
        x = torch.randn(2, 3)
        assert_same(compiled(mine, x), fn(theirs, x))
        assert type(mine.seen) is int and mine.seen == theirs.seen
    s = stats()
    assert s["traces"] == 2 and s["recompiles"] == 1, s


def test_guards_and_graph_name_the_int(capfd):
    def fn(x, n):
        return x + n

    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(3)
    compiled(x, 4)
    with kiln_logs("dynamic,guards,graph"):
        compiled(x, 5)
    err = capfd.readouterr().err
    assert "int L['n'] changed value (4 -> 5); tracing it as dynamic" in err, err
    assert "IntSymbol L['n'] s0 (an int >= 2" in err, err
    assert "input L['n'] : int s0" in err, err


def test_an_int_below_two_or_of_another_type_misses_the_entry(capfd):
    def fn(x, n):
        return x * n

    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(3)
    for n in (4, 5, 6):
        compiled(x, n)
    assert stats()["traces"] == 2
    with kiln_logs("recompiles"):
        for n in (0, 2.5, True):
            assert_same(compiled(x, n), fn(x, n))
    err = capfd.readouterr().err
    assert "L['n'] is a float, expected an int (dynamic, s0)" in err, err
    assert "dynamic int s0 was traced for values >= " in err, err


def test_an_int_that_decides_control_flow_falls_back_to_constants(capfd):
    def fn(x, step):
        if step % 3 == 0:
            return x * 2
        return x - step

    compiled = kiln.compile(fn, backend="eager")
    with kiln_logs("dynamic"):
        for step in range(2, 12):
            x = torch.randn(4)
            assert_same(compiled(x, step), fn(x, step))
    err = capfd.readouterr().err
    assert "dynamic ints could not stay symbolic; traced them as constants from now on" in err, err
    # listed static for good: each later value is one more constant trace
    assert err.count("tracing it as dynamic") == 1, err


def test_tensor_dims_stay_dynamic_when_the_int_cannot():
    def fn(x, step):
        if step % 2 == 0:
            return x.sum(0)
        return x.mean(0)

    compiled = kiln.compile(fn, backend="eager")
    for n, step in [(3, 2), (4, 3), (5, 4), (6, 4), (7, 4)]:
        x = torch.randn(n, 2)
        assert_same(compiled(x, step), fn(x, step))
    # (6, 4) and (7, 4) reuse the trace with x's dim 0 dynamic
    assert stats()["cache_hits"] >= 1, stats()


@pytest.mark.parametrize("case", ["same_winner", "winner_changes"])
def test_min_and_max_of_a_dynamic_int(case):
    if case == "same_winner":
        def fn(x, n):
            return x * max(n - 100, 0) + min(n, 1000)
    else:
        def fn(x, n):
            return x * max(n - 5, 0) + min(2 * n, n + 6)

    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(3)
    for n in (3, 4, 5, 6, 8, 2, 11):
        assert_same(compiled(x, n), fn(x, n))
    assert stats()["traces"] == 2, stats()


def test_a_sliding_window_cache_layer_decodes_without_recompiling():
    # The shape of transformers' DynamicSlidingWindowLayer: the tokens seen
    # so far counted in a Python int that sizes the mask.
    class Layer:
        def __init__(self, window):
            self.window = window
            self.cumulative_length = 0
            self.keys = torch.zeros(1, 0, 4)

        def update(self, k):
            self.cumulative_length += k.shape[1]
            full = torch.cat([self.keys, k], dim=1)
            self.keys = full[:, -self.window + 1:, :]
            return full

        def mask_sizes(self, query_length):
            kv_offset = max(self.cumulative_length - self.window + 1, 0)
            kv_length = min(self.cumulative_length, self.window - 1) + query_length
            return kv_length, kv_offset

    def step(layer, q, k):
        full = layer.update(k)
        kv_length, kv_offset = layer.mask_sizes(q.shape[1])
        positions = torch.arange(kv_offset, kv_offset + full.shape[1])
        scores = q @ full.transpose(1, 2)
        return scores.softmax(-1) * positions.float(), kv_length

    mine, theirs = Layer(64), Layer(64)
    compiled = kiln.compile(step, backend="aot_eager")
    for t in range(12):
        length = 8 if t == 0 else 1
        q, k = torch.randn(1, length, 4), torch.randn(1, length, 4)
        assert_same(compiled(mine, q, k), step(theirs, q, k))
        assert mine.cumulative_length == theirs.cumulative_length
    s = stats()
    assert s["traces"] <= 3 and s["eager_runs"] == 0, s


def test_training_with_a_changing_int_compiles_each_value():
    # A size instance folds the int to a constant and leaves its input
    # unread, so kiln's autograd takes the instance (no prim fallback).
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    ref = torch.nn.Linear(8, 8)
    ref.load_state_dict(lin.state_dict())

    def step(layer, x, n):
        return (layer(x) * n).sum()

    compiled = kiln.compile(step, backend="aot_eager")
    for n in (3, 4, 5, 6):
        x = torch.randn(4, 8)
        compiled(lin, x, n).backward()
        step(ref, x, n).backward()
        assert_same(lin.weight.grad, ref.weight.grad)
    s = kiln.stats()
    assert s["traces"] == 2 and s["prim_fallbacks"] == 0 and s["size_instances"] == 3, s


def test_a_threshold_on_an_int_is_guarded_at_the_traced_count(capfd):
    # Traced at 9, the sample points (9, 18, 27) fall on both sides of 12:
    # the answer at 9 is guarded and holds up to 11; 12 traces the other
    # side once (Note [Dynamic ints]).
    def fn(x, n):
        if n >= 12:
            return x * 2
        return x + n

    compiled = kiln.compile(fn, backend="eager")
    with kiln_logs("dynamic"):
        for n in (8, 9, 10, 11, 12, 13, 20, 100, 10):
            x = torch.randn(3)
            assert_same(compiled(x, n), fn(x, n))
    s = stats()
    assert s["traces"] == 3 and s["eager_runs"] == 0, s
    err = capfd.readouterr().err
    assert "size relation s0 >= 12 differs between the sample points; guarded at the traced sizes" in err, err


def test_dynamic_true_makes_int_arguments_dynamic_from_the_first_trace():
    def fn(x, n):
        return x[:n] * n

    compiled = kiln.compile(fn, backend="eager", dynamic=True)
    for n in (3, 5, 7, 4):
        x = torch.randn(9, 2)
        assert_same(compiled(x, n), fn(x, n))
    s = stats()
    assert s["traces"] == 1 and s["recompiles"] == 0, s


def test_dynamic_true_keeps_tensor_dims_when_an_int_argument_decides_a_branch(capfd):
    def fn(x, n):
        if n % 2:
            return x.sum(0)
        return x.mean(0)

    compiled = kiln.compile(fn, backend="eager", dynamic=True)
    with kiln_logs("dynamic"):
        for rows in (3, 4, 5):
            x = torch.randn(rows, 2)
            assert_same(compiled(x, 3), fn(x, 3))
    err = capfd.readouterr().err
    assert "dynamic ints could not stay symbolic" in err, err
    assert stats()["traces"] == 1, stats()
