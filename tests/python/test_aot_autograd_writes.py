"""aot_eager with writes into tensors (setitem, in-place methods on views)
and with inputs whose gradient eager leaves None: the cases the aot_eager
fuzzer found (Note [Writes in the joint graph], autograd/partitioner.cpp)."""
import pytest
import torch

import kiln

BUF = torch.zeros(1)


def fresh_stats():
    kiln.reset()
    return kiln.stats()


def delta(before):
    after = kiln.stats()
    return {k: after[k] - before.get(k, 0) for k in after}


def compiled_like_eager(f, inputs, backend="inductor", **extra):
    """f compiled and eager on `inputs`: outputs and input gradients equal,
    and one graph differentiated by kiln's autograd (no prim fallback).
    Returns the compiled outputs and eager's."""
    before = fresh_stats()
    out = kiln.compile(f, backend=backend)(*inputs, **extra)
    ref = f(*inputs, **extra)
    for a, b in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        torch.testing.assert_close(a, b)
    wanted = [t for t in inputs if t.requires_grad]
    for a, b in zip(grads(out, wanted), grads(ref, wanted)):
        torch.testing.assert_close(a, b)
    d = delta(before)
    assert d["autograd_graphs"] == 1 and d["prim_fallbacks"] == 0, d
    return out, ref


def grads(out, inputs):
    leaves = [t for t in (out if isinstance(out, tuple) else (out,)) if t.requires_grad]
    total = sum(t.sum() for t in leaves)
    return torch.autograd.grad(total, inputs, allow_unused=True)


def test_setitem_into_an_intermediate_runs_in_the_forward():
    def f(x):
        w = torch.zeros_like(x)
        w[0] = 3
        w[1:] -= 2.0
        w.div_(2.0)
        return x * w, w

    x = torch.randn(4, requires_grad=True)
    before = fresh_stats()
    out = kiln.compile(f, backend="aot_eager")(x)
    ref = f(x)
    torch.testing.assert_close(out[1], ref[1])
    torch.testing.assert_close(out[0], ref[0])
    # x's gradient reads w as written: saved by the forward, not recomputed.
    torch.testing.assert_close(grads(out, [x])[0], grads(ref, [x])[0])
    d = delta(before)
    assert d["autograd_graphs"] >= 1 and d["prim_fallbacks"] == 0, d


def test_setitem_into_a_global_buffer_is_not_dropped():
    def f(x, n):
        BUF[0] = n
        return x + BUF

    x = torch.randn(2, 2, requires_grad=True)
    BUF.zero_()
    out = kiln.compile(f, backend="aot_eager")(x, 2)
    assert BUF.item() == 2.0
    torch.testing.assert_close(out, x + 2)
    torch.testing.assert_close(grads(out, [x])[0], torch.ones(2, 2))


def test_write_on_a_gradient_path_is_differentiated_by_kiln():
    # A write into a tensor nothing else sees is a functional write (Note
    # [Index writes on intermediates]): slices and a cat kiln's autograd
    # differentiates.
    def f(x):
        w = x.clone()
        w[0] = 0.5  # x[0] gets no gradient
        return w * 2

    compiled_like_eager(f, [torch.randn(6, requires_grad=True)], "aot_eager")


