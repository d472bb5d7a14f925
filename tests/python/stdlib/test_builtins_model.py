"""Python builtins inside compiled code (stdlib/builtins_model.cpp and
containers_model.cpp): answered from what the trace knows, evaluated over
known items, or graph nodes on tensors; what they cannot model breaks
cleanly."""
import torch

import kiln
from conftest import assert_same, check_compiled, stats


class Holder:
    scale = 2


HOLDER = Holder()


def sizes_and_types(x, xs, d):
    n = len(x) + len(xs) + len(d) + len("abc")
    kinds = (isinstance(x, torch.Tensor), isinstance(xs, (list, tuple)), isinstance(d, dict),
             isinstance(3, (int, float)), type(x) is torch.Tensor, type(xs) is list)
    attrs = (getattr(HOLDER, "scale"), hasattr(HOLDER, "scale"), hasattr(HOLDER, "missing"),
             getattr(HOLDER, "missing", 5))
    return x * n, kinds, attrs, callable(torch.relu), callable(xs)


def test_sizes_types_and_attributes():
    check_compiled(sizes_and_types, lambda: (torch.randn(3), [1, 2], {"a": 1}))


def numbers(x):
    a = abs(-3) + abs(x).sum()
    b = round(2.567, 2) + pow(2, 3) + divmod(7, 2)[0] + int("4") + float(1)
    c = pow(x, 2) + pow(2, x)
    return a, b, c, min(3, 1, 2), max([4, 5]), bool(0), bool([1]), str(7), sorted([3, 1, 2], reverse=True)


def test_numeric_builtins_fold_and_tensor_cases_become_nodes():
    check_compiled(numbers, lambda: (torch.randn(4),))


def iteration(xs, x):
    pairs = list(zip(xs, range(len(xs))))
    firsts = [a for a, _ in pairs]
    numbered = [(i, t * i) for i, t in enumerate(xs, start=1)]
    back = tuple(reversed(xs))
    total = sum(xs) + sum(xs, x) + sum(range(4))
    mapped = list(map(torch.neg, xs))
    kept = list(filter(lambda k: k % 2, range(6)))
    return firsts, numbered, back, total, mapped, kept, any([0, 1]), all(t.dim() == 1 for t in xs)


def test_iteration_builtins():
    check_compiled(iteration, lambda: ([torch.randn(2) for _ in range(3)], torch.randn(2)))


def iterator_consumed(xs):
    it = iter(xs)
    first = next(it)
    total = sum(it)
    return first, total, list(it), next(it, None)


def test_consuming_builtins_exhaust_iterators():
    check_compiled(iterator_consumed, lambda: ([1, 2, 3, 4],))


def containers(x, xs, d):
    out = list(xs)
    out.append(x)
    out.extend([x * 2])
    out.insert(0, x + 1)
    last = out.pop()
    out.reverse()
    d2 = d.copy()
    d2.update({"b": x})
    d2.setdefault("c", 3)
    return out, last, d2.get("a"), list(d2.keys()), d2.pop("b"), (1, 2, 2).count(2), [4, 5].index(5)


def test_container_methods():
    check_compiled(containers, lambda: (torch.randn(2), [torch.randn(2)], {"a": 1}))


def mutates_caller_list(x, xs):
    xs.append(x * 2)
    xs.pop(0)
    return len(xs)


def test_container_methods_write_back_to_the_callers_list():
    compiled = kiln.compile(mutates_caller_list, fullgraph=True)
    for _ in range(2):
        x = torch.randn(2)
        mine, theirs = [torch.ones(2), torch.zeros(2)], [torch.ones(2), torch.zeros(2)]
        assert compiled(x, mine) == mutates_caller_list(x, theirs)
        assert_same(mine, theirs)


def reads_tensor_value(x):
    y = x + 1
    n = int(y.sum())
    return y * n


def prints(x):
    y = x * 2
    print("value", y.shape[0])
    return y + 1


def test_unmodelled_builtins_break_cleanly(capsys):
    for fn, why in [(reads_tensor_value, "int() of Tensor"), (prints, "print()")]:
        compiled = kiln.compile(fn)
        x = torch.randn(3)
        assert_same(compiled(x), fn(x))
        explained = kiln.explain(fn)(x)
        assert explained.graph_break_count == 1, str(explained)
        assert why in explained.break_reasons[0]
    assert stats()["graph_breaks"] >= 2


def test_fullgraph_reports_the_unmodelled_builtin():
    def uses_vars(x):
        return x * len(vars(Holder))

    compiled = kiln.compile(uses_vars, fullgraph=True)
    try:
        compiled(torch.randn(2))
    except kiln.Unsupported as error:
        assert "vars" in str(error)
    else:
        raise AssertionError("expected kiln.Unsupported")
