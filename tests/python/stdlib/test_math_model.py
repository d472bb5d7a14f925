"""The math module inside compiled code (stdlib/math_model.cpp): run for
real on constants (shapes, hyperparameters); on a tensor it would read the
tensor's value, so the trace breaks there, except math.prod."""
import math

import torch

import kiln
from conftest import assert_same, check_compiled


def scaled_attention(q, k):
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    fan = math.prod(q.shape) + math.floor(2.7) + math.ceil(0.2) + math.gcd(12, 18)
    angles = (math.cos(math.pi), math.log2(8), math.isclose(0.1 + 0.2, 0.3), math.fsum([0.1] * 10))
    return (q @ k.transpose(-1, -2)) * scale, fan, angles, math.inf > d


def test_math_on_constants_folds():
    check_compiled(scaled_attention, lambda: (torch.randn(2, 4), torch.randn(3, 4)))


def product_of_tensors(xs):
    return math.prod(xs), math.prod(xs, start=2)


def test_math_prod_multiplies_tensors_in_the_graph():
    check_compiled(product_of_tensors, lambda: ([torch.randn(3) for _ in range(3)],))


def sqrt_of_tensor(x):
    y = x.abs() + 1
    return y / math.sqrt(y.sum())


def test_math_of_a_tensor_breaks_as_data_dependent():
    compiled = kiln.compile(sqrt_of_tensor)
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), sqrt_of_tensor(x))
    explained = kiln.explain(sqrt_of_tensor)(torch.randn(3))
    assert explained.graph_count == 2 and explained.graph_break_count == 1, str(explained)
    assert "math.sqrt() of Tensor" in explained.break_reasons[0]
    assert "tensor values" in explained.break_reasons[0]  # the DataDependent hint
