"""Plain Python objects are guarded by type, their identity only where the
trace reads it (Note [Objects guarded by type] in tracer/object_guards.cpp).

Library code makes fresh objects per call (generate()'s DynamicCache, a
model output crossing a graph break): such calls must reuse the trace, and
every result must still equal eager Python's.
"""
import enum
import logging

import pytest
import torch

import kiln
from conftest import assert_same, delta, stats


class Scale:
    def __init__(self, factor, bias=None):
        self.factor = factor
        if bias is not None:
            self.bias = bias

    def apply(self, x):
        return x * self.factor


class OtherScale(Scale):
    def apply(self, x):
        return x - self.factor


class Holder:
    def __init__(self, value):
        self.value = value


class Mode(enum.Enum):
    ADD = 1
    MUL = 2


def scaled(x, scale):
    return scale.apply(x) + 1


def test_fresh_object_each_call_reuses_the_trace():
    compiled = kiln.compile(scaled)
    x = torch.randn(4)
    before = stats()
    for _ in range(5):
        s = Scale(3.0)
        assert_same(compiled(x, s), scaled(x, s))
    d = delta(before, stats())
    assert d["traces"] == 1 and d["cache_hits"] == 4, d
    guards = kiln.trace_dump(scaled, x, Scale(3.0))
    assert "TypeMatch L['scale'] Scale" in guards, guards
    assert "IdMatch L['scale']" not in guards, guards


def test_what_the_trace_read_is_still_guarded():
    compiled = kiln.compile(scaled)
    x = torch.randn(4)
    assert_same(compiled(x, Scale(3.0)), scaled(x, Scale(3.0)))
    before = stats()
    assert_same(compiled(x, Scale(5.0)), scaled(x, Scale(5.0)))  # an attribute's value
    assert_same(compiled(x, OtherScale(3.0)), scaled(x, OtherScale(3.0)))  # the class, hence the method
    d = delta(before, stats())
    assert d["traces"] == 2 and d["recompiles"] == 2, d


def test_attribute_presence_on_a_fresh_object_is_guarded():
    def f(x, scale):
        return x + (scale.bias if hasattr(scale, "bias") else 0.5)

    compiled = kiln.compile(f)
    x = torch.randn(3)
    for s in (Scale(1.0), Scale(1.0, bias=2.0), Scale(1.0), Scale(1.0, bias=4.0)):
        assert_same(compiled(x, s), f(x, s))


def test_identity_comparison_guards_identity():
    def f(x, a, b):
        return x + 1 if a is b else x - 1

    compiled = kiln.compile(f)
    x = torch.randn(3)
    a, b = Holder(1), Holder(1)
    for args in ((a, a), (a, b), (b, b), (Holder(1), Holder(1)), (a, a)):
        assert_same(compiled(x, *args), f(x, *args))
    assert "IdMatch L['a']" in kiln.trace_dump(f, x, a, b)


def test_default_equality_is_identity_and_guarded():
    def f(x, a, b):
        return x * 2 if a == b else x * 3

    compiled = kiln.compile(f)
    x = torch.randn(3)
    a, b = Holder(1), Holder(1)
    for args in ((a, a), (a, b), (b, b), (a, a)):
        assert_same(compiled(x, *args), f(x, *args))


def test_membership_by_identity_is_guarded():
    def f(x, item, first, second):
        return x + 1 if item in (first, second) else x - 1

    compiled = kiln.compile(f)
    x = torch.randn(3)
    a, b, c = Holder(1), Holder(2), Holder(3)
    for args in ((a, a, b), (c, a, b), (b, a, b), (c, a, b)):
        assert_same(compiled(x, *args), f(x, *args))


def test_one_object_through_two_sources_keeps_their_aliasing():
    # Stores are replayed through sources: the trace must not be reused when
    # the two names stop naming one object (or start to).
    def f(x, a, b):
        a.value = x * 2
        return b.value + 1

    compiled = kiln.compile(f)
    x = torch.randn(3)
    for same in (True, False, True, False):
        a_eager = Holder(torch.ones(3))
        b_eager = a_eager if same else Holder(torch.zeros(3))
        a_kiln = Holder(torch.ones(3))
        b_kiln = a_kiln if same else Holder(torch.zeros(3))
        assert_same(compiled(x, a_kiln, b_kiln), f(x, a_eager, b_eager))
        assert_same(a_kiln.value, a_eager.value)
        assert_same(b_kiln.value, b_eager.value)


def test_fresh_objects_through_two_sources_reuse_the_trace():
    # The same fresh object under two names (a resume function's stack and
    # locals both hold the cache under construction) is guarded to be one
    # object (SameObject), not to be the first call's object.
    def f(x, a, b):
        a.value = x * 2
        return b.value + 1

    compiled = kiln.compile(f)
    before = stats()
    for _ in range(4):
        x = torch.randn(3)
        a_eager, a_kiln = Holder(torch.ones(3)), Holder(torch.ones(3))
        assert_same(compiled(x, a_kiln, a_kiln), f(x, a_eager, a_eager))
        assert_same(a_kiln.value, a_eager.value)
    assert delta(before, stats())["traces"] == 1


