"""torch.utils.checkpoint in compiled code: the checkpointed function is
traced where it is called (Note [Traced checkpoints] in
tracer/trace_checkpoint.cpp) and the backward recomputes what it made
(Note [Checkpointed regions] in autograd/partitioner.cpp). Gradients are
eager's; the model captures as one graph."""
import functools
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp

import kiln


# Regions matter to kiln's autograd; CPU graphs reach it through the
# inductor backend where kiln has LLVM, and through aot_eager everywhere.
BACKEND = "inductor" if kiln._C.cpu_kernels_available() else "aot_eager"


def stats():
    return kiln.stats()


class Block(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x, scale=1.0):
        return x + self.down(F.gelu(self.up(self.norm(x)))) * scale


def gradients(fn, model, x):
    model.zero_grad(set_to_none=True)
    x.grad = None
    loss = fn(x)
    loss.backward()
    return [loss] + [p.grad for p in model.parameters()] + [x.grad]


def assert_gradients_equal(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), i
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=lambda m: f"value {i}: {m}")


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_blocks_in_a_loop_capture_as_one_graph(reentrant):
    # The documented use: checkpoint(block, x) per block in a loop. As a
    # graph op the call could not take its module and no break is possible
    # in a loop, so the model ran eagerly.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(3)])

        def forward(self, x):
            for block in self.blocks:
                x = cp.checkpoint(block, x, use_reentrant=reentrant)
            return x.square().sum()

    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 16, requires_grad=True)
    want = gradients(model, model, x)
    compiled = kiln.compile(model, backend=BACKEND)
    for _ in range(2):
        assert_gradients_equal(gradients(compiled, model, x), want)
    s = stats()
    assert (s["traces"], s["graph_breaks"], s["eager_runs"], s["autograd_graphs"]) == (1, 0, 0, 1), s


def test_layer_checkpointing_through_a_partial_of_super_call():
    # transformers' gradient-checkpointing layers: __call__ passes
    # partial(super().__call__, **kwargs) to the checkpoint function (a
    # partial made in the trace, a frame using super(): no break possible).
    class Layer(Block):
        def __init__(self):
            super().__init__()
            self.checkpoint_fn = functools.partial(cp.checkpoint, use_reentrant=False)

        def __call__(self, *args, **kwargs):
            if self.training:
                return self.checkpoint_fn(functools.partial(super().__call__, **kwargs), *args)
            return super().__call__(*args, **kwargs)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Layer() for _ in range(2)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x, scale=0.5)
            return x.sum()

    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 16, requires_grad=True)
    want = gradients(model, model, x)
    assert_gradients_equal(gradients(kiln.compile(model, backend=BACKEND), model, x), want)
    s = stats()
    assert (s["graph_breaks"], s["eager_runs"], s["autograd_graphs"]) == (0, 0, 1), s


def test_random_draws_inside_a_region_are_the_forwards():
    # Eagerly, preserve_rng_state makes the recomputation draw the forward's
    # numbers again; kiln keeps the draws. The gradient of
    # sum(dropout(3x)) is 3 * 2 where the forward kept an element, else 0:
    # a backward drawing a new mask breaks that.
    def fn(x):
        return cp.checkpoint(lambda t: F.dropout(t * 3, 0.5, training=True), x, use_reentrant=False)

    x = (torch.rand(4096) + 0.5).requires_grad_()
    out = kiln.compile(fn, backend=BACKEND)(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, (out != 0).float() * 6)
    assert stats()["autograd_graphs"] == 1


def test_reentrant_checkpoint_of_inputs_without_grad_matches_eager():
    # use_reentrant=True of arguments none of which requires grad: eagerly
    # the function's parameters get no gradient. Not traced (kiln would give
    # them one); the call runs as torch runs it.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block, self.head = Block(), nn.Linear(16, 1)

        def forward(self, x):
            return self.head(cp.checkpoint(self.block, x, use_reentrant=True)).sum()

    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "None of the inputs have requires_grad=True"
        want = gradients(model, model, x)
        got = gradients(kiln.compile(model, backend=BACKEND), model, x)
    assert want[1] is None  # the block's first parameter: no gradient eagerly
    assert_gradients_equal(got, want)


def test_checkpoint_under_no_grad_is_the_function():
    def fn(x):
        return cp.checkpoint(lambda t: t.sin() * 2, x, use_reentrant=False) + 1

    x = torch.randn(8)
    with torch.no_grad():
        torch.testing.assert_close(kiln.compile(fn)(x), fn(x))
    s = stats()
    assert (s["traces"], s["graph_breaks"]) == (1, 0), s


def test_checkpoint_with_context_fn_runs_as_torch_runs_it():
    # context_fn is not traced: the call runs eagerly (a graph break), with
    # eager's gradients.
    def fn(x, w):
        y = x * w
        y = cp.checkpoint(torch.tanh, y, use_reentrant=False, context_fn=cp.noop_context_fn)
        return (y * w).sum()

    x, w = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    fn(x, w).backward()
    want = [x.grad.clone(), w.grad.clone()]
    x.grad = w.grad = None
    kiln.compile(fn)(x, w).backward()
    torch.testing.assert_close([x.grad, w.grad], want)
    assert stats()["graph_breaks"] == 1
