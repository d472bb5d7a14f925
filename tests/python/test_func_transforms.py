"""Frames called under torch.func transforms (vmap, grad, jvp) run as plain
Python under the transform (Note [Frames under torch.func transforms] in
interpreter/frame_hook.cpp): their tensors are the transform's wrappers,
which kiln's kernels cannot read (a CPU kernel handed a BatchedTensor
aborted the process). Results against eager; the frames around the
transform still compile."""
import torch
from torch._higher_order_ops.associative_scan import associative_scan

import kiln
from conftest import assert_same


def combine(a, b):
    return a * b + a


def test_a_compiled_function_calling_vmap_equals_eager():
    def f(x, y):
        return torch.vmap(combine)(x.sin(), y) * 2

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert_same(kiln.compile(f)(x, y), f(x, y))
    assert kiln.stats()["traces"] >= 1, kiln.stats()


def test_vmap_of_a_compiled_function_equals_eager():
    compiled = kiln.compile(combine)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert_same(torch.vmap(compiled)(x, y), torch.vmap(combine)(x, y))
    # The same function outside the transform still compiles and runs kiln's graph.
    assert_same(compiled(x, y), combine(x, y))
    assert kiln.stats()["traces"] == 1, kiln.stats()


def test_grad_and_jvp_of_a_compiled_function_equal_eager():
    def loss(w):
        return (w.tanh() * 3).sum()

    compiled = kiln.compile(loss)
    w, v = torch.randn(5, 3), torch.randn(5, 3)
    assert_same(torch.func.grad(compiled)(w), torch.func.grad(loss)(w))
    assert_same(torch.func.jvp(compiled, (w,), (v,)), torch.func.jvp(loss, (w,), (v,)))


def test_generic_associative_scan_equals_eager():
    # transformers' Mamba scan on the CPU: torch's generic associative_scan
    # calls its combine function through vmap.
    def combine_pairs(left, right):
        a_left, b_left = left
        a_right, b_right = right
        return a_left * a_right, a_right * b_left + b_right

    def scan(a, b):
        return associative_scan(combine_pairs, (a, b), dim=1, combine_mode="generic")[1]

    a, b = torch.rand(2, 16, 8), torch.randn(2, 16, 8)
    assert_same(kiln.compile(scan)(a, b), scan(a, b))


def test_a_scan_over_a_function_defined_in_the_forward_is_one_graph():
    # transformers' Mamba: associative_scan(combine_fn, ...) with combine_fn
    # a nested def (Note [Functions made in the trace as arguments]): the
    # node holds a function made over the same code and constants.
    def scan(a, b):
        def combine_fn(left, right, scale=1.0):
            a_left, b_left = left
            a_right, b_right = right
            return a_left * a_right, (a_right * b_left + b_right) * scale

        return associative_scan(combine_fn, (a.sigmoid(), b), dim=1, combine_mode="generic")[1] + 1

    a, b = torch.rand(2, 16, 8), torch.randn(2, 16, 8)
    explained = kiln.explain(scan)(a, b)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert_same(kiln.compile(scan)(a, b), scan(a, b))


def test_a_function_closing_over_a_tensor_is_not_made_again():
    def scan(a, b):
        shift = b.mean()

        def combine_fn(left, right):
            return left * right + shift

        return associative_scan(combine_fn, a, dim=1, combine_mode="generic")

    a, b = torch.rand(2, 8), torch.randn(2, 8)
    assert_same(kiln.compile(scan)(a, b), scan(a, b))
