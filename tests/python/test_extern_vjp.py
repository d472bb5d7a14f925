"""kiln._extern_vjp: the gradients of extern nodes, asked of torch."""
import torch
import torch.nn.functional as F

from kiln._extern_vjp import extern_vjp


def strides(*tensors):
    """The strides extern_vjp is given for these inputs (empty_like's layout: theirs, when dense)."""
    return tuple(t.stride() for t in tensors)


def test_conv2d_gradients_match_autograd():
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64)
    g = torch.randn(1, 3, 3, 3, dtype=torch.float64)
    gx, gw = extern_vjp(F.conv2d, (x, w), {}, ((0, 0), (0, 1)), (g,), strides(x, w))
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(F.conv2d(xr, wr), (xr, wr), g)
    assert torch.allclose(gx, ex) and torch.allclose(gw, ew)
    assert not x.requires_grad and x.grad is None  # the caller's tensors are untouched


def test_one_slot_returns_a_tensor_unused_gets_zeros_and_paths_reach_nested_items():
    a = torch.randn(2, 3, dtype=torch.float64)
    b = torch.randn(2, 3, dtype=torch.float64).t()  # non-contiguous
    g = torch.randn(4, 3, dtype=torch.float64)
    got = extern_vjp(torch.cat, ((a, a),), {"dim": 0}, ((0, 0, 1),), (g,), strides(a))
    assert isinstance(got, torch.Tensor) and torch.equal(got, g[2:])
    unused = extern_vjp(lambda x, y: x * 2, (a,), {"y": b}, ((1, "y"),), (torch.ones(2, 3),), strides(b))
    assert torch.equal(unused, torch.zeros(3, 2, dtype=torch.float64)) and unused.stride() == b.stride()


def test_outputs_without_gradient_are_skipped():
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    g = torch.randn(1, 1, 2, 2, dtype=torch.float64)
    got = extern_vjp(F.max_pool2d, (x, 2), {"return_indices": True}, ((0, 0),), (g, None), strides(x))
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
        got = extern_vjp(fn, args, kwargs, slots, (g,), strides(*wanted))
        monkeypatch.undo()
        got = got if isinstance(got, tuple) else (got,)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    # string padding is not the backward kernel's: the op runs again
    x, w = torch.randn(1, 2, 5, 5, dtype=torch.float64), torch.randn(3, 2, 3, 3, dtype=torch.float64)
    g = torch.randn(1, 3, 5, 5, dtype=torch.float64)
    gx = extern_vjp(F.conv2d, (x, w), {"padding": "same"}, ((0, 0),), (g,), strides(x))
    xr = x.clone().requires_grad_()
    torch.testing.assert_close(gx, torch.autograd.grad(F.conv2d(xr, w, padding="same"), xr, g)[0])


def test_gradients_come_back_in_the_strides_asked():
    # A channels-last convolution's gradients stay channels-last (Note
    # [Channels-last convolutions]); asked for another layout, they are copied.
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    g = torch.randn(2, 4, 4, 4, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(F.conv2d(xr, wr), (xr, wr), g)
    for fn in (F.conv2d, lambda *a: F.conv2d(*a)):  # torch's backward kernel, then a rerun under autograd
        gx, gw = extern_vjp(fn, (x, w), {}, ((0, 0), (0, 1)), (g,), strides(x, w))
        assert gx.stride() == x.stride() and gw.stride() == w.stride()
        torch.testing.assert_close(gx, ex)
        torch.testing.assert_close(gw, ew)
        contiguous = (torch.empty(x.shape).stride(), torch.empty(w.shape).stride())
        gx, gw = extern_vjp(fn, (x, w), {}, ((0, 0), (0, 1)), (g,), contiguous)
        assert gx.is_contiguous() and gw.is_contiguous()
        torch.testing.assert_close(gx, ex)
        torch.testing.assert_close(gw, ew)


def test_an_extern_reading_tensors_inside_a_list_passes_gradients_on():
    # torch.einsum(eq, [a, b]) stays a torch call with its tensors inside a
    # list: its result carries a gradient to both (before, kiln's autograd
    # looked at top-level arguments only and the result had no grad_fn).
    import kiln

    def f(a, b):
        return torch.einsum("ij,jk->ik", [a, b]).sin().sum()

    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 5, requires_grad=True)
    want = torch.autograd.grad(f(a, b), (a, b))
    got = torch.autograd.grad(kiln.compile(f)(a, b), (a, b))
    torch.testing.assert_close(got, want)


def test_a_call_writing_in_place_gets_gradients_and_leaves_its_input_alone():
    # timm's CSPDarkNet: LeakyReLU(inplace=True) after a training BatchNorm
    # kept as an extern; its gradient reran the call on a leaf ("a leaf
    # Variable that requires grad is being used in an in-place operation").
    x = torch.randn(2, 3, dtype=torch.float64)
    saved = x.clone()
    g = torch.randn(2, 3, dtype=torch.float64)
    got = extern_vjp(F.leaky_relu, (x, 0.1, True), {}, ((0, 0),), (g,), strides(x))
    xr = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(F.leaky_relu(xr, 0.1), xr, g)
    assert torch.equal(got, want)
    assert torch.equal(x, saved)  # the saved forward value is not overwritten


def test_a_training_step_through_an_in_place_activation_equals_eager():
    import kiln
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                                torch.nn.LeakyReLU(0.1, inplace=True)).train()
    twin = __import__("copy").deepcopy(model)
    x = torch.randn(2, 3, 8, 8)
    model(x).square().mean().backward()
    kiln.compile(twin)(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)
