"""Module hooks: kiln refuses to trace past them and notices new ones."""
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
        # The hook ran (and its replacement output was used), as in eager.
        assert calls == [1]
        torch.testing.assert_close(out, torch.zeros_like(out).relu())
        assert kiln.stats()["graph_breaks"] + kiln.stats()["unsupported"] >= 1
    finally:
        handle.remove()
    before = kiln.stats()["cache_hits"]
    torch.testing.assert_close(compiled(x), model(x))
    assert kiln.stats()["cache_hits"] == before + 1


def test_hooked_submodule_reason_in_explain():
    model = Outer()
    handle = model.inner.register_forward_pre_hook(lambda mod, inp: None)
    try:
        out = kiln.explain(model)(torch.randn(2, 4))
        assert out.graph_break_count == 1
        assert "_forward_pre_hooks" in out.break_reasons[0]
    finally:
        handle.remove()
