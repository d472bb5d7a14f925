"""Training through kiln's AOT autograd (backend="aot_eager"): the traced
forward is decomposed into prims, differentiated into a joint graph,
partitioned, and run as a torch.autograd.Function, so loss.backward() in
user code fills .grad. Every case trains a copy of a model eagerly beside
it and compares losses, parameter gradients and input gradients."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import kiln_logs

stats = kiln.stats  # with the backend counters (prim_graphs, autograd_graphs, ...)


class Elementwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))
        self.b = nn.Parameter(torch.randn(8))

    def forward(self, x):
        return (x * self.w + self.b).tanh().exp()


class MLP(nn.Module):
    def __init__(self, act=nn.ReLU):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), act(), nn.Linear(16, 16), act(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class LayerNormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(F.gelu(self.norm(x)))


class Attention(nn.Module):
    def __init__(self, width=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        mask = torch.tril(torch.ones(t, t)).view(1, 1, t, t)
        att = att.masked_fill(mask == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return x + self.proj(y)


class CharModel(nn.Module):
    def __init__(self, vocab=11, width=16, context=6):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.block = Attention(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        return self.head(self.block(x))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


class Shared(nn.Module):
    """One weight used twice; outputs of several kinds."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(torch.sigmoid(self.fc(x)))
        return h, h.argmax(dim=1)


class Reductions(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x):
        y = x * self.w
        return y.mean(1) + y.var(1) + y.std(0).sum() + y.amax(1) - y.sum(0).pow(2).mean()


class Shapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8))

    def forward(self, x):
        a = x[:, 1:5] * self.w.t()[1:5].t().sum(0)
        b = torch.cat([x, x * 2], dim=1).view(x.shape[0], 2, 8).permute(1, 0, 2).reshape(2, -1)
        c = torch.stack([x, x.flip(0) if False else x], 0).sum(0)
        return a.sum(1) + b.sum(0)[: x.shape[0]] + c.unsqueeze(0).squeeze(0).mean(1)


class InplaceOps(nn.Module):
    """In-place ops on intermediates before the backward."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        y.mul_(2)
        y.add_(1)
        y = torch.relu_(y)
        return y


class InplaceOnLinear3d(nn.Module):
    """Falcon's `mlp_output += attention_output`: a linear on 3-d input ends
    in a view of its matmul, which nothing else reads (Note [In-place ops on
    intermediates])."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.attn = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        y += self.attn(x)
        return y


class BatchNormEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.bn.eval()

    def forward(self, x):
        return self.bn(self.fc(x))


class BatchNormTrain1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):
        return torch.tanh(self.bn(self.fc(x)))


class DropoutEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.drop = nn.Dropout(0.3)
        self.drop.eval()

    def forward(self, x):
        return self.drop(self.fc(x))


