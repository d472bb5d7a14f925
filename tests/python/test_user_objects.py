"""Objects of plain Python classes made inside a compiled frame (Note [User
objects], tracer/trace_records.cpp).

Library code builds small objects in forward: transformers' ModelOutput (an
OrderedDict subclass and dataclass with its own __setattr__, __setitem__ and
__post_init__), caches, helper classes. kiln traces their construction, reads,
writes and dict behaviour, and rebuilds them with their real class when they
leave the trace (the frame's result, or a graph break).
"""
import dataclasses
from collections import OrderedDict

import pytest
import torch

import kiln
from conftest import assert_same, check_compiled, delta, stats


class Scaled:
    def __init__(self, t, factor=2.0):
        self.t = t
        self.factor = factor

    def value(self):
        return self.t * self.factor

    @property
    def doubled(self):
        return self.value() * 2


def test_plain_class_made_used_and_returned():
    def fn(x):
        s = Scaled(x + 1, factor=3.0)
        s.extra = s.doubled - 1
        return s.value() + s.extra, s

    check_compiled(lambda x: fn(x)[0], lambda: (torch.randn(3),))
    compiled = kiln.compile(fn, fullgraph=True)
    out, obj = compiled(torch.ones(2))
    assert type(obj) is Scaled
    assert list(vars(obj)) == ["t", "factor", "extra"]
    assert_same(obj.t, torch.full((2,), 2.0))
    assert_same(obj.extra, torch.full((2,), 11.0))
    assert_same(out, torch.full((2,), 17.0))


class Registry(OrderedDict):
    """A dict subclass whose __setitem__ records writes and scales values."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value * 2)
        self.last = key

    def total(self):
        return sum(self.values())


def test_ordered_dict_subclass_with_custom_setitem():
    def fn(x):
        r = Registry()
        r["b"] = x
        r["a"] = x + 1
        return r.total() + len(r) * ("a" in r), r

    compiled = check_compiled(fn, lambda: (torch.randn(3),))
    _, r = compiled(torch.ones(2))
    assert type(r) is Registry and list(r) == ["b", "a"] and r.last == "a"
    r.move_to_end("b")  # the order links OrderedDict keeps are intact
    assert list(r) == ["a", "b"]


@dataclasses.dataclass
class Output(OrderedDict):
    """Like transformers' ModelOutput: fields mirrored as items when set."""

    logits: torch.Tensor = None
    aux: torch.Tensor = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            v = self.__dict__.get(field.name)
            if v is not None:
                self[field.name] = v

    def __setattr__(self, name, value):
        if value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return tuple(self.values())[k]


def test_model_output_style_dataclass():
    def fn(x):
        out = Output(logits=x * 2)
        y = out.logits + out[0] + out["logits"]
        out.aux = y
        return Output(logits=y, aux=None), out

    compiled = check_compiled(fn, lambda: (torch.randn(3),))
    first, second = compiled(torch.ones(2))
    assert type(first) is Output and list(first.keys()) == ["logits"] and first.aux is None
    assert list(second.keys()) == ["logits", "aux"]
    assert_same(second["aux"], torch.full((2,), 6.0))


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    b: int = 3


def test_frozen_dataclass_and_its_error():
    def fn(x):
        f = Frozen(x)
        return f.a * f.b

    check_compiled(fn, lambda: (torch.randn(3),))

    def writes(x):
        f = Frozen(x)
        f.b = 4
        return x

    with pytest.raises(dataclasses.FrozenInstanceError):
        kiln.compile(writes)(torch.randn(2))


class Lazy:
    def __init__(self, base):
        self.base = base

    def __getattr__(self, name):
        if name.startswith("times_"):
            return self.base * int(name[len("times_"):])
        raise AttributeError(name)


def test_getattr_fallback_and_missing_attribute_probe():
    def fn(x):
        lazy = Lazy(x)
        missing = getattr(lazy, "other", None)
        return lazy.times_3 + (0 if missing is None else 1)

    check_compiled(fn, lambda: (torch.randn(3),))


def test_object_alive_across_a_graph_break():
    def fn(x):
        s = Scaled(x * 2)
        print("", end="")  # a graph break with s alive
        return s.value() + 1, s

    compiled = kiln.compile(fn)
    before = stats()
    out, s = compiled(torch.ones(2))
    assert_same(out, torch.full((2,), 5.0))
    assert type(s) is Scaled and s.factor == 2.0
    assert delta(before, stats())["graph_breaks"] == 1


class WithDel:
    def __init__(self, t):
        self.t = t

    def __del__(self):
        pass