def test_enum_members_stay_guarded_by_identity():
    def f(x, mode):
        return x + 2 if mode == Mode.ADD else x * 2

    compiled = kiln.compile(f)
    x = torch.randn(3)
    for mode in (Mode.ADD, Mode.MUL, Mode.ADD):
        assert_same(compiled(x, mode), f(x, mode))


def test_loggers_stay_guarded_by_identity(caplog):
    first, second = logging.getLogger("kiln.test.first"), logging.getLogger("kiln.test.second")

    def f(x, logger):
        logger.warning("seen")
        return x + 1

    compiled = kiln.compile(f)
    x = torch.randn(2)
    with caplog.at_level(logging.WARNING):
        compiled(x, first)
        compiled(x, second)
    assert [r.name for r in caplog.records] == ["kiln.test.first", "kiln.test.second"]


class Counter(dict):
    pass


@pytest.mark.parametrize("make", [lambda: Counter(a=1), lambda: ValueError("x")], ids=["dict_subclass", "exception"])
def test_objects_with_c_state_are_not_type_guarded(make):
    def f(x, obj):
        return x + 1 if obj is not None else x

    guards = kiln.trace_dump(f, torch.randn(2), make())
    assert "TypeMatch L['obj']" not in guards, guards


def test_mutated_fresh_object_is_written_back():
    def f(x, holder):
        holder.value = holder.value + x
        return holder.value * 2

    compiled = kiln.compile(f)
    before = stats()
    for i in range(3):
        h_eager, h_kiln = Holder(torch.full((3,), float(i))), Holder(torch.full((3,), float(i)))
        x = torch.randn(3)
        assert_same(compiled(x, h_kiln), f(x, h_eager))
        assert_same(h_kiln.value, h_eager.value)
    assert delta(before, stats())["traces"] == 1


def test_objects_of_one_type_get_one_distinct_guard():
    # A cache with one layer object per layer: one guard for the group, not
    # one per pair.
    def f(x, a, b, c):
        return x * a.value + b.value - c.value

    x = torch.randn(3)
    guards = kiln.trace_dump(f, x, Holder(1.0), Holder(2.0), Holder(3.0))
    distinct = [line for line in guards.splitlines() if line.startswith("Distinct")]
    assert distinct == ["Distinct L['c'] and L['a'], L['b'] are distinct objects"], guards
    compiled = kiln.compile(f)
    a, c = Holder(1.0), Holder(3.0)
    for args in ((Holder(1.0), Holder(2.0), c), (a, a, c), (a, Holder(2.0), a), (Holder(1.0), Holder(2.0), c)):
        assert_same(compiled(x, *args), f(x, *args))


# Note [Tensor identity]: `is` between tensor values.
def pick_path(q, k):
    return q + k if q is not k else q * 2


def test_is_between_two_inputs_is_guarded_both_ways():
    compiled = kiln.compile(pick_path, fullgraph=True)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), x + y)
    torch.testing.assert_close(compiled(x, x), x * 2)  # the pair guard fails: traced again
    torch.testing.assert_close(compiled(y, x), y + x)


def test_is_between_made_tensors_without_a_break():
    # nn.MultiheadAttention's fast-path check, `query is not key`, with a
    # learned probe against hidden states (SigLIP's pooling head).
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    probe = torch.nn.Parameter(torch.randn(1, 1, 16))

    def pool(x):
        return mha(probe.repeat(x.shape[0], 1, 1), x, x)[0]

    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        explained = kiln.explain(pool)(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        torch.testing.assert_close(kiln.compile(pool)(x), pool(x))


def test_is_after_an_op_that_returns_its_input_is_exact():
    # Note [Conversions that change nothing]: with static sizes the trace
    # sees whether contiguous() handed back its input.
    def f(x):
        z = x * 2
        y = z.contiguous()  # z itself
        w = z.t().contiguous()  # a copy
        return y + 1 if y is z else y - 1, w is z

    x = torch.randn(3, 2)
    explained = kiln.explain(f)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    out, ref = kiln.compile(f)(x), f(x)
    torch.testing.assert_close(out[0], ref[0])
    assert out[1] is ref[1] is False


def test_is_after_an_op_that_may_return_its_input_with_dynamic_sizes_matches_eager():
    # A dynamic trace cannot tell (the node stays): it breaks or specializes.
    def f(x):
        z = x * 2
        y = z.contiguous()
        return y + 1 if y is z else y - 1

    compiled = kiln.compile(f, dynamic=True)
    for n in (3, 5):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), f(x))