def test_write_seen_through_a_view_on_a_gradient_path_is_left_to_torch_autograd():
    # An as_strided view is a torch call kiln cannot follow (Note [Writes
    # through views] carries writes to views it makes again itself).
    def f(x):
        w = x.clone()
        tail = w.as_strided((5,), (1,), 1)
        w[1] = 0.5  # tail sees it
        return tail * 2, w

    x = torch.randn(6, requires_grad=True)
    before = fresh_stats()
    out = kiln.compile(f, backend="aot_eager")(x)
    ref = f(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(grads(out, [x])[0], grads(ref, [x])[0])
    assert delta(before)["prim_fallbacks"] >= 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_index_writes_of_every_basic_form_match_eager(backend):
    # ints (negative too), slices, Ellipsis, a number, a value of another
    # dtype that broadcasts, a value with a leading size-1 dim, all of y.
    def f(x, v):
        y = x * 2
        y[1:3, ..., 0] = v[:2, :3]
        y[0] = 1.5
        y[:, -1] = v[0].double()
        y[-1, 1:, 2:4] = v[None, 1, 3:5]
        y[2:2] = 7.0  # writes nothing
        y[1:, :2, 1::5] = v[1:, :2, None] * 3  # every fifth element: a split dim
        y[..., 1::5] = 0.25
        z = y.clone()
        z[...] = v[0]
        return y.sin(), z

    compiled_like_eager(f, [torch.randn(4, 3, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True)], backend)


def test_interleaved_rotary_writes_are_differentiated_by_kiln():
    # Wan's rotary embedding: even and odd features written by step-2 slices.
    def rotate(x, cos, sin):
        x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out

    compiled_like_eager(rotate, [torch.randn(2, 5, 8, requires_grad=True), torch.randn(5, 4), torch.randn(5, 4)])


def test_scan_into_a_transposed_buffer_keeps_its_layout():
    # RecurrentGemma's linear scan: a zeros_like of a transposed tensor,
    # written one step at a time; the result keeps torch's strides.
    def scan(x, gate):
        h = x.transpose(1, 2)
        out = torch.zeros_like(h)
        state = torch.zeros(h[:, 0].shape)
        for t in range(h.shape[1]):
            state = gate[:, t] * state + h[:, t]
            out[:, t] = state
        return out, state

    out, ref = compiled_like_eager(scan, [torch.randn(2, 4, 6, requires_grad=True),
                                          torch.rand(2, 6, 4, requires_grad=True)])
    assert out[0].stride() == ref[0].stride()


def test_index_write_under_no_grad_records_no_gradient():
    w = torch.randn(3, requires_grad=True)

    def f(x):
        with torch.no_grad():
            y = torch.zeros(2, 3)
            y[0] = w
        return x * y

    x = torch.randn(2, 3, requires_grad=True)
    out = kiln.compile(f)(x)
    ref = f(x)
    torch.testing.assert_close(out, ref)
    gx, gw = torch.autograd.grad(out.sum(), [x, w], allow_unused=True)
    assert gw is None
    torch.testing.assert_close(gx, torch.autograd.grad(ref.sum(), [x])[0])


def test_writing_a_value_with_gradients_into_a_plain_tensor_keeps_them():
    def f(x):
        w = torch.zeros(3)
        w[1] = x.sum()
        return w * 3

    x = torch.randn(4, requires_grad=True)
    out = kiln.compile(f, backend="aot_eager")(x)
    ref = f(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(grads(out, [x])[0], grads(ref, [x])[0])


def test_input_reached_only_through_unused_results_gets_none():
    def f(x, y):
        y = y * 3 + 0.5  # live across the break, never used after it
        print_later = x.sum().item()  # a graph break
        return x * 2 + print_later

    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, dtype=torch.float64, requires_grad=True)
    out = kiln.compile(f, backend="aot_eager")(x, y)
    ref = f(x, y)
    got = grads(out, [x, y])
    want = grads(ref, [x, y])
    torch.testing.assert_close(got[0], want[0])
    assert want[1] is None and got[1] is None, got[1]


def test_outputs_that_view_inputs_or_outputs_can_be_written_in_place():
    def f(x):
        w = x * 2
        return w, w.unsqueeze(0), x[1:], (x + 1).t()

    x = torch.randn(3, 2, requires_grad=True)
    out = kiln.compile(f, backend="aot_eager")(x)
    ref = f(x)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    # A view of another output: writing into it writes into that output.
    out[1].mul_(3)
    ref[1].mul_(3)
    torch.testing.assert_close(out[0], ref[0])
    torch.testing.assert_close(grads(out[:2] + out[3:], [x])[0], grads(ref[:2] + ref[3:], [x])[0])
    # A view of the input aliases it, as in eager.
    assert out[2].data_ptr() == x[1:].data_ptr()
    assert out[3].is_contiguous() == ref[3].is_contiguous()


def test_reshape_that_copies_is_not_taken_as_a_view():
    def f(x):
        t = x.reshape(x.shape[0] * x.shape[1])  # x is transposed: reshape copies
        return t, t * 2

    x = torch.randn(3, 2).t().requires_grad_()
    out = kiln.compile(f, backend="aot_eager")(x)
    ref = f(x)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    torch.testing.assert_close(grads(out, [x])[0], grads(ref, [x])[0])


def test_view_of_an_intermediate_stays_a_view_of_the_output_sharing_it():
    def f(x, y):
        w = (x * 2).clone()
        v = w.unsqueeze(0)
        v.mul_(2)
        w *= w  # an in-place extern: its result is w itself
        return w, v, y * 3

    x = torch.randn(6)
    y = torch.randn(6, requires_grad=True)  # so the graph runs through kiln's autograd
    out = kiln.compile(f, backend="aot_eager")(x, y)
    ref = f(x, y)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    out[0].add_(1)  # v views w in eager: so it must here
    ref[0].add_(1)
    torch.testing.assert_close(out[1], ref[1])


def test_view_taken_under_no_grad_is_left_to_torch():
    # Under torch.no_grad() a view of a tensor that requires grad still
    # requires grad but has no history: x gets no gradient through it.
    def f(x):
        t = x * 2 + 1
        with torch.no_grad():
            v = torch.permute(t, (1, 0))
        return v * 3, t.sum()

    x = torch.randn(2, 3, requires_grad=True)
    before = fresh_stats()
    out = kiln.compile(f, backend="aot_eager")(x)
    ref = f(x)
    assert [o.requires_grad for o in out] == [r.requires_grad for r in ref]
    got = torch.autograd.grad(out[0].sum(), [x], allow_unused=True)
    want = torch.autograd.grad(ref[0].sum(), [x], allow_unused=True)
    assert got[0] is None and want[0] is None
    assert delta(before)["prim_fallbacks"] >= 1


def test_in_place_op_on_the_result_of_an_in_place_extern_stays_in_place():
    def f(y):
        w = y.clone()
        v = w.unsqueeze(0)
        v.mul_(2)
        w += w  # operator.iadd returns w itself
        w.neg_()  # so this writes into v's memory too
        return v * 0.5 + 0.1

    y = torch.randn(6)
    torch.testing.assert_close(kiln.compile(f, backend="aot_eager")(y), f(y))


def test_outputs_whose_gradient_never_arrives_are_skipped_like_eager():
    # Fuzzer seed 5537: the loss uses one output; the other's backward meets
    # an infinity (sqrt at 0). Zeros for its gradient would make 0 * inf =
    # NaN; eager never runs that path (Note [Absent gradients]).
    def f(x):
        return x.sin() * 2, (x * 0).sqrt() + x

    for backend in ("aot_eager", "inductor"):
        compiled = kiln.compile(f, backend=backend)
        for _ in range(2):  # the second call reuses the cached variant
            x = torch.randn(5, requires_grad=True)
            x_ref = x.detach().clone().requires_grad_()
            (gx,) = torch.autograd.grad(compiled(x)[0].sum(), x)
            (gref,) = torch.autograd.grad(f(x_ref)[0].sum(), x_ref)
            torch.testing.assert_close(gx, gref)
            # Both outputs: the full backward.
            out = compiled(x)
            (gx,) = torch.autograd.grad(out[0].sum() + out[1].sum(), x)
            ref = f(x_ref)
            (gref,) = torch.autograd.grad(ref[0].sum() + ref[1].sum(), x_ref)
            torch.testing.assert_close(gx, gref, equal_nan=True)


def test_an_input_only_absent_gradients_reach_gets_none():
    def f(x, y):
        return x * 3, y.exp() + x

    compiled = kiln.compile(f, backend="aot_eager")
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    gx, gy = torch.autograd.grad(compiled(x, y)[0].sum(), (x, y), allow_unused=True)
    torch.testing.assert_close(gx, torch.full((3,), 3.0))
    assert gy is None


def test_amin_gradient_spreads_a_nan_like_eager():
    # Fuzzer seed 6904: std over one element is NaN; torch's amin backward
    # multiplies by the mask, so every element's gradient is NaN.
    def f(t):
        return t.amin(0, True).std(dim=0, keepdim=True)

    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    kiln.compile(f, backend="aot_eager")(x).sum().backward()
    f(x_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, equal_nan=True)


def test_an_input_reached_only_through_sign_gets_zeros_not_none():
    # Fuzzer seed 8816: sign's derivative is zeros, so eager gives y a zero
    # gradient, even when the loss leaves the graph's other output unused.
    def f(x, y):
        return torch.sign(y.var(-1)), x * 2 + y

    x = torch.randn(4, 4)
    y = torch.randn(4, 4, requires_grad=True)
    for backend in ("aot_eager", "inductor"):
        kiln.reset()
        out = kiln.compile(f, backend=backend)(x, y)
        (g,) = torch.autograd.grad(out[0].sum(), y, allow_unused=True)
        assert g is not None and torch.equal(g, torch.zeros_like(y)), g


def test_shape_only_arguments_get_no_gradient():
    # Fuzzer seed 11936: reshape_as/view_as/expand_as read only other's
    # sizes; eager leaves other's gradient None.
    def f(x, y):
        return x.reshape_as(y) + x.view_as(y) * 2 + x.expand_as(y)

    x = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    for backend in ("aot_eager", "inductor"):
        kiln.reset()
        gx, gy = torch.autograd.grad(kiln.compile(f, backend=backend)(x, y).sum(), (x, y), allow_unused=True)
        torch.testing.assert_close(gx, torch.full_like(x, 4.0))
        assert gy is None


def test_in_place_op_on_a_non_leaf_input_traces_without_a_break():
    # An activation passed in (it has a grad_fn) is no leaf: eagerly an
    # in-place op on it is allowed, so its fake must allow it too (a leaf
    # fake raised at trace time and broke the graph). A leaf still raises.
    def f(x, y):
        x += y
        return x * 2

    w = torch.randn(3, requires_grad=True)
    y = torch.randn(3)
    eager_in = w * 1.5
    want = f(eager_in, y)
    want.sum().backward()
    want_grad = w.grad.clone()
    w.grad = None
    kiln.reset()
    compiled_in = w * 1.5
    got = kiln.compile(f)(compiled_in, y)
    assert kiln.stats()["graph_breaks"] == 0 and kiln.stats()["unsupported"] == 0, kiln.stats()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(compiled_in, eager_in)  # the caller's tensor was written
    got.sum().backward()
    torch.testing.assert_close(w.grad, want_grad)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        kiln.compile(f)(w, y)
