"""Objects whose classes customize attribute reads in Python (Note [Custom
getattr] in tracer/trace_attributes.cpp): transformers' configs map
aliases in __getattribute__, other objects compute missing names in
__getattr__. kiln inlines them and guards what they read."""
import torch

import kiln
from conftest import python_calls, stats


class AliasConfig:
    attribute_map = {"hidden": "n_embd"}

    def __init__(self):
        self.n_embd = 3
        self.flag = True

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Lazy:
    def __init__(self):
        self.a = 2

    def __getattr__(self, name):
        if name == "b":
            return 10
        raise AttributeError(name)


CFG = AliasConfig()
LAZY = Lazy()


def reads_config(x):
    y = x * CFG.hidden + CFG.n_embd
    if CFG.flag:
        y = y + LAZY.a + LAZY.b + object.__getattribute__(LAZY, "a")
    return y


def test_custom_getattribute_and_getattr_trace_whole_and_are_guarded():
    compiled = kiln.compile(reads_config, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), reads_config(x))
    CFG.n_embd = 5
    try:
        torch.testing.assert_close(compiled(x), reads_config(x))
        assert stats()["recompiles"] == 1
        CFG.flag = False
        torch.testing.assert_close(compiled(x), reads_config(x))
    finally:
        CFG.n_embd = 3
        CFG.flag = True


class Box:
    pass


def hasattr_after_store(x):
    box = Box()
    box.w = x * 1.0
    return hasattr(box, "w"), getattr(box, "w", None) * 2


def test_hasattr_sees_a_store_not_yet_written_back():
    x = torch.ones(2)
    got = kiln.compile(hasattr_after_store)(x)
    assert got[0] is True
    torch.testing.assert_close(got[1], x * 2)


def test_guards_of_generic_reads_do_not_run_the_custom_getattribute():
    # Note [Custom getattr]: the reads the trace made through
    # super().__getattribute__ are guarded through the generic lookup, so a
    # compiled call runs no Python __getattribute__ for its guards (eager
    # runs it twice); the guards still see a change behind the alias.
    cfg = AliasConfig()

    def f(x):
        return x * cfg.hidden + cfg.flag

    compiled = kiln.compile(f, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), f(x))
    assert python_calls("__getattribute__", f, x)[1] == 2
    got, calls = python_calls("__getattribute__", compiled, x)
    torch.testing.assert_close(got, x * 3 + 1)
    assert calls == 0
    cfg.n_embd = 7
    torch.testing.assert_close(compiled(x), x * 7 + 1)
    assert stats()["recompiles"] == 1
