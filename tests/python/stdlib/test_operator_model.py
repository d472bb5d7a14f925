"""The operator module inside compiled code (stdlib/operator_model.cpp):
each function means what its operator means to the tracer, a graph node on
tensors and folded on Python values; itemgetter, attrgetter and
methodcaller apply to their argument."""
import operator

import torch

import kiln
from conftest import assert_same, check_compiled


class Pair:
    def __init__(self, first, second):
        self.first = first
        self.second = second


PAIR = Pair(1, 4)
GET_SECOND = operator.itemgetter(1)
GET_SHAPE = operator.attrgetter("shape", "dtype")
CALL_VIEW = operator.methodcaller("view", -1)


def arithmetic(x, y):
    tensors = (operator.add(x, y), operator.mul(x, 2), operator.truediv(x, y), operator.sub(1, x),
               operator.neg(x), operator.pow(x, 2), operator.matmul(x, y), operator.abs(x),
               operator.gt(x, y), operator.getitem(x, 0), operator.iadd(x.clone(), y))
    numbers = (operator.add(2, 3), operator.floordiv(7, 2), operator.not_(0), operator.truth([1]),
               operator.lt(1, 2), operator.concat([1], [2]), operator.getitem((4, 5, 6), slice(1, None)),
               operator.contains([1, 2], 2), operator.is_(None, None), operator.index(3))
    return tensors, numbers


def test_operator_functions_on_tensors_and_numbers():
    check_compiled(arithmetic, lambda: (torch.randn(3), torch.randn(3)))


def getters(x, pair):
    first_two = operator.itemgetter(0, 1)([x, x * 2, x * 3])
    second = GET_SECOND([x, x + 1])
    shape, dtype = GET_SHAPE(x)
    made_here = operator.attrgetter("second")(pair)
    flat = CALL_VIEW(x)
    summed = operator.methodcaller("sum", dim=0)(x)
    return first_two, second, shape, dtype, made_here, flat, summed


def test_getters_made_before_and_inside_the_call():
    check_compiled(getters, lambda: (torch.randn(2, 3), PAIR))


def reduce_with_operator(xs):
    total = xs[0]
    for t in xs[1:]:
        total = operator.mul(total, t)
    return sorted([3, 1, 2], key=None), total, list(map(operator.add, xs, xs))


def test_operator_functions_passed_as_values():
    check_compiled(reduce_with_operator, lambda: ([torch.randn(2) for _ in range(3)],))


def setitem_on_list(x):
    items = [x, x]
    operator.setitem(items, 1, x * 5)
    return items


def test_setitem_on_a_list():
    check_compiled(setitem_on_list, lambda: (torch.randn(2),))


def identity_of_objects(x, xs):
    same = operator.is_(xs, xs)
    return x + 1, same


def concat_of_tensors(x):
    return operator.concat(x, x)


def test_unmodelled_operator_cases_break_cleanly():
    compiled = kiln.compile(identity_of_objects)
    for _ in range(2):
        x, xs = torch.randn(2), [1]
        assert_same(compiled(x, xs), identity_of_objects(x, xs))
    explained = kiln.explain(identity_of_objects)(torch.randn(2), [1])
    assert explained.graph_break_count == 1 and "operator.is_()" in explained.break_reasons[0]
    # operator.concat wants sequences: a tensor raises in Python as in kiln.
    compiled = kiln.compile(concat_of_tensors)
    for fn in (compiled, concat_of_tensors):
        try:
            fn(torch.randn(2))
        except TypeError:
            pass
        else:
            raise AssertionError("operator.concat of tensors must raise TypeError")
