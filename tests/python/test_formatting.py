"""String formatting inside compiled code: f-strings, %-formatting and
str.format over Python values (shapes, ints, strings, enum names) fold to
constants at trace time; formatting a tensor's values is a clean graph
break."""
import enum

import torch

import kiln
from conftest import assert_same, check_compiled, stats


class Kind(enum.Enum):
    A = "a"


def formats_python_values(x, name):
    n, m = x.shape
    s = f"{name}:{n}x{m:03d}|{x.dtype}|{Kind.A.name!r}"
    t = "%s-%d-%.2f" % (name, n, m / 3)
    u = "{}/{k}".format(n * m, k=name).upper()
    parts = "-".join([name, str(n), u.lower()])
    return x * len(s) + len(t), s, t, parts, parts.startswith(name)


def test_formatting_of_python_values_folds():
    check_compiled(formats_python_values, lambda: (torch.randn(2, 5), "blk"))


def test_formatted_strings_follow_guarded_inputs():
    compiled = kiln.compile(formats_python_values, fullgraph=True)
    for shape, name in (((2, 5), "a"), ((3, 4), "a"), ((3, 4), "bb")):
        x = torch.randn(*shape)
        assert_same(compiled(x, name), formats_python_values(x, name))


def formats_tensor(x):
    y = x + 1
    text = f"value {y}"
    return y * 2, len(text) > 0


def formats_tensor_with_format(x):
    return x + len("{}".format(x))


def test_formatting_a_tensor_is_a_graph_break():
    for fn in (formats_tensor, formats_tensor_with_format):
        kiln.reset()
        compiled = kiln.compile(fn)
        x = torch.randn(3)
        assert_same(compiled(x), fn(x))
        assert stats()["graph_breaks"] >= 1
        reasons = kiln.explain(fn)(x).break_reasons
        assert any("Tensor" in r for r in reasons), reasons