class Softmaxes(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        h = self.fc(x)
        return F.softmax(h, dim=1) * F.log_softmax(h, dim=0)


class EmbeddingBag(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 3)

    def forward(self, idx):
        return self.fc(self.emb(idx).mean(1))


class Bilinear(nn.Module):
    """matmul of two computed operands, bmm and transposes."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        p = self.a(x).unsqueeze(2)
        q = self.b(x).unsqueeze(1)
        return torch.bmm(p, q).sum(-1) + torch.matmul(self.a(x), self.b.weight)


class Clamps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return h.clamp(-0.5, 0.5) + F.relu(F.relu(h)) + h.abs().sqrt() + h.pow(3) + torch.where(h > 0, h, h * 0.1)


class Losses(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


class LossInside(nn.Module):
    """The loss itself traced: the compiled graph returns a scalar."""
    def __init__(self):
        super().__init__()
        self.mlp = MLP()
        self.target = torch.randint(0, 4, (6,))

    def forward(self, x):
        return F.cross_entropy(self.mlp(x), self.target)


class ResidualBlocks(nn.Module):
    """Pre-norm residual MLP blocks with a written-into intermediate mask."""

    def __init__(self, width=8, depth=3):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(depth))
        self.fcs = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for norm, fc in zip(self.norms, self.fcs):
            x = x + F.gelu(fc(norm(x)))
        mask = torch.ones_like(x)
        mask[:, 0] = 0.5
        return x * mask


class ConvPoolHead(nn.Module):
    """Two convolutions, average pooling, a linear head, log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.silu(self.conv2(x))
        x = x.mean(dim=(2, 3))
        return F.log_softmax(self.head(x), dim=-1)


def make_x(shape, requires_grad=False):
    return lambda: torch.randn(*shape, requires_grad=requires_grad)


CLASSES = 4


def mse(out, target):
    return F.mse_loss(out, target)


def ce(out, target):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


CASES = {
    # name: (model factory, input factory, target factory, loss)
    "elementwise": (Elementwise, make_x((5, 8)), lambda: torch.randn(5, 8), mse),
    "elementwise_input_grad": (Elementwise, make_x((5, 8), True), lambda: torch.randn(5, 8), mse),
    "mlp_relu_mse": (MLP, make_x((6, 8)), lambda: torch.randn(6, 4), mse),
    "mlp_gelu_mse": (lambda: MLP(nn.GELU), make_x((6, 8)), lambda: torch.randn(6, 4), mse),
    "mlp_silu_ce": (lambda: MLP(nn.SiLU), make_x((6, 8)), lambda: torch.randint(0, 4, (6,)), ce),
    "mlp_tanh_input_grad": (lambda: MLP(nn.Tanh), make_x((6, 8), True), lambda: torch.randn(6, 4), mse),
    "mlp_sigmoid_l1": (lambda: MLP(nn.Sigmoid), make_x((6, 8)), lambda: torch.randn(6, 4),
                       lambda o, t: F.l1_loss(o, t)),
    "mlp_nll_log_softmax": (MLP, make_x((6, 8)), lambda: torch.randint(0, 4, (6,)),
                            lambda o, t: F.nll_loss(F.log_softmax(o, dim=1), t)),
    "layernorm_gelu": (LayerNormMLP, make_x((3, 5, 8)), lambda: torch.randn(3, 5, 4), mse),
    "attention_block": (Attention, make_x((2, 6, 16)), lambda: torch.randn(2, 6, 16), mse),
    "attention_block_input_grad": (Attention, make_x((2, 6, 16), True), lambda: torch.randn(2, 6, 16), mse),
    "char_model_ce": (CharModel, lambda: torch.randint(0, 11, (3, 6)), lambda: torch.randint(0, 11, (3, 6)), ce),
    "reductions": (Reductions, make_x((5, 8)), lambda: torch.randn(5), mse),
    "shapes": (Shapes, make_x((4, 8)), lambda: torch.randn(4), mse),
    "shared_weight_and_argmax": (Shared, make_x((5, 8)), lambda: torch.randn(5, 8),
                                 lambda o, t: F.mse_loss(o[0], t) + o[1].float().mean() * 0),
    "convnet_batchnorm_train": (ConvNet, make_x((2, 3, 8, 8)), lambda: torch.randint(0, 5, (2,)), ce),
    "inplace_ops_before_backward": (InplaceOps, make_x((5, 8)), lambda: torch.randn(5, 8), mse),
    "inplace_add_on_a_3d_linear": (InplaceOnLinear3d, make_x((2, 5, 8)), lambda: torch.randn(2, 5, 8), mse),
    "batchnorm_eval": (BatchNormEval, make_x((6, 8)), lambda: torch.randn(6, 8), mse),
    "batchnorm_train_1d": (BatchNormTrain1d, make_x((6, 8)), lambda: torch.randn(6, 8), mse),
    "dropout_eval": (DropoutEval, make_x((6, 8)), lambda: torch.randn(6, 4), mse),
    "softmax_log_softmax": (Softmaxes, make_x((5, 8)), lambda: torch.randn(5, 6), mse),
    "embedding_mean": (EmbeddingBag, lambda: torch.randint(0, 10, (4, 5)), lambda: torch.randint(0, 3, (4,)), ce),
    "bmm_matmul_two_operands": (Bilinear, make_x((5, 8)), lambda: torch.randn(5, 8), mse),
    "clamp_relu_abs_pow_where": (Clamps, make_x((5, 8)), lambda: torch.randn(5, 8), mse),
    "loss_smooth_l1": (Losses, make_x((6, 8)), lambda: torch.randn(6, 4), lambda o, t: F.smooth_l1_loss(o, t)),
    "loss_bce_with_logits": (Losses, make_x((6, 8)), lambda: torch.rand(6, 4),
                             lambda o, t: F.binary_cross_entropy_with_logits(o, t)),
    "loss_cross_entropy_label_smoothing": (Losses, make_x((6, 8)), lambda: torch.randint(0, 4, (6,)),
                                           lambda o, t: F.cross_entropy(o, t, label_smoothing=0.1)),
    "loss_mse_sum_reduction": (Losses, make_x((6, 8)), lambda: torch.randn(6, 4),
                               lambda o, t: F.mse_loss(o, t, reduction="sum")),
    "loss_computed_inside_model": (lambda: LossInside(), make_x((6, 8)), lambda: torch.randint(0, 4, (6,)),
                                   lambda o, t: o),
    "residual_blocks_with_mask_write": (ResidualBlocks, make_x((4, 8), True), lambda: torch.randn(4, 8), mse),
    "conv_pool_head_nll": (ConvPoolHead, make_x((2, 2, 6, 6)), lambda: torch.randint(0, 3, (2,)),
                           lambda o, t: F.nll_loss(o, t)),
}


def train_side_by_side(name, steps=3, lr=0.1):
    make_model, make_input, make_target, loss_fn = CASES[name]
    torch.manual_seed(0)
    model = make_model()
    reference = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    for step in range(steps):
        x = make_input()
        target = make_target()
        x_ref = x.detach().clone().requires_grad_(x.requires_grad)
        loss = loss_fn(compiled(x), target)
        ref_loss = loss_fn(reference(x_ref), target)
        torch.testing.assert_close(loss, ref_loss, msg=lambda m: f"{name} step {step} loss: {m}")
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        ref_loss.backward()
        for (pname, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
            assert (p.grad is None) == (q.grad is None), f"{name} step {step}: {pname}.grad presence"
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: f"{name} step {step} {pname}.grad: {m}")
        if x.requires_grad:
            torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"{name} step {step} input grad: {m}")
        opt.step()
        ref_opt.step()
    for (pname, p), (_, q) in zip(model.state_dict().items(), reference.state_dict().items()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {pname} after training: {m}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_training_matches_eager(name):
    train_side_by_side(name)
    s = stats()
    assert s["autograd_graphs"] >= 1, f"{name}: no graph ran through kiln's autograd: {s}"
    assert s["prim_fallbacks"] == 0, f"{name}: a graph fell back to eager autograd: {s}"


def test_gradients_accumulate_over_two_backwards():
    model = MLP()
    reference = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="aot_eager")
    x = torch.randn(4, 8)
    for _ in range(2):
        compiled(x).sum().backward()
        reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_no_grad_call_runs_forward_only_graph():
    model = MLP()
    compiled = kiln.compile(model, backend="aot_eager")
    with torch.no_grad():
        out = compiled(torch.randn(3, 8))
    assert not out.requires_grad
    assert stats()["autograd_graphs"] == 0 and stats()["prim_graphs"] == 1