def test_classes_with_finalizers_are_not_modelled():
    def fn(x):
        return WithDel(x).t + 1

    compiled = kiln.compile(fn)
    assert_same(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert kiln.explain(fn)(torch.ones(2)).graph_break_count >= 1


def test_transformers_model_output():
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def fn(x):
        hidden = outputs.BaseModelOutputWithPast(last_hidden_state=x * 2)
        logits = hidden.last_hidden_state + hidden[0]
        return outputs.CausalLMOutputWithPast(logits=logits, loss=None)

    compiled = check_compiled(fn, lambda: (torch.randn(2, 3),))
    out = compiled(torch.ones(2, 3))
    assert type(out).__name__ == "CausalLMOutputWithPast"
    assert list(out.keys()) == ["logits"] and out.loss is None
    assert_same(out.to_tuple()[0], torch.full((2, 3), 4.0))


class Processor:
    def __init__(self, scale):
        self.scale = scale

    def __call__(self, t, shift=0.0):
        return t * self.scale + shift


PROCESSOR = Processor(3.0)


def test_callable_objects_made_or_passed_in():
    def fn(x):
        return Processor(2.0)(x, shift=1.0) + PROCESSOR(x)

    check_compiled(fn, lambda: (torch.randn(3),))


# Note [Dict-backed objects]: an object of a dict subclass handed to the
# compiled frame is guarded by its type and keys, not its identity; its
# Python dunders read its items through dict's own methods.
def test_dict_subclass_objects_passed_in_keep_their_trace():
    def fn(out, x):
        keys = list(out.keys())
        first = out[0] + out["logits"] * len(out)
        extra = out.get("aux", None)
        return first + x + (0 if extra is None else extra), keys, "aux" in out, [k for k in out], out

    compiled = kiln.compile(fn, fullgraph=True)
    before = stats()
    for _ in range(3):  # a fresh object each call, as generate() makes them
        x = torch.randn(3)
        obj = Output(logits=torch.randn(3))
        got, want = compiled(obj, x), fn(obj, x)
        assert_same(got[:4], want[:4])
        assert got[4] is obj  # the object itself comes back, not a copy
    assert delta(before, stats())["traces"] == 1
    # Another key set is another trace, through the keys guard.
    obj = Output(logits=torch.randn(3), aux=torch.randn(3))
    x = torch.randn(3)
    assert_same(compiled(obj, x)[:4], fn(obj, x)[:4])
    assert delta(before, stats())["traces"] == 2


def _assign_item(out, x):
    out["logits"] = x * 2
    return out["logits"] + 1


def _update_items(out, x):
    out.update({"aux": x * 2})  # dict's own update on the object's items
    return out["aux"] + 1


@pytest.mark.parametrize("fn, message", [(_assign_item, "item assignment on Object Output"),
                                         (_update_items, "items of an object of a dict subclass")],
                         ids=["setitem", "dict-method"])
def test_items_of_a_dict_subclass_passed_in_are_not_written(fn, message):
    # A write would be replayed through the class's own methods, which the
    # trace never ran (ModelOutput's update() raises): the graph breaks
    # and the write runs eagerly.
    obj, want_obj = Output(logits=torch.zeros(3)), Output(logits=torch.zeros(3))
    x = torch.randn(3)
    before = stats()
    assert_same(kiln.compile(fn)(obj, x), fn(want_obj, x))
    assert list(obj.keys()) == list(want_obj.keys())
    assert_same(list(obj.values()), list(want_obj.values()))
    assert delta(before, stats())["graph_breaks"] >= 1
    with pytest.raises(kiln.Unsupported, match=message):
        kiln.compile(fn, fullgraph=True)(Output(logits=torch.zeros(3)), x)


def test_transformers_model_output_passed_in():
    # The encoder's output crosses into every decoder step of a
    # seq2seq generate(): one trace for fresh outputs (their class has a
    # Python metaclass: plain_metaclass in tracer/object_guards.cpp).
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def fn(enc, x):
        return enc[0] * x + len(enc), enc.last_hidden_state.sum(), tuple(enc.keys())

    compiled = kiln.compile(fn, fullgraph=True)
    before = stats()
    for _ in range(3):
        enc = outputs.BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=torch.randn(2, 3))
        x = torch.randn(2, 3)
        assert_same(compiled(enc, x), fn(enc, x))
    assert delta(before, stats())["traces"] == 1 and delta(before, stats())["graph_breaks"] == 0


def test_setattr_and_delattr_builtins():
    # setattr/delattr with a constant name are the attribute store and
    # deletion they spell: on an object the trace made, and a store to an
    # argument replayed after the graph.
    def fn(x, holder):
        s = Scaled(x + 1)
        setattr(s, "extra", x * 2)
        delattr(s, "factor")
        setattr(holder, "seen", s.extra.sum())
        return s.t + getattr(s, "extra"), list(s.__dict__)

    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.randn(3)
    got_holder, want_holder = Scaled(x), Scaled(x)
    assert_same(compiled(x, got_holder), fn(x, want_holder))
    assert_same(got_holder.seen, want_holder.seen)


def test_deleting_an_attribute_of_an_argument_breaks_the_graph():
    def fn(x, holder):
        delattr(holder, "factor")
        return x + 1

    x = torch.randn(3)
    got, want = Scaled(x), Scaled(x)
    assert_same(kiln.compile(fn)(x, got), fn(x, want))
    assert vars(got).keys() == vars(want).keys()
    with pytest.raises(kiln.Unsupported, match="deletion of attribute 'factor'"):
        kiln.compile(fn, fullgraph=True)(x, Scaled(x))
