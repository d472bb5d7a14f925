"""Classes inside compiled code: super() in its forms, namedtuples and
dataclasses (as inputs, made by the trace, returned with their real type),
and enum members (inputs, globals, comparisons, .name/.value), each compared
with eager over several calls."""
import collections
import dataclasses
import enum

import torch
from torch import nn

import kiln
from conftest import assert_same, check_compiled, delta, stats


# ---------------------------------------------------------------------------
# super()

class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)

    def helper(self, x):
        return x * 2

    @property
    def scale(self):
        return 0.5

    @classmethod
    def shift(cls, x):
        return x + 1


class ZeroArg(Base):
    def forward(self, x):
        return super().forward(x) + super().helper(x) * super().scale


class TwoArg(Base):
    def forward(self, x):
        return super(TwoArg, self).forward(x).relu() + super(TwoArg, self).shift(x)


class Deeper(ZeroArg):
    def forward(self, x):
        # Walks the MRO past ZeroArg.forward to Base's helper.
        return super().forward(x) - super().helper(x)


def test_zero_arg_super_in_module_forward():
    model = ZeroArg()
    check_compiled(model, lambda: (torch.randn(2, 4),))


def test_two_arg_super_and_classmethod():
    model = TwoArg()
    check_compiled(model, lambda: (torch.randn(3, 4),))


def test_super_chain_through_two_levels():
    model = Deeper()
    check_compiled(model, lambda: (torch.randn(2, 4),))


class Plain:
    def f(self, x):
        return x + 1


class PlainChild(Plain):
    def f(self, x):
        return super().f(x) * 2


PLAIN = PlainChild()


def calls_plain_super(x):
    return PLAIN.f(x).sin()


def test_super_in_plain_class_method():
    check_compiled(calls_plain_super, lambda: (torch.randn(5),))


class BreaksAfterSuper(Base):
    def forward(self, x):
        y = super().forward(x)
        print("side effect")  # a graph break after super(): see record_break
        return y + super().helper(x)


def test_break_in_method_using_zero_arg_super_runs_eagerly(capsys):
    # A resume function cannot give super() the method's first argument and
    # __class__ cell, so no break is made: the frame runs eagerly, correctly.
    model = BreaksAfterSuper()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    assert_same(compiled(x), model(x))
    reasons = kiln.explain(model)(x).break_reasons
    assert any("super()" in r for r in reasons), reasons


# ---------------------------------------------------------------------------
# namedtuples

Pair = collections.namedtuple("Pair", "a b")
Triple = collections.namedtuple("Triple", ["x", "y", "z"], defaults=[1.0])


class Vec(collections.namedtuple("Vec", "u v")):
    def total(self):
        return self.u + self.v

    @property
    def diff(self):
        return self.u - self.v


def nt_fields(p):
    return p.a * 2 + p.b


def test_namedtuple_input_fields():
    check_compiled(nt_fields, lambda: (Pair(torch.randn(3), torch.randn(3)),))


def nt_make(x):
    t = Triple(x, y=x * 2)
    return Pair(t.x + t.z, t.y), t


def test_namedtuple_made_and_returned_with_its_type():
    compiled = check_compiled(nt_make, lambda: (torch.randn(3),))
    out = compiled(torch.randn(3))
    assert type(out[0]) is Pair and type(out[1]) is Triple


def nt_replace_unpack(p):
    q = p._replace(b=p.b + 1)
    a, b = q
    total = sum(v.sum() for v in q)
    d = q._asdict()
    return q, a * b + total + d["a"], isinstance(q, Pair), len(q)


def test_namedtuple_replace_unpack_iterate():
    check_compiled(nt_replace_unpack, lambda: (Pair(torch.randn(2), torch.randn(2)),))


def nt_subclass(v):
    return v.total() * v.diff, Vec(v.u, v.v * 2)


def test_namedtuple_subclass_methods():
    check_compiled(nt_subclass, lambda: (Vec(torch.randn(2), torch.randn(2)),))


def test_namedtuple_type_is_guarded():
    compiled = kiln.compile(nt_fields)
    other = collections.namedtuple("Other", "a b")
    p, q = Pair(torch.randn(3), torch.randn(3)), other(torch.randn(3), torch.randn(3))
    assert_same(compiled(p), nt_fields(p))
    assert_same(compiled(q), nt_fields(q))
    assert stats()["recompiles"] == 1


# ---------------------------------------------------------------------------
# dataclasses

@dataclasses.dataclass
class Config:
    weight: torch.Tensor
    k: int = 2
    tags: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.k2 = self.k * self.k

    def apply(self, x):
        return x * self.weight + self.k


def assert_same_dataclass(c, e):
    assert type(c) is type(e)
    assert list(vars(c)) == list(vars(e))
    for key in vars(e):
        assert_same(getattr(c, key), getattr(e, key), key)


def dc_input(cfg, x):
    return cfg.apply(x) + cfg.k


def test_dataclass_input_fields_guarded():
    compiled = kiln.compile(dc_input)
    cfg = Config(torch.randn(3))
    x = torch.randn(3)
    for _ in range(2):
        assert_same(compiled(cfg, x), dc_input(cfg, x))
    cfg.k = 5
    assert_same(compiled(cfg, x), dc_input(cfg, x))
    assert stats()["recompiles"] == 1


def dc_make(x):
    cfg = Config(x.sin(), k=3)
    cfg.extra = cfg.k2 + 1
    return cfg, cfg.apply(x)


def test_dataclass_made_and_returned():
    compiled = kiln.compile(dc_make, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4)
        (c_cfg, c_y), (e_cfg, e_y) = compiled(x), dc_make(x)
        assert_same_dataclass(c_cfg, e_cfg)
        assert_same(c_y, e_y)
    assert stats()["traces"] == 1


def dc_replace(cfg):
    new = dataclasses.replace(cfg, k=7)
    return new, isinstance(new, Config), type(new) is Config


def test_dataclasses_replace():
    compiled = kiln.compile(dc_replace, fullgraph=True)
    cfg = Config(torch.randn(2))
    c, e = compiled(cfg), dc_replace(cfg)
    assert_same_dataclass(c[0], e[0])
    assert c[1:] == e[1:] == (True, True)


@dataclasses.dataclass(frozen=True)
class Frozen:
    w: torch.Tensor


def makes_frozen(x):
    return Frozen(x + 1).w * 2


def test_frozen_dataclass_is_a_clean_break():
    compiled = kiln.compile(makes_frozen)
    x = torch.randn(3)
    assert_same(compiled(x), makes_frozen(x))
    assert_same(compiled(x), makes_frozen(x))


# ---------------------------------------------------------------------------
# enums

class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


def enum_branch(x, mode):
    if mode is Mode.TRAIN:
        return x * 2 + len(mode.name)
    if mode == Mode.EVAL:
        return x - len(mode.value)
    return x


def test_enum_input_guarded_by_identity():
    compiled = kiln.compile(enum_branch, fullgraph=True)
    x = torch.randn(3)
    before = stats()
    for mode in (Mode.TRAIN, Mode.TRAIN, Mode.EVAL, Mode.EVAL, Mode.TRAIN):
        assert_same(compiled(x, mode), enum_branch(x, mode))
    d = delta(before, stats())
    assert d["traces"] == 2 and d["recompiles"] == 1 and d["graph_breaks"] == 0, d


LEVEL = Level.HIGH


def enum_global(x):
    if LEVEL == Level.HIGH and LEVEL != Level.LOW:
        return x * LEVEL.value, LEVEL.name
    return x, "none"


def test_enum_global_and_int_enum():
    check_compiled(enum_global, lambda: (torch.randn(2),))