class LayerScale(torch.nn.Module):
    """A timm ConvNeXt block's scale: a view of a parameter (which keeps
    requires_grad under no_grad) times the activations."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.gamma = torch.nn.Parameter(torch.rand(4))

    def forward(self, x):
        return x + self.conv(x).mul(self.gamma.reshape(1, -1, 1, 1))


def test_no_grad_views_of_parameters_keep_an_inference_graph():
    model = LayerScale()
    compiled = kiln.compile(model, backend="aot_eager")
    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        out = compiled(x)
        torch.testing.assert_close(out, model(x))
    assert not out.requires_grad
    assert stats()["autograd_graphs"] == 0 and stats()["prim_graphs"] == 1


def test_no_grad_call_making_a_grad_tensor_keeps_its_requires_grad():
    def fn(x):
        return (x * 2).requires_grad_(), x + 1

    compiled = kiln.compile(fn, backend="aot_eager")
    x = torch.randn(3)
    with torch.no_grad():
        made, plain = compiled(x)
        ref_made, ref_plain = fn(x)
    torch.testing.assert_close(made, ref_made)
    assert made.requires_grad and ref_made.requires_grad
    assert not plain.requires_grad


def test_tensor_made_to_require_grad_inside_the_graph_gets_its_gradient():
    # The graph up to the break returns the leaf and a loss that depends on
    # it; the backward after the break must reach the leaf.
    def fn(x):
        w = torch.ones(3, requires_grad=True)
        loss = (x * w).sum()
        loss.backward()
        return w.grad * 2

    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(fn)(x), fn(x))


def test_requires_grad_set_inside_the_graph_gives_input_gradients():
    def fn(x):
        y = x.detach().requires_grad_()
        return y, (y.sin() * 3).sum()

    x = torch.randn(4)
    y, loss = kiln.compile(fn)(x)
    loss.backward()
    ref_y, ref_loss = fn(x)
    ref_loss.backward()
    torch.testing.assert_close(y.grad, ref_y.grad)


def test_leaf_no_one_reads_is_differentiated_by_kiln():
    # wav2vec2's feature encoder: a view of the input made to require grad
    # (Note [Grad leaves made in a graph]); its .grad is unreachable, so
    # kiln's autograd differentiates the graph whole.
    conv = torch.nn.Conv1d(1, 4, 3)
    reference = copy.deepcopy(conv)

    def encoder(module, x):
        h = x[:, None]
        h.requires_grad = True
        return module(h).relu().pow(2).mean()

    x = torch.randn(2, 16)
    compiled = kiln.compile(encoder)
    loss = compiled(conv, x)
    loss.backward()
    ref = encoder(reference, x)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    for p, q in zip(conv.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    s = stats()
    assert (s["graph_breaks"], s["autograd_graphs"], s["prim_fallbacks"]) == (0, 1, 0), s


@pytest.mark.parametrize("spelling", ["method", "assignment"])
def test_leaf_made_in_the_graph_that_callers_can_reach_runs_through_torch(spelling):
    # Only the leaf's gradient reaches the loss: torch's autograd must see
    # it, and the leaf returned gets its .grad.
    def fn(x):
        h = x * 2
        if spelling == "method":
            h.requires_grad_()
        else:
            h.requires_grad = True
        return (h.sin() * 3).sum(), h

    x = torch.randn(5)
    loss, leaf = kiln.compile(fn)(x)
    loss.backward()
    ref_loss, ref_leaf = fn(x)
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(leaf.grad, ref_leaf.grad)
    s = stats()
    assert (s["graph_breaks"], s["prim_fallbacks"]) == (0, 1), s


def test_assignment_to_other_tensor_attributes_breaks():
    def fn(x):
        y = x + 1
        y.some_tag = 3
        return y * 2

    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(fn)(x), fn(x))
    assert stats()["graph_breaks"] == 1


def test_conversion_that_changes_nothing_is_its_input():
    # Note [Conversions that change nothing]: x.float() of a float tensor is
    # x, eagerly; under no_grad inside a training graph it is the parameter
    # itself (diffusers' Wan), whose gradient still arrives.
    lin = nn.Linear(4, 4)
    reference = copy.deepcopy(lin)

    def f(module, x):
        with torch.no_grad():
            w = module.weight.float()
        return (x @ w.t() + module.bias).pow(2).sum(), x.float() is x, x.contiguous() is x, x.double() is x

    x = torch.randn(2, 4, requires_grad=True)
    out = kiln.compile(f)(lin, x)
    ref = f(reference, x)
    assert out[1:] == ref[1:] == (True, True, False)
    torch.testing.assert_close(out[0], ref[0])
    out[0].backward()
    ref[0].backward()
    torch.testing.assert_close(lin.weight.grad, reference.weight.grad)
    s = stats()
    assert (s["graph_breaks"], s["autograd_graphs"], s["prim_fallbacks"]) == (0, 1, 0), s


def test_backward_twice_through_retained_graph():
    model = Elementwise()
    reference = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="aot_eager")
    x = torch.randn(3, 8)
    out, ref = compiled(x).sum(), reference(x).sum()
    out.backward(retain_graph=True)
    out.backward()
    ref.backward(retain_graph=True)
    ref.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_inference_mode_call_runs_forward_only_graph():
    model = MLP()
    compiled = kiln.compile(model, backend="aot_eager")
    x = torch.randn(3, 8)
    with torch.inference_mode():
        out = compiled(x)
        torch.testing.assert_close(out, model(x))
    assert stats()["autograd_graphs"] == 0 and stats()["prim_graphs"] == 1


def split_heads(x):
    q, k, v = x.split(4, dim=1)
    return (q * 2 + k * 3 + v.sin()).sum()


def overlapping_and_gapped_slices(x):
    return (x[:, :5] * 2).sum() + x[:, 3:].cos().sum() + (x[:, 1:2] * x[:, 7:8]).sum()


def stepped_slices(x):
    # Rotary halves (x[..., ::2], x[..., 1::2]), a step past the end, a start inside.
    return (x[:, ::2] * 2).sum() + x[:, 1::2].sin().sum() + x[:, 1::5].exp().sum() + x[:, 7::4].square().sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [split_heads, overlapping_and_gapped_slices, stepped_slices])
def test_slice_gradients_are_joined_by_cat(fn, backend, capfd):
    # Note [Slice gradients joined by cat]: no zero-filled index_put per
    # slice; a stepped slice's gradient interleaves zeros by a cat.
    x = torch.randn(3, 12, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    compiled = kiln.compile(fn, backend=backend)
    with kiln_logs("prims"):
        out = compiled(x)
    log = capfd.readouterr().err
    out.backward()
    fn(xe).backward()
    torch.testing.assert_close(x.grad, xe.grad)
    backward = log[log.index("backward graph"):]
    assert "cat(" in backward and "index_put" not in backward, backward


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_weight_gradients_arrive_in_the_weights_layout(backend):
    # A Linear multiplies by W^T, a column-major view: its gradient is
    # computed column-major, so W's gradient arrives in W's own layout and
    # autograd does not copy it (session 8's GPT profile).
    model = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.Linear(16, 5))
    eager = copy.deepcopy(model)
    x = torch.randn(3, 7, 12)
    other_layout = []
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name, p=p: other_layout.append(name) if g.stride() != p.stride() else None)
    kiln.compile(model, backend=backend)(x).square().sum().backward()
    eager(x).square().sum().backward()
    assert other_layout == []
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_a_transposed_operand_gets_its_gradient_in_its_layout():
    # q @ k^T (attention's scores): k's gradient comes back in k's layout.
    q = torch.randn(2, 3, 6, 4, requires_grad=True)
    k = torch.randn(2, 3, 6, 4, requires_grad=True)
    qe, ke = (t.detach().clone().requires_grad_() for t in (q, k))
    seen = []
    k.register_hook(lambda g: seen.append(g.stride()))
    q.register_hook(lambda g: seen.append(g.stride()))
    fn = lambda a, b: (a @ b.transpose(-2, -1)).softmax(-1)
    kiln.compile(fn, backend="aot_eager")(q, k).sum().backward()
    fn(qe, ke).sum().backward()
    assert sorted(seen) == sorted([k.stride(), q.stride()])
    torch.testing.assert_close(q.grad, qe.grad)
    torch.testing.assert_close(k.grad, ke.grad)


class PositionEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(11, 6)
        self.pos = nn.Embedding(8, 6)

    def forward(self, idx):
        t = idx.shape[1]
        every = self.pos(torch.arange(t, device=idx.device))
        odd = self.pos(torch.arange(1, t, 2, device=idx.device))
        return self.tok(idx) + every + odd.sum(0)


# The prim graph is logged where the graph is decomposed: always under
# aot_eager, under inductor where CPU kernels exist (not on a build
# without LLVM, such as the GPU machine's).
@pytest.mark.parametrize("backend", ["aot_eager"] + (["inductor"] if kiln._C.cpu_kernels_available() else []))
@pytest.mark.parametrize("t", [8, 5])
def test_an_embedding_read_by_an_arange_is_a_slice(backend, t, capfd):
    # Note [Index ranges]: pos(arange(...)) reads a range of the table's
    # rows; the backward adds into them without a scatter_add, and the
    # gradients are eager's.
    model = PositionEmbedding()
    eager = copy.deepcopy(model)
    idx = torch.randint(0, 11, (3, t))
    compiled = kiln.compile(model, backend=backend)
    with kiln_logs("prims"):
        out = compiled(idx)
    log = capfd.readouterr().err
    out.square().sum().backward()
    expected = eager(idx)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    traced = log[:log.index("return")]  # the forward's prim graph
    assert traced.count(" = index_select(") == 1, traced  # the token embedding's only
    backward = log[log.index("backward graph"):]
    backward = backward[:backward.index("return")]  # the prim graph, before any kernel pass
    assert backward.count(" = scatter(") == 1, backward  # the token embedding's only
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def _grads(fn, backend, *shapes_and_makers):
    inputs = [make().requires_grad_() for make in shapes_and_makers]
    fn(*inputs).sum().backward()
    eager = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    kiln.compile(fn, backend=backend)(*inputs).sum().backward()
    return eager, [t.grad for t in inputs]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gradients_at_degenerate_points_match_torch(backend):
    # torch's formulas mask these points: std of equal values (std_backward
    # gives 0 where the result is 0) and atan2 at (0, 0).
    def std_of_equal_rows(x):
        return x[:1].expand(4, 3).std(dim=0)

    def atan2_at_origin(a):
        masked = a * (a > 0)
        return torch.atan2(masked, masked)

    def std_of_six_equal_rows(x):
        # six equal values do not sum exactly: the mean must still be the value
        # (Note [Corrected two-pass variance])
        return (x[:1] * 3.3).expand(6, 3).std(dim=0)

    for fn in (std_of_equal_rows, std_of_six_equal_rows, atan2_at_origin):
        eager, compiled = _grads(fn, backend, lambda: torch.randn(4, 3))
        for e, c in zip(eager, compiled):
            assert not c.isnan().any(), fn.__name__
            torch.testing.assert_close(c, e)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_in_place_op_makes_its_target_require_grad(backend):
    def fn(y):
        w = torch.zeros_like(y)
        w.add_(y, alpha=0.5)
        return torch.tanh(w)

    y = torch.randn(5, 2, requires_grad=True)
    out = kiln.compile(fn, backend=backend)(y)
    assert out.requires_grad
    eager, compiled = _grads(fn, backend, lambda: torch.randn(5, 2))
    torch.testing.assert_close(compiled[0], eager[0])



class InPlaceActivations(nn.Module):
    """The conv-net pattern: in-place activations straight after convolutions
    (a torch call whose result is new: Note [Fresh results]) and after
    elementwise work, and mobilenet's hardswish/hardsigmoid."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)
        self.drop = nn.Dropout(0.0, inplace=True)

    def forward(self, x):
        x = F.relu(self.conv1(x), inplace=True)
        x = F.silu(self.conv2(x), inplace=True)
        x = x * F.hardsigmoid(x.mean((2, 3), keepdim=True), inplace=True)
        x = F.hardswish(x.mean((2, 3)), inplace=True)
        return self.head(self.drop(x))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_in_place_activations_train_through_kiln(backend):
    torch.manual_seed(0)
    model = InPlaceActivations()
    twin = copy.deepcopy(model)
    x = torch.randn(2, 3, 8, 8) * 3
    model(x).sum().backward()
    kiln.reset()
    kiln.compile(twin, backend=backend)(x).sum().backward()
    assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
    assert kiln.stats()["autograd_graphs"] == 1, kiln.stats()
    for (label, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{label}: {m}")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_hard_activations_match_torch_at_their_corners(backend):
    x = torch.tensor([-4., -3., -2.5, -1.5, -1., 0., 1., 1.5, 2.9, 3., 3.5, 7.])

    def f(x):
        return F.hardswish(x) + F.hardsigmoid(x * 2) * 3

    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = f(a)
    want.sum().backward()
    got = kiln.compile(f, backend=backend)(b)
    got.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(b.grad, a.grad)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_norm_over_a_size_one_dim_drops_it(backend):
    # torch 2.11's meta kernel keeps the reduced size-1 dim of norm
    # ([6, 1] -> [6, 1]; eagerly [6]); kiln's own rule has torch's eager
    # shape (fuzz seed 40054).
    def fn(y):
        return y.norm(dim=-1).pow(3), torch.norm(y, 2, (0, 1), True), y.norm(p=1, dim=0)

    y = torch.randn(6, 1, dtype=torch.float64, requires_grad=True)
    want = fn(y)
    got = kiln.compile(fn, backend=backend)(y)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b)
    (ga,) = torch.autograd.grad(sum(t.sum() for t in got), y)
    (gb,) = torch.autograd.grad(sum(t.sum() for t in want), y)
    torch.testing.assert_close(ga, gb)


