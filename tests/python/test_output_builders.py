"""Graphs whose output is built by calls that make no tensor (a namedtuple,
an OrderedDict, a dataclass, one container returned twice) compile like
any other: the backend compiles the tensor graph and the builders run
after it (Note [Output builders] in runtime/built_output_executor.h).
They used to send the whole graph to the eager replay."""
import collections
import dataclasses

import pytest
import torch

import kiln
from conftest import stats

Pair = collections.namedtuple("Pair", "value aux")


@dataclasses.dataclass
class Result:
    value: torch.Tensor
    extra: dict


def namedtuple_out(x, w):
    y = (x @ w).relu() * 3
    return Pair(y, y.sum())


def ordered_dict_out(x, w):
    y = (x @ w).sigmoid()
    return collections.OrderedDict(out=y, aux=y * 2 + 1)


def dataclass_out(x, w):
    y = (x @ w).tanh()
    shared = {"sq": y * y}
    return Result(y, shared), [shared]


CASES = [namedtuple_out, ordered_dict_out, dataclass_out]


def leaves(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in leaves(v)]
    if dataclasses.is_dataclass(out):
        return [t for f in dataclasses.fields(out) for t in leaves(getattr(out, f.name))]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in leaves(v)]
    return []


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_output_builders_compile_with_gradients(fn, backend):
    x = torch.randn(4, 3)
    w_eager = torch.randn(3, 5, requires_grad=True)
    w_kiln = w_eager.detach().clone().requires_grad_(True)
    expected = fn(x, w_eager)
    got = kiln.compile(fn, backend=backend)(x, w_kiln)
    assert type(got) is type(expected)
    want, have = leaves(expected), leaves(got)
    assert len(want) == len(have)
    for a, b in zip(have, want):
        torch.testing.assert_close(a, b)
    sum(t.sum() for t in want).backward()
    sum(t.sum() for t in have).backward()
    torch.testing.assert_close(w_kiln.grad, w_eager.grad)
    assert kiln.stats()["prim_fallbacks"] == 0
    if fn is dataclass_out:
        assert got[1][0] is got[0].extra
