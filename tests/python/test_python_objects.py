"""Python object model inside compiled code: properties, static and class
methods, class attributes, plain objects' attributes; each guarded on what
it read, so changes recompile instead of returning stale results."""
import types

import torch
from torch import nn

import kiln
from conftest import assert_same, stats


class Block(nn.Module):
    BASE = 1.0

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.k = 3

    @property
    def scale(self):
        return self.k * 0.5

    @staticmethod
    def act(t):
        return t.relu()

    @classmethod
    def shift(cls, t):
        return t + cls.BASE

    def forward(self, x):
        return self.shift(self.act(self.fc(x)) * self.scale)


def test_property_staticmethod_classmethod_traced_fully():
    model = Block()
    compiled = kiln.compile(model, fullgraph=True)
    x = torch.randn(2, 4)
    for _ in range(3):
        assert_same(compiled(x), model(x))
    assert stats()["traces"] == 1 and stats()["cache_hits"] == 2


def test_instance_attribute_read_by_property_is_guarded():
    model = Block()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    model.k = 5
    assert_same(compiled(x), model(x))
    assert stats()["recompiles"] == 1


def test_class_attribute_is_guarded():
    class Local(Block):
        pass

    model = Local()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    Local.BASE = 2.0
    assert_same(compiled(x), model(x))
    assert stats()["recompiles"] == 1


CONFIG = types.SimpleNamespace(alpha=0.5, mode="relu")


def uses_config(x):
    y = x * CONFIG.alpha
    if CONFIG.mode == "relu":
        return y.relu()
    return y.tanh()


def test_plain_object_attributes_guarded():
    compiled = kiln.compile(uses_config, fullgraph=True)
    x = torch.randn(5)
    try:
        assert_same(compiled(x), uses_config(x))
        CONFIG.mode = "tanh"
        assert_same(compiled(x), uses_config(x))
        CONFIG.alpha = 2.0
        assert_same(compiled(x), uses_config(x))
        assert stats()["traces"] == 3
    finally:
        CONFIG.alpha, CONFIG.mode = 0.5, "relu"


class Counter:
    def __init__(self):
        self.reads = 0

    @property
    def value(self):
        self.reads += 1
        return 2.0


COUNTER = Counter()


def reads_counting_property(x):
    return x * COUNTER.value


def test_property_with_side_effect_runs_once_per_call():
    compiled = kiln.compile(reads_counting_property)
    x = torch.randn(3)
    before = COUNTER.reads
    for _ in range(3):
        assert_same(compiled(x), x * 2.0)
    assert COUNTER.reads - before == 3
