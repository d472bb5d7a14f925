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


def test_convolutions_take_torchs_backward_without_running_again(monkeypatch):
    # _BACKWARDS: no second forward; strides, padding, dilation, groups, bias
    # and keyword arguments as eager autograd has them.
    import kiln._extern_vjp as ev
    cases = [
        (F.conv1d, (torch.randn(2, 4, 9), torch.randn(6, 2, 3), torch.randn(6)), {"stride": 2, "groups": 2}),
        (F.conv2d, (torch.randn(2, 3, 8, 7), torch.randn(5, 3, 3, 2)), {"padding": (1, 0), "dilation": 2}),
        (F.conv3d, (torch.randn(1, 2, 5, 5, 5), torch.randn(3, 2, 2, 2, 2)), {"bias": torch.randn(3), "stride": 1}),
    ]
    for fn, args, kwargs in cases:
        args = tuple(a.double() for a in args)
        kwargs = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        leaves = [a.clone().requires_grad_() for a in args]
        kw = {k: v.clone().requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        out = fn(*leaves, **kw)
        g = torch.randn_like(out)
        wanted = leaves + [v for v in kw.values() if isinstance(v, torch.Tensor)]
        want = torch.autograd.grad(out, wanted, g)
        slots = [(0, i) for i in range(len(args))] + [(1, k) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        monkeypatch.setattr(ev, "_replace", lambda *a: (_ for _ in ()).throw(AssertionError("ran the op again")))
        got = extern_vjp(fn, args, kwargs, slots, (g,))
        monkeypatch.undo()
        got = got if isinstance(got, tuple) else (got,)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    # string padding is not the backward kernel's: the op runs again
    x, w = torch.randn(1, 2, 5, 5, dtype=torch.float64), torch.randn(3, 2, 3, 3, dtype=torch.float64)
    g = torch.randn(1, 3, 5, 5, dtype=torch.float64)
    gx = extern_vjp(F.conv2d, (x, w), {"padding": "same"}, ((0, 0),), (g,))
    xr = x.clone().requires_grad_()
    torch.testing.assert_close(gx, torch.autograd.grad(F.conv2d(xr, w, padding="same"), xr, g)[0])
