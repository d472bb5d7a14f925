"""itertools inside compiled code (stdlib/itertools_model.cpp): evaluated
eagerly over known items like map() and generator expressions; the endless
count() and repeat() give items only to islice, zip, map and next."""
import itertools
import operator

import torch

import kiln
from conftest import assert_same, check_compiled


def chains_and_slices(xs, x):
    chained = list(itertools.chain(xs, [x]))
    flat = list(itertools.chain.from_iterable([xs, (x, x)]))
    head = list(itertools.islice(xs, 2))
    stepped = list(itertools.islice(range(10), 1, 8, 3))
    it = iter(xs)
    first_two = list(itertools.islice(it, 2))
    rest = list(it)
    return chained, flat, head, stepped, first_two, rest


def test_chain_and_islice():
    check_compiled(chains_and_slices, lambda: ([torch.randn(2) for _ in range(4)], torch.randn(2)))


def combinatorics(xs):
    pairs = [a * b for a, b in itertools.product(xs, [1, 2])]
    grid = list(itertools.product(range(2), repeat=2))
    combos = [a - b for a, b in itertools.combinations(xs, 2)]
    perms = len(list(itertools.permutations(range(4), 2)))
    with_rep = list(itertools.combinations_with_replacement("ab", 2))
    return pairs, grid, combos, perms, with_rep


def test_product_combinations_permutations():
    check_compiled(combinatorics, lambda: ([torch.randn(3) for _ in range(3)],))


def running(xs):
    sums = list(itertools.accumulate(xs))
    maxes = list(itertools.accumulate(xs, torch.maximum))
    scaled = list(itertools.accumulate([1, 2, 3], operator.mul, initial=10))
    return sums, maxes, scaled


def test_accumulate():
    check_compiled(running, lambda: ([torch.randn(3) for _ in range(4)],))


def endless(xs, x):
    numbered = list(zip(itertools.count(), xs))
    odds = list(itertools.islice(itertools.count(1, 2), 4))
    counter = itertools.count(5)
    first = next(counter)
    after = list(itertools.islice(counter, 2))
    scaled = list(map(operator.mul, xs, itertools.repeat(2)))
    repeated = list(itertools.repeat(x, 3))
    halves = list(itertools.islice(itertools.count(0.0, 0.5), 3))
    return numbered, odds, first, after, scaled, repeated, halves


def test_count_and_repeat():
    check_compiled(endless, lambda: ([torch.randn(2) for _ in range(3)], torch.randn(2)))


def pairing(xs, x):
    longest = list(itertools.zip_longest(xs, [x], fillvalue=0))
    starred = list(itertools.starmap(torch.add, zip(xs, xs)))
    windows = [b - a for a, b in itertools.pairwise(xs)]
    taken = list(itertools.takewhile(lambda n: n < 3, [1, 2, 3, 1]))
    dropped = list(itertools.dropwhile(lambda n: n < 3, [1, 2, 3, 1]))
    falses = list(itertools.filterfalse(None, [0, 1, 0, 2]))
    picked = list(itertools.compress(xs, [1, 0, 1]))
    return longest, starred, windows, taken, dropped, falses, picked


def test_zip_longest_starmap_pairwise_and_filters():
    check_compiled(pairing, lambda: ([torch.randn(2) for _ in range(3)], torch.randn(2)))


def endless_loop(x):
    for i in itertools.count():
        if i >= 3:
            break
        x = x + i
    return x


def groups(x):
    y = x * 2
    keys = [k for k, _ in itertools.groupby([1, 1, 2])]
    return y + len(keys)


def test_unmodelled_itertools_break_cleanly():
    for fn in (endless_loop, groups):
        compiled = kiln.compile(fn)
        for _ in range(2):
            x = torch.randn(2)
            assert_same(compiled(x), fn(x))
    explained = kiln.explain(endless_loop)(torch.randn(2))
    assert any("itertools.count" in reason for reason in explained.break_reasons), str(explained)
    explained = kiln.explain(groups)(torch.randn(2))
    # The comprehension then iterates the groupby object CPython made: more
    # breaks, each clean, and the frame's result is still right.
    assert "call of Object <class 'itertools.groupby'>" in explained.break_reasons[0], str(explained)
