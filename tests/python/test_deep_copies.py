"""copy.deepcopy inside a compiled frame (Note [Deep copies] in
tracer/trace_copy.cpp), and what library code does with the copy: a
transformers config is deep-copied in forward (get_text_config renames a
legacy config's decoder_* keys on the copy through setattr and delattr,
and its class maps attribute aliases in Python __getattribute__ and
__setattr__). Copies must equal copy.deepcopy's; the original is never
written."""
import copy

import pytest
import torch

import kiln
from conftest import assert_same, delta, stats


class Config:
    attribute_map = {"hidden": "d_model"}

    def __init__(self):
        self.d_model = 4
        self.decoder_layers = 2
        self.names = ["a", "b"]

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)

    def decoder_config(self):
        c = copy.deepcopy(self)
        for key in list(c.__dict__):
            if key.startswith("decoder_"):
                value = getattr(c, key)
                delattr(c, key)
                setattr(c, "num_" + key[len("decoder_"):], value)
        return c


def test_config_copied_renamed_and_returned():
    def fn(x, config):
        text = config.decoder_config()
        text.names.append("c")
        return x * text.hidden * text.num_layers + len(text.names) + len(config.names), text

    compiled = kiln.compile(fn, fullgraph=True)
    config = Config()
    before = stats()
    for _ in range(3):
        x = torch.randn(3)
        (got, got_copy), (want, want_copy) = compiled(x, config), fn(x, config)
        assert_same(got, want)
        assert type(got_copy) is Config and vars(got_copy) == vars(want_copy)
        assert got_copy is not config and got_copy.names is not config.names
    assert config.names == ["a", "b"] and "decoder_layers" in vars(config)
    assert delta(before, stats())["traces"] == 1
    # The copy read the original's state through guards: a change retraces.
    config.d_model = 5
    x = torch.randn(3)
    assert_same(compiled(x, config)[0], fn(x, config)[0])


def test_copies_keep_shared_structure():
    def fn(x, items):
        copied = copy.deepcopy(items)
        copied["p"].append(3)  # "q" is the same list in the copy, as in the original
        same_tuple = copy.deepcopy(items["t"]) is items["t"]
        return x + len(copied["q"]) + len(items["p"]), same_tuple

    def make():
        shared = [1, 2]
        return {"p": shared, "q": shared, "t": (1, "a")}

    compiled = kiln.compile(fn, fullgraph=True)
    items = make()
    x = torch.randn(3)
    assert_same(compiled(x, items), fn(x, make()))
    assert items["p"] == [1, 2] and items["p"] is items["q"]


class OwnCopy:
    def __init__(self):
        self.scale = 2

    def __deepcopy__(self, memo):
        return OwnCopy()


@pytest.mark.parametrize("make, message", [
    (lambda: torch.ones(2), "copy.deepcopy of Tensor"),
    (OwnCopy, "defines __deepcopy__"),
], ids=["tensor", "own-deepcopy"])
def test_copies_kiln_does_not_make_break_the_graph(make, message):
    def fn(x, value):
        return x + len(str(type(copy.deepcopy(value))))

    x = torch.randn(3)
    assert_same(kiln.compile(fn)(x, make()), fn(x, make()))
    with pytest.raises(kiln.Unsupported, match=message):
        kiln.compile(fn, fullgraph=True)(x, make())
