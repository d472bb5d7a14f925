"""Module hooks: forward hooks and pre-hooks are traced around forward
(Note [Inlined module hooks]), and a hook added or removed later
recompiles."""
import torch
from torch import nn

import kiln


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        return self.inner(x).relu()


def test_hook_registered_after_compile_runs():
    torch.manual_seed(0)
    model = Outer()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    calls = []
    handle = model.inner.register_forward_hook(lambda mod, inp, out: calls.append(1) or out * 0)
    try:
        out = compiled(x)
        # The hook ran (and its replacement output was used), as in eager,
        # traced into the graph: the new hook recompiled, nothing broke.
        assert calls == [1]
        torch.testing.assert_close(out, torch.zeros_like(out).relu())
        assert kiln.stats()["recompiles"] == 1 and kiln.stats()["graph_breaks"] == 0, kiln.stats()
        compiled(x)
        assert calls == [1, 1]
    finally:
        handle.remove()
    before = kiln.stats()["cache_hits"]
    torch.testing.assert_close(compiled(x), model(x))
    assert kiln.stats()["cache_hits"] == before + 1
    assert calls == [1, 1]


def test_pre_hook_and_forward_hook_replace_args_and_output_in_one_graph():
    torch.manual_seed(0)
    model = Outer()
    model.inner.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    model.inner.register_forward_pre_hook(lambda mod, args: None)
    model.inner.register_forward_hook(lambda mod, args, out: out + args[0].sum())
    x = torch.randn(2, 4)
    want = model(x)
    explained = kiln.explain(model)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
    kiln.reset()
    compiled = kiln.compile(model)
    torch.testing.assert_close(compiled(x), want)
    torch.testing.assert_close(compiled(x), want)
    assert kiln.stats()["traces"] == 1 and kiln.stats()["cache_hits"] == 1


def test_replaced_hook_function_recompiles():
    torch.manual_seed(0)
    model = Outer()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    handle = model.inner.register_forward_hook(lambda mod, args, out: out * 2)
    torch.testing.assert_close(compiled(x), model(x))
    handle.remove()
    model.inner.register_forward_hook(lambda mod, args, out: out * 3)
    torch.testing.assert_close(compiled(x), model(x))


def test_input_embeddings_made_to_require_grad_by_a_hook():
    # transformers' enable_input_require_grads (gradient checkpointing with
    # frozen embeddings): a forward hook calls output.requires_grad_(True);
    # with trainable embeddings that changes nothing and traces.
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 8)
            self.head = nn.Linear(8, 3)

        def forward(self, ids):
            return self.head(self.embed(ids)).sum()

    model = Model()
    model.embed.register_forward_hook(lambda mod, args, out: out.requires_grad_(True))
    ids = torch.tensor([[1, 2, 3]])
    model(ids).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    explained = kiln.explain(model)(ids)
    assert explained.graph_break_count == 0, explained.break_reasons
    kiln.reset()
    kiln.compile(model)(ids).backward()
    for g, w in zip((p.grad for p in model.parameters()), want):
        torch.testing.assert_close(g, w)


def test_full_backward_hook_breaks_the_graph_and_runs():
    # The hooked call runs in CPython; torch's BackwardHookFunction (its
    # forward lives in torch/nn/modules) stays untraced, so the hook gets
    # the gradients as in eager (compiled, it raised "Error while setting
    # up backward hooks").
    torch.manual_seed(0)
    model = Outer()
    seen = []
    model.inner.register_full_backward_hook(lambda mod, grad_in, grad_out: seen.append(grad_out[0].clone()))
    x = torch.randn(2, 4, requires_grad=True)
    model(x).square().sum().backward()
    want, want_seen = x.grad.clone(), seen.pop()
    x.grad = None
    explained = kiln.explain(model)(x)
    assert explained.graph_break_count == 1 and "_backward_hooks" in explained.break_reasons[0]
    seen.clear()
    kiln.reset()
    kiln.compile(model)(x).square().sum().backward()
    torch.testing.assert_close(x.grad, want)
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], want_seen)


def test_backward_pre_hook_registered_after_compile_recompiles_and_runs():
    # A full backward pre-hook added after the model was compiled without
    # hooks: the no-hooks guard notices it, the module's call breaks the
    # graph and runs in CPython, and the hook sees eager's gradient.
    torch.manual_seed(0)
    model = Outer()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4, requires_grad=True)
    compiled(x).square().sum().backward()
    seen = []
    model.inner.register_full_backward_pre_hook(lambda mod, grad_out: seen.append(grad_out[0].clone()))
    model(x).square().sum().backward()
    want = seen.pop()
    compiled(x).square().sum().backward()
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], want)
    assert kiln.stats()["recompiles"] >= 1
