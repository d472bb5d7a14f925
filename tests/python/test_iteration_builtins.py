"""Generator expressions, map and filter inside compiled code (evaluated
eagerly when consumed whole), and builtins over them."""
import torch

import kiln
from conftest import assert_same, stats


def genexprs(xs, x):
    total = sum(q * 2 for q in xs)
    relus = list(q.relu() for q in xs)
    shifted = tuple(t + x for t in relus)
    widest = max(len(q.shape) for q in xs)
    return total, relus, shifted, widest, all(q.dim() == 1 for q in xs)


def maps_and_filters(xs, x):
    scaled = list(map(lambda t: t * x, xs))
    kept = [k for k in filter(None, [0, 1, 2, 0, 3])]
    activated = sum(map(torch.relu, xs))
    pairs = list(map(lambda a, b: a - b, xs, reversed(xs)))
    return scaled, kept, activated, pairs


def test_generator_expressions_trace_fully():
    compiled = kiln.compile(genexprs, fullgraph=True)
    for n in (2, 3):
        xs = [torch.randn(4) for _ in range(n)]
        x = torch.randn(4)
        assert_same(compiled(xs, x), genexprs(xs, x))
    assert stats()["unsupported"] == 0 and stats()["graph_breaks"] == 0


def test_map_and_filter_trace_fully():
    compiled = kiln.compile(maps_and_filters, fullgraph=True)
    xs = [torch.randn(3) for _ in range(3)]
    x = torch.randn(3)
    for _ in range(2):
        assert_same(compiled(xs, x), maps_and_filters(xs, x))
    assert stats()["traces"] == 1


def iter_and_next(xs, x):
    it = iter(xs)
    first = next(it)
    second = next(it, x)
    rest = list(it)
    done = next(it, None)
    return first + second, len(rest), done


def test_iter_and_next():
    compiled = kiln.compile(iter_and_next, fullgraph=True)
    for n in (2, 4):
        xs = [torch.randn(3) for _ in range(n)]
        x = torch.randn(3)
        assert_same(compiled(xs, x), iter_and_next(xs, x))
    assert stats()["unsupported"] == 0 and stats()["graph_breaks"] == 0
