"""kiln._extern_vjp: the gradients of extern nodes, asked of torch."""
import torch
import torch.nn.functional as F

from kiln._extern_vjp import extern_vjp


def test_conv2d_gradients_match_autograd():
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64)
    g = torch.randn(1, 3, 3, 3, dtype=torch.float64)
    gx, gw = extern_vjp(F.conv2d, (x, w), {}, ((0, 0), (0, 1)), (g,))
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(F.conv2d(xr, wr), (xr, wr), g)
    assert torch.allclose(gx, ex) and torch.allclose(gw, ew)
    assert not x.requires_grad and x.grad is None  # the caller's tensors are untouched


def test_one_slot_returns_a_tensor_unused_gets_zeros_and_paths_reach_nested_items():
    a = torch.randn(2, 3, dtype=torch.float64)
    b = torch.randn(2, 3, dtype=torch.float64).t()  # non-contiguous
    g = torch.randn(4, 3, dtype=torch.float64)
    got = extern_vjp(torch.cat, ((a, a),), {"dim": 0}, ((0, 0, 1),), (g,))
    assert isinstance(got, torch.Tensor) and torch.equal(got, g[2:])
    unused = extern_vjp(lambda x, y: x * 2, (a,), {"y": b}, ((1, "y"),), (torch.ones(2, 3),))
    assert torch.equal(unused, torch.zeros(3, 2, dtype=torch.float64)) and unused.is_contiguous()


def test_outputs_without_gradient_are_skipped():
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    g = torch.randn(1, 1, 2, 2, dtype=torch.float64)
    got = extern_vjp(F.max_pool2d, (x, 2), {"return_indices": True}, ((0, 0),), (g, None))
    xr = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(F.max_pool2d(xr, 2), xr, g)
    assert torch.equal(got, want)