class AttentionBlock(nn.Module):
    """A ViT encoder block's attention (torchvision's EncoderBlock)."""

    def __init__(self, masked=False):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.attention = nn.MultiheadAttention(16, 4, batch_first=True)
        self.masked = masked

    def forward(self, x):
        y = self.norm(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1) if self.masked else None
        y, _ = self.attention(y, y, y, need_weights=False, attn_mask=mask)
        return x + y


def test_multihead_attention_under_a_default_device_traces_through_its_parts():
    # Note [Torch function queries]: a default device (torch.device as a
    # context, torch.set_default_device) is a torch-function mode, under
    # which has_torch_function is true for everything and
    # F.multi_head_attention_forward would hand itself to
    # handle_torch_function: six graph breaks before kiln answered the query.
    torch.manual_seed(0)
    model = AttentionBlock(masked=True)
    x = torch.randn(2, 6, 16, requires_grad=True)
    with torch.device(x.device):  # the suite's device (KILN_TEST_DEVICE)
        kiln.reset()
        explained = kiln.explain(model)(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        kiln.reset()
        got = kiln.compile(model)(x)
    want = model(x)
    torch.testing.assert_close(got, want)
    (gx,) = torch.autograd.grad(got.square().sum(), x)
    (wx,) = torch.autograd.grad(want.square().sum(), x)
    torch.testing.assert_close(gx, wx)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_multihead_attention_trains_through_its_parts(backend, masked):
    # Note [Composites kiln traces through]: no extern call of
    # F.multi_head_attention_forward whose gradient would rerun it.
    torch.manual_seed(0)
    model = AttentionBlock(masked)
    twin = copy.deepcopy(model)
    x = torch.randn(2, 6, 16)
    model(x).square().sum().backward()
    kiln.reset()
    explained = kiln.explain(twin)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert "multi_head_attention_forward" not in "".join(explained.graphs)
    kiln.reset()
    kiln.compile(twin, backend=backend)(x).square().sum().backward()
    assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
    for (label, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{label}: {m}")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_result_with_size_one_dims_can_be_written_in_place(backend):
    # Note [Strides of size-1 dims]: the executor gives such a result the
    # traced strides; a fresh result must not become a view, which autograd
    # forbids writing in place when a Function returns it (fuzz seed 48613).
    def f(x):
        return x.split(1, dim=1)[1].clone()

    compiled = kiln.compile(f, backend=backend)
    for rows in (3, 3, 1):  # the third call traces the rows as a size-1 dim
        x = torch.randn(rows, 2, dtype=torch.float64, requires_grad=True)
        got, want = compiled(x), f(x)
        got[got < 0] *= 2
        want[want < 0] *= 2
        torch.testing.assert_close(got, want)
        (gx,) = torch.autograd.grad(got.sum(), x)
        (wx,) = torch.autograd.grad(want.sum(), x)
        torch.testing.assert_close(gx, wx)


class ShiftedWindowBlock(nn.Module):
    """The parts of a Swin block kiln once left to torch: F.pad, torch.roll
    and a relative-position table read through an index tensor."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(9, 4))
        self.register_buffer("index", torch.tensor([[0, 4, -1], [8, 2, 2]]).view(-1))
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        x = F.pad(x, (0, 0, 1, 2, 0, 0))
        x = torch.roll(x, shifts=(-1, 2), dims=(1, 2))
        bias = self.table[self.index].view(2, 3, 4)
        x = self.proj(x)[:, :2, :3] + bias
        return torch.roll(F.pad(x, (0, 0, 0, 0, 0, 0)), 1, 2).relu()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_pad_roll_and_tensor_indexing_train_without_externs(backend):
    # Their gradients come from kiln's own rules (slices, cat, index_select),
    # not from an extern rerun in Python (Note [Extern gradients]).
    torch.manual_seed(0)
    model = ShiftedWindowBlock()
    twin = copy.deepcopy(model)
    x = torch.randn(2, 4, 5, 4)
    model(x).square().sum().backward()
    kiln.reset()
    kiln.compile(twin, backend=backend)(x).square().sum().backward()
    assert kiln.stats()["prim_fallbacks"] == 0, kiln.stats()
    for (label, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{label}: {m}")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_values_read_before_and_after_a_later_write(backend):
    # Note [Writes in the joint graph]: `early` read the mask before its
    # second write and must not be recomputed from the mask the forward
    # left; `late` read it after the last write and may be.
    def fn(x):
        mask = x.new_zeros(4, 4)
        mask[0] = 1.0
        early = (x + mask).sin()
        mask[1] = 2.0
        late = (x + mask).cos()
        return early * late

    eager, compiled = _grads(fn, backend, lambda: torch.randn(4, 4))
    torch.testing.assert_close(compiled[0], eager[0])


def test_a_window_mask_filled_by_setitem_keeps_the_block_recomputable():
    # Swin's shifted blocks fill their mask by setitem: the activations
    # computed after the last write are recomputed (or saved once), not all
    # pinned to the forward; kiln saves no more than eager does.
    from torchvision.models.swin_transformer import SwinTransformerBlock
    torch.manual_seed(0)
    block = SwinTransformerBlock(dim=32, num_heads=2, window_size=[7, 7], shift_size=[3, 3],
                                 stochastic_depth_prob=0.0)
    x = torch.randn(2, 14, 14, 32, requires_grad=True)

    def saved_bytes(fn):
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(x)
        return sum(seen.values()), out

    kiln.reset()
    compiled = kiln.compile(block)
    compiled(x)
    eager_bytes, want = saved_bytes(block)
    kiln_bytes, got = saved_bytes(compiled)
    assert kiln_bytes <= eager_bytes, (kiln_bytes, eager_bytes)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    grad = torch.autograd.grad(got.square().sum(), x)[0]
    torch.testing.assert_close(grad, torch.autograd.grad(want.square().sum(), x)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_saved_tensor_hooks_active_while_tracing_see_only_real_tensors(backend):
    # A model first called under torch.autograd.graph.saved_tensors_hooks
    # (activation offloading, a byte count): the trace's meta fakes never
    # reach the user's pack hook (one that read the storage raised there,
    # and the trace broke at every op); the compiled graph's own saves do,
    # as eager's do, and the gradients equal eager's.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 5)).train()
    x = torch.randn(2, 3, 8, 8)

    def step(fn):
        devices, unpacked = [], []

        def pack(t):
            devices.append(t.device.type)
            return (t.untyped_storage().data_ptr(), t)

        def unpack(packed):
            unpacked.append(packed[0])
            return packed[1]
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = fn(x)
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
        return out, grads, devices, unpacked

    kiln.reset()
    compiled = kiln.compile(model, backend=backend)
    want, want_grads, _, _ = step(model)
    got, got_grads, devices, unpacked = step(compiled)
    assert kiln.stats()["graph_breaks"] == 0 and kiln.stats()["eager_runs"] == 0, kiln.stats()
    assert devices and set(devices) == {x.device.type}, devices  # never "meta"
    assert len(unpacked) == len(devices)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_checkpointed_blocks_recompute_through_their_compiled_graphs(backend):
    # torch.utils.checkpoint without reentrancy run by torch inside a
    # compiled call (context_fn is not traced, Note [Traced checkpoints]):
    # the blocks' frames are compiled, so the backward's recomputation must
    # run the same graphs and save the same tensors (Note [Recomputed
    # forwards]); it raised CheckpointError when it ran eagerly. Two steps,
    # the second on cached graphs; gradients equal eager's.
    from torch.utils.checkpoint import checkpoint, noop_context_fn
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.up, self.down = nn.LayerNorm(16), nn.Linear(16, 32), nn.Linear(32, 16)

        def forward(self, x):
            return x + self.down(F.gelu(self.up(self.norm(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(2)])

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False, context_fn=noop_context_fn)
            return x.square().sum()

    model = Net()
    x = torch.randn(4, 16, requires_grad=True)

    def gradients(fn):
        model.zero_grad(set_to_none=True)
        x.grad = None
        fn(x).backward()
        return [p.grad for p in model.parameters()] + [x.grad]

    want = gradients(model)
    kiln.reset()
    compiled = kiln.compile(model, backend=backend)
    traces = []
    for _ in range(2):
        got = gradients(compiled)
        traces.append(kiln.stats()["traces"])
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert kiln.stats()["autograd_graphs"] > 0, kiln.stats()
    assert traces[1] == traces[0], traces  # the second step, recomputation included, ran cached graphs


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_grad_turned_on_inside_a_no_grad_call(backend):
    # A block under torch.enable_grad() in a call made under no_grad makes
    # results that require grad, with their history, as in eager (fuzz
    # seed 65699); what the call makes outside the block does not.
    def fn(x, y):
        outside = x * 2
        with torch.enable_grad():
            inside = x.mm(y.float()).tanh()
        return inside, outside

    x = torch.randn(4, 4)
    y = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    kiln.reset()
    compiled = kiln.compile(fn, backend=backend)
    with torch.no_grad():
        got, got_outside = compiled(x, y)
        want, want_outside = fn(x, y)
    assert got.requires_grad and not got_outside.requires_grad
    torch.testing.assert_close(got, want)
    (grad,) = torch.autograd.grad(got.sum(), y)
    (expected,) = torch.autograd.grad(want.sum(), y)
    torch.testing.assert_close(grad, expected)


def test_appending_to_an_empty_cache_trains_like_eager(capfd):
    # Note [Cat of one non-empty tensor] (prims/prim_builder.cpp): the cat is
    # a copy, taken by kiln's kernels; values and gradients as eager's.
    def f(x, past):
        k = x * 2
        kv = torch.cat([past, k], dim=-2)
        return kv.sum(-1), kv

    x = torch.randn(2, 3, 5, 4, requires_grad=True)
    past = torch.zeros(2, 3, 0, 4)
    kiln.reset()
    with kiln_logs("prims"):
        got = kiln.compile(f, fullgraph=True)(x, past)
    assert " cat(" not in capfd.readouterr().err
    want = f(x, past)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    (g,) = torch.autograd.grad(got[0].sum() + got[1].square().sum(), x)
    (w,) = torch.autograd.grad(want[0].sum() + want[1].square().sum(), x)
    torch.testing.assert_close(g, w)


def test_appending_to_an_empty_past_of_a_wider_dtype_converts(capfd):
    # Note [Cat of one non-empty tensor]: transformers' DynamicLayer makes
    # its empty past in the keys' dtype (float32 under autocast, after a
    # float32 rotary embedding), and appends bfloat16 values to it: torch's
    # cat promotes through the empty tensor. The copy converts; no extern.
    def f(x):
        v = (x * 2).to(torch.bfloat16)
        past = torch.tensor([], dtype=torch.float32)
        kv = torch.cat([past, v], dim=-2)
        return kv * 3

    x = torch.randn(2, 3, 5, 4, requires_grad=True)
    kiln.reset()
    with kiln_logs("prims"):
        got = kiln.compile(f, fullgraph=True)(x)
    err = capfd.readouterr().err
    assert "extern torch.cat" not in err and " cat(" not in err
    want = f(x)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want)
    (g,) = torch.autograd.grad(got.square().sum(), x)
    (w,) = torch.autograd.grad(want.square().sum(), x)
    torch.testing.assert_close(g, w)


def layers_sharing_a_mask(x, mask):
    for _ in range(3):  # each layer converts the same mask, as transformers' layers do
        x = torch.softmax(x + torch.where(mask, 0.0, -1e4), -1) @ x
    return x


@pytest.mark.parametrize("grad", [False, True])
def test_repeated_work_is_merged_into_one_node(grad, capfd):
    # Note [Common nodes] in prims/common_nodes.cpp.
    x = torch.randn(6, 6, requires_grad=grad)
    mask = torch.rand(6, 6) > 0.5
    compiled = kiln.compile(layers_sharing_a_mask, backend="aot_eager")
    with kiln_logs("prims"):
        got = compiled(x, mask)
    log = capfd.readouterr().err
    torch.testing.assert_close(got, layers_sharing_a_mask(x, mask))
    assert "common nodes merged" in log, log
    prim_graph = log[log.index("prim graph for"):]
    prim_graph = prim_graph[:prim_graph.index("\nreturn")]
    assert prim_graph.count("where(") == 1, prim_graph
    if grad:
        xe = x.detach().clone().requires_grad_()
        got.sum().backward()
        layers_sharing_a_mask(xe, mask).sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)


@pytest.mark.skipif(not kiln._C.cpu_kernels_available(), reason="kiln built without LLVM: no CPU kernels")
def test_the_backward_compiles_at_its_first_call_for_the_gradients_that_arrive(capfd):
    # Note [The backward compiles at its first call]: a forward-only call
    # plans no backward; a loss reading one of two outputs builds only the
    # backward without the other's gradient, and gradients match eager.
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)

    def f(x):
        h = (x @ w).tanh()
        return h * 2, h.exp().sum(1)

    x = torch.randn(4, 8)
    compiled = kiln.compile(f, backend="inductor")
    with kiln_logs("perf"):
        out, cache = compiled(x)
        forward_log = capfd.readouterr().err
        out.square().sum().backward()
        backward_log = capfd.readouterr().err
    assert "(forward)" in forward_log and "(backward" not in forward_log, forward_log
    assert "(backward, some gradients absent)" in backward_log, backward_log
    assert "(backward)" not in backward_log, backward_log
    got = w.grad.clone()
    w.grad = None
    f(x)[0].square().sum().backward()
    torch.testing.assert_close(got, w.grad)
    # Both gradients: the full backward, compiled at this first use of it.
    w.grad = None
    with kiln_logs("perf"):
        out, cache = compiled(x)
        (out.sum() + cache.sum()).backward()
        log = capfd.readouterr().err
    assert "(backward)" in log, log
    got = w.grad.clone()
    w.grad = None
    out, cache = f(x)
    (out.sum() + cache.sum()).backward()
    torch.testing.assert_close(got, w.grad)


def test_double_backward_through_a_compiled_graph_is_refused_clearly():
    # create_graph=True: first-order gradients as eager's; differentiating
    # them again raises kiln's error naming the cause, not torch's "does not
    # require grad" about a gradient silently without history.
    x = torch.randn(5, requires_grad=True)

    def f(x):
        return (x.sin() * x).sum()

    grad, = torch.autograd.grad(kiln.compile(f, backend="aot_eager")(x), x, create_graph=True)
    want, = torch.autograd.grad(f(x), x, create_graph=True)
    torch.testing.assert_close(grad, want.detach())
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(grad.sum(), x)
