"""A user pass over kiln's captured graphs: x * sigmoid(x) becomes one call
of a custom op (kiln.passes.after_capture). Runs on the CPU:

    .venv/bin/python examples/user_pass.py
"""
import operator

import torch
import torch.nn as nn

import kiln
import kiln.passes


@torch.library.custom_op("kiln_example::silu", mutates_args=())
def fused_silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) in one op (a stand-in for a hand-written kernel)."""
    return torch.nn.functional.silu(x)


@fused_silu.register_fake
def _(x):
    return torch.empty_like(x)


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _silu_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    s = torch.sigmoid(x)
    return grad * s * (1 + x * (1 - s))


fused_silu.register_autograd(_silu_backward, setup_context=_save_input)


def fuse_silu(gm):
    """Rewrites, in place, every mul(x, sigmoid(x)) whose sigmoid has no other
    use into kiln_example.silu(x), counting them in gm.meta["silu_rewrites"]."""
    rewrites = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (torch.sigmoid, torch.Tensor.sigmoid):
            continue
        if len(node.users) != 1:
            continue
        (user,) = node.users
        x = node.args[0]
        if user.target not in (operator.mul, torch.mul) or set(user.args) != {x, node}:
            continue
        with gm.graph.inserting_after(user):
            fused = gm.graph.call_function(torch.ops.kiln_example.silu, (x,))
        user.replace_all_uses_with(fused)
        gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        rewrites += 1
    gm.meta["silu_rewrites"] = gm.meta.get("silu_rewrites", 0) + rewrites


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x):
        h = self.up(x)
        return self.down(h * torch.sigmoid(h)) + x


def main():
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(8, 16, requires_grad=True)
    seen = []

    def counting(gm):
        fuse_silu(gm)
        seen.append(gm)

    compiled = kiln.compile(model, backend=kiln.passes.after_capture(counting))
    got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want)
    (g,) = torch.autograd.grad(got.square().sum(), x)
    (w,) = torch.autograd.grad(want.square().sum(), x)
    torch.testing.assert_close(g, w)
    rewrites = sum(gm.meta["silu_rewrites"] for gm in seen)
    assert rewrites == 1, rewrites
    print(seen[0].code.strip())
    print(f"ok: {rewrites} x*sigmoid(x) fused into kiln_example.silu; outputs and gradients equal eager's")


if __name__ == "__main__":
    main()
