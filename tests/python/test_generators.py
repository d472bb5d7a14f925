"""Generator functions called inside compiled code (Note [Generators],
tracer/trace_calls.cpp): a for loop or next() runs the generator a yield at
a time, interleaved with the consumer as in eager Python; other consumers
take it whole, and only when running it ahead of them is invisible."""
from collections.abc import Sequence

import pytest
import torch

import kiln
from conftest import assert_same, check_compiled


class View(Sequence):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]  # IndexError ends Sequence.__iter__


def pairs(xs):
    for i, x in enumerate(xs):
        yield i, x * 2


def evens(n):
    for i in range(n):
        yield 2 * i


def test_for_loops_next_and_whole_consumers():
    def inner(x):
        out = x * 0
        for t in View([x, x + 1]):
            out = out + t
        for i, y in pairs([x, x * 3]):
            out = out + y * i
        return out + sum(evens(3)) + next(evens(5)) + list(evens(2))[1]

    check_compiled(lambda x: inner(x), lambda: (torch.randn(3),))


def test_generator_with_side_effects_keeps_eager_order():
    # The write happens when next() asks for the first item, after `before`
    # was read: running the generator at its call would be a wrong result.
    def gen(x):
        x.add_(1)
        yield x * 2
        x.mul_(3)

    def inner(x):
        g = gen(x)
        before = x + 0
        return before, next(g)

    def fn(x):
        return inner(x)

    x = torch.ones(2)
    assert_same(kiln.compile(fn)(x.clone()), fn(x.clone()))


def test_loop_that_stops_early_runs_no_more_of_the_generator():
    seen = []

    def counting(n):
        for i in range(n):
            seen.append(i)
            yield i

    def inner(x):
        for i in counting(10):
            if i == 2:
                break
            x = x + i
        return x

    def fn(x):
        return inner(x)

    x = torch.zeros(2)
    expected = fn(x)
    eager_seen = list(seen)
    seen.clear()
    assert_same(kiln.compile(fn)(x), expected)
    assert seen == eager_seen == [0, 1, 2]


def _delegating(n):
    total = yield from _counting(n)
    yield total


def _counting(n):
    for i in range(n):
        yield i * 10
    return n * 100


@pytest.mark.parametrize("inlined", [False, True])
def test_yield_from_delegates_and_returns(inlined):
    # `yield from` (GET_YIELD_FROM_ITER, SEND): the delegate's items, then
    # its return value as the expression's; nn.Module.named_modules recurses
    # through it.
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.Linear(4, 4)))

        def forward(self, x):
            for m in self.modules():
                if isinstance(m, torch.nn.Linear):
                    x = m(x).tanh()
            return x + sum(_delegating(3))

    net = Net()
    model = torch.nn.Sequential(net) if inlined else net
    x = torch.randn(2, 4)
    torch.testing.assert_close(kiln.compile(model)(x), model(x))
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"], s["unsupported"]) == (1, 0, 0), s
