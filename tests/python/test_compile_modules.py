"""Compiled nn.Modules: same outputs as eager, and the compiled module is a
transparent view of the original (parameters, buffers, state_dict, mode,
attributes), with in-place parameter updates seen by later compiled calls."""
import pytest
import torch
import torch.nn as nn

import kiln
from conftest import assert_same, check_compiled, delta, stats


class MLP(nn.Module):
    def __init__(self, d_in=8, d_hidden=16, d_out=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(self.norm(self.act(self.fc1(x))))


class Residual(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.lin(torch.relu(self.norm(x)))


class Stack(nn.Module):
    """Submodules in an nn.ModuleList, reached by index and by iteration."""

    def __init__(self, d=8, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        x = self.layers[0](x).tanh()
        for layer in self.layers[1:]:
            x = x + layer(x)
        return self.head(x), len(self.layers)


class WithBuffer(nn.Module):
    def __init__(self, d=6):
        super().__init__()
        self.register_buffer("mean", torch.randn(d))
        self.register_buffer("inv_std", torch.rand(d) + 0.5)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        return self.proj((x - self.mean) * self.inv_std)


class Scaled(nn.Module):
    """A Python-number attribute used in forward."""

    def __init__(self, d=5):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.scale = 2.0
        self.shift = 1

    def forward(self, x):
        return self.lin(x) * self.scale + self.shift


class WithDropout(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, d), nn.Dropout(p=0.0), nn.SiLU(), nn.Linear(d, d))
        self.drop = nn.Dropout(p=0.0)

    def forward(self, x):
        return self.drop(self.net(x))


class ModeDependent(nn.Module):
    """forward reads self.training directly."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            return y * 2
        return y - 1


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(6, 6)
        self.k = nn.Linear(6, 6)

    def forward(self, x, y, temperature=1.0):
        scores = self.q(x) @ self.k(y).transpose(-2, -1) / temperature
        return {"attn": scores.softmax(dim=-1), "scores": scores}


def sequential():
    return nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 8), nn.Tanh())


MODULE_CASES = [
    ("mlp", MLP, (4, 8)),
    ("residual", Residual, (3, 8)),
    ("sequential", sequential, (5, 8)),
    ("module_list", Stack, (2, 8)),
    ("buffer", WithBuffer, (4, 6)),
    ("python_attr", Scaled, (3, 5)),
    ("dropout_p0", WithDropout, (4, 8)),
]


@pytest.mark.parametrize("name,factory,shape", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_module_matches_eager(name, factory, shape):
    model = factory()
    compiled = kiln.compile(model)
    assert isinstance(compiled, nn.Module)
    before = stats()
    for _ in range(3):
        x = torch.randn(*shape)
        assert_same(compiled(x), model(x))
    d = delta(before, stats())
    assert d["traces"] == 1, d
    assert d["cache_hits"] == 2, d
    assert d["unsupported"] == 0 and d["eager_runs"] == 0, d


@pytest.mark.parametrize("name,factory,shape", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_module_fullgraph(name, factory, shape):
    model = factory()
    compiled = kiln.compile(model, fullgraph=True)
    for _ in range(3):
        x = torch.randn(*shape)
        assert_same(compiled(x), model(x))


@pytest.mark.parametrize("name,factory,shape", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_module_state_passes_through(name, factory, shape):
    model = factory()
    compiled = kiln.compile(model)
    compiled(torch.randn(*shape))  # state must look the same after a compiled call too

    assert list(compiled.state_dict().keys()) == list(model.state_dict().keys())
    for (k_c, v_c), (k_m, v_m) in zip(compiled.state_dict().items(), model.state_dict().items()):
        assert k_c == k_m
        assert v_c.data_ptr() == v_m.data_ptr(), k_c
    params_c, params_m = list(compiled.parameters()), list(model.parameters())
    assert len(params_c) == len(params_m) > 0
    assert all(a is b for a, b in zip(params_c, params_m))
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(a is b for (_, a), (_, b) in zip(compiled.named_parameters(), model.named_parameters()))
    buffers_c, buffers_m = list(compiled.buffers()), list(model.buffers())
    assert len(buffers_c) == len(buffers_m)
    assert all(a is b for a, b in zip(buffers_c, buffers_m))


@pytest.mark.parametrize("name,factory,shape", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_inplace_parameter_update_seen(name, factory, shape):
    model = factory()
    compiled = kiln.compile(model)
    x = torch.randn(*shape)
    first = compiled(x)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1)
    second_c = compiled(x)
    assert_same(second_c, model(x))
    flat_first = first[0] if isinstance(first, tuple) else first
    flat_second = second_c[0] if isinstance(second_c, tuple) else second_c
    assert not torch.allclose(flat_first, flat_second), "compiled module ignored a parameter update"
    # updating through the compiled module's parameters() is the same thing
    with torch.no_grad():
        for p in compiled.parameters():
            p.mul_(0.5)
    assert_same(compiled(x), model(x))


def test_buffer_update_seen():
    model = WithBuffer()
    compiled = kiln.compile(model)
    x = torch.randn(4, 6)
    assert_same(compiled(x), model(x))
    model.mean.fill_(3.0)
    assert_same(compiled(x), model(x))
    # replacing the buffer object entirely
    model.inv_std = torch.full((6,), 0.25)
    assert_same(compiled(x), model(x))


def test_load_state_dict_through_compiled():
    model = MLP()
    compiled = kiln.compile(model)
    x = torch.randn(2, 8)
    compiled(x)
    other = MLP()
    result = compiled.load_state_dict(other.state_dict())
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    for k, v in other.state_dict().items():
        assert torch.equal(model.state_dict()[k], v)
    assert_same(compiled(x), other(x))
    # and a compiled module's state_dict loads into a fresh eager module
    fresh = MLP()
    fresh.load_state_dict(compiled.state_dict())
    assert_same(fresh(x), compiled(x))


def test_python_attribute_change_seen():
    model = Scaled()
    compiled = kiln.compile(model)
    x = torch.randn(3, 5)
    assert_same(compiled(x), model(x))
    assert compiled.scale == 2.0 and compiled.shift == 1
    model.scale = 3.5
    model.shift = -4
    assert compiled.scale == 3.5
    assert_same(compiled(x), model(x))
    assert stats()["recompiles"] >= 1


def test_attribute_access_passes_through():
    model = MLP()
    compiled = kiln.compile(model)
    assert compiled.fc1 is model.fc1
    assert compiled.norm is model.norm
    assert compiled.fc2.weight is model.fc2.weight
    assert compiled.training is model.training
    assert dict(compiled.named_modules()).keys() == dict(model.named_modules()).keys()


@pytest.mark.parametrize("factory", [WithDropout, ModeDependent], ids=["dropout_p0", "reads_training"])
def test_train_eval_modes(factory):
    model = factory()
    compiled = kiln.compile(model)
    in_dim = 8 if factory is WithDropout else 4
    for mode in ("train", "eval", "train", "eval"):
        getattr(compiled, mode)()
        assert model.training is (mode == "train")
        assert compiled.training is (mode == "train")
        for _ in range(3):
            x = torch.randn(3, in_dim)
            assert_same(compiled(x), model(x))
    assert stats()["unsupported"] == 0


def test_module_mode_change_on_original_seen():
    model = ModeDependent()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    model.eval()  # on the original, not the wrapper
    assert_same(compiled(x), model(x))
    assert_same(compiled(x), model.lin(x) - 1)


def test_module_with_multiple_inputs_and_kwargs():
    model = TwoInputs()
    compiled = kiln.compile(model)
    for _ in range(3):
        x, y = torch.randn(2, 3, 6), torch.randn(2, 5, 6)
        assert_same(compiled(x, y), model(x, y))
        assert_same(compiled(x, y, temperature=0.5), model(x, y, temperature=0.5))


def test_two_instances_same_class_are_distinguished():
    a, b = MLP(), MLP()
    ca, cb = kiln.compile(a), kiln.compile(b)
    x = torch.randn(3, 8)
    for _ in range(3):
        assert_same(ca(x), a(x))
        assert_same(cb(x), b(x))
    assert not torch.allclose(ca(x), cb(x))


def test_module_training_step_matches_eager():
    torch.manual_seed(1)
    model = MLP()
    ref = MLP()
    ref.load_state_dict(model.state_dict())
    compiled = kiln.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        x, target = torch.randn(4, 8), torch.randn(4, 4)
        loss = torch.nn.functional.mse_loss(compiled(x), target)
        loss_ref = torch.nn.functional.mse_loss(ref(x), target)
        assert_same(loss, loss_ref)
        opt.zero_grad()
        opt_ref.zero_grad()
        loss.backward()
        loss_ref.backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert_same(p.grad, q.grad)
        opt.step()
        opt_ref.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_same(p, q)


def test_decorated_module_class_forward():
    class Doubler(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        @kiln.compile
        def forward(self, x):
            return x * self.w * 2

    m = Doubler()
    for _ in range(3):
        x = torch.randn(3)
        assert_same(m(x), x * m.w * 2)


def test_batchnorm_running_stats_updated_like_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU())
    ref = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU())
    ref.load_state_dict(model.state_dict())
    compiled = kiln.compile(model)
    for _ in range(3):
        x = torch.randn(8, 4)
        assert_same(compiled(x), ref(x))
    for name, buf in model.state_dict().items():
        assert_same(buf, ref.state_dict()[name], name)
    model.eval()
    ref.eval()
    for _ in range(3):
        x = torch.randn(8, 4)
        assert_same(compiled(x), ref(x))


def conv_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def embedding_bag():
    return nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 3))


def encoder_layer():
    m = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    return m.eval()


@pytest.mark.parametrize("factory,make_input", [
    (conv_net, lambda: torch.randn(2, 3, 8, 8)),
    (embedding_bag, lambda: torch.randint(0, 10, (2, 3))),
    (encoder_layer, lambda: torch.randn(2, 5, 8)),
], ids=["conv_net", "embedding", "transformer_encoder_layer"])
def test_library_modules(factory, make_input):
    model = factory()
    compiled = kiln.compile(model)
    for _ in range(3):
        x = make_input()
        assert_same(compiled(x), model(x))
    assert stats()["traces"] >= 1


def test_replaced_submodule_and_parameter_seen():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    compiled = kiln.compile(model)
    x = torch.randn(2, 3)
    assert_same(compiled(x), model(x))
    model[0] = nn.Linear(3, 3)
    assert_same(compiled(x), model(x))
    model[1] = nn.Tanh()
    assert_same(compiled(x), model(x))
    model[0].weight = nn.Parameter(torch.full((3, 3), 0.5))
    assert_same(compiled(x), model(x))


class Gain(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return x * self.w


def test_parameter_dtype_and_requires_grad_changes_seen():
    model = Gain()
    compiled = kiln.compile(model)
    x = torch.randn(3)
    out = compiled(x)
    assert out.requires_grad and out.dtype == torch.float32
    model.double()  # same Parameter object, new float64 data
    out_c, out_e = compiled(x), model(x)
    assert_same(out_c, out_e)
    assert out_c.dtype == torch.float64
    model.w.requires_grad_(False)
    out_c, out_e = compiled(x), model(x)
    assert_same(out_c, out_e)
    assert out_c.requires_grad is out_e.requires_grad is False


def test_forward_mutating_module_state():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x * self.calls

    model, ref = Counter(), Counter()
    compiled = kiln.compile(model)
    for _ in range(3):
        x = torch.randn(2)
        assert_same(compiled(x), ref(x))
    assert model.calls == ref.calls == 3


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_returning_none_weights(need_weights):
    # F.multi_head_attention_forward returns (output, None) without weights:
    # the node returns the tensors, the None is a constant of the trace.
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()

    def fn(x):
        out, weights = mha(x, x, x, need_weights=need_weights)
        return out * 2, weights

    check_compiled(fn, lambda: (torch.randn(2, 5, 16),))


def test_module_class_overriding_call_is_inlined():
    # A layer class's own __call__ that defers to nn.Module's through
    # super() (transformers' gradient-checkpointing layers in some versions).
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs) * 2

        def forward(self, x):
            return self.lin(x).relu()

    layers = torch.nn.ModuleList([Layer(), Layer()])

    def fn(x):
        for layer in layers:
            x = layer(x)
        return x

    check_compiled(fn, lambda: (torch.randn(2, 4),))


class OwnParameter(nn.Module):
    """A parameter of its own beside its submodule's."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gain = nn.Parameter(torch.full((4,), 2.0))

    def forward(self, x):
        return self.lin(x) * self.gain


def test_compiled_child_walks_meet_original_names_leave_wrapper_out():
    # The original is the wrapper's child: walks of the parent meet it (with
    # whatever is keyed on it, as FSDP's state) and each parameter once;
    # names, state_dict keys and a parent's load_state_dict are as eager's.
    torch.manual_seed(0)
    model = nn.Sequential(OwnParameter(), nn.Linear(4, 2))
    reference = nn.Sequential(OwnParameter(), nn.Linear(4, 2))
    reference.load_state_dict(model.state_dict())
    original = model[0]
    model[0] = kiln.compile(original)
    assert any(m is original for m in model.modules())
    assert list(model[0].parameters(recurse=False)) == []
    owned = [p for m in model.modules() for p in m.parameters(recurse=False)]
    assert len(owned) == len(list(reference.parameters()))
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in reference.named_parameters()]
    assert list(model.state_dict()) == list(reference.state_dict())
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(1)
    result = model.load_state_dict(reference.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(original.gain, reference[0].gain)
    x = torch.randn(3, 4)
    assert_same(model(x), reference(x))
    partial = reference.state_dict()
    del partial["0.gain"]
    partial["0.extra"] = torch.zeros(1)
    result = model.load_state_dict(partial, strict=False)
    assert result.missing_keys == ["0.gain"] and result.unexpected_keys == ["0.extra"]
    wrong = reference.state_dict()
    wrong["0.lin.weight"] = torch.zeros(3, 3)
    with pytest.raises(RuntimeError, match=r"size mismatch for 0\.lin\.weight:"):
        model.load_state_dict(wrong)


def test_hooks_run_once_around_compiled_forward():
    torch.manual_seed(0)
    model = OwnParameter()
    reference = OwnParameter()
    reference.load_state_dict(model.state_dict())
    compiled = kiln.compile(model)
    calls = []
    # One on the wrapper (the original's table), one on the original.
    compiled.register_forward_pre_hook(lambda mod, args: calls.append("pre") or (args[0] * 2,))
    model.register_forward_hook(lambda mod, args, out: calls.append("post") or out + 1)
    reference.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    reference.register_forward_hook(lambda mod, args, out: out + 1)
    for _ in range(3):
        x = torch.randn(3, 4)
        assert_same(compiled(x), reference(x))
    assert calls == ["pre", "post"] * 3
    # The hooks run eagerly around the compiled forward, untraced.
    s = stats()
    assert s["traces"] == 1 and s["graph_breaks"] == 0 and s["cache_hits"] == 2, s


def test_functional_call_through_compiled_module():
    model = OwnParameter()
    compiled = kiln.compile(model)
    params = {name: torch.randn_like(p) for name, p in compiled.named_parameters()}
    x = torch.randn(3, 4)
    expected = torch.func.functional_call(model, params, (x,))
    assert_same(torch.func.functional_call(compiled, params, (x,)), expected)
    assert isinstance(model.gain, nn.Parameter)  # put back


def test_compiled_module_whose_class_overrides_call():
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs) * 2

        def forward(self, x):
            return self.lin(x).relu()

    layer = Layer()
    compiled = kiln.compile(layer)
    for _ in range(3):
        x = torch.randn(2, 4)
        assert_same(compiled(x), layer(x))
    s = stats()
    assert s["traces"] == 1 and s["unsupported"] == 0, s


def test_children_walk_through_a_set_of_modules():
    # nn.Module.named_children deduplicates through a set of modules (timm's
    # RegNet stages run `for block in self.children()`): modules are set
    # members by identity, and a child registered twice runs once.
    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            shared = nn.Linear(4, 4)
            self.a, self.b, self.again = shared, nn.Linear(4, 4), shared

        def forward(self, x):
            for block in self.children():
                x = block(x).tanh()
            seen = {self.a}
            return x * 2 if self.b in seen else x + (self.a in seen)

    stage = Stage()
    assert len(list(stage.children())) == 2
    net = nn.Sequential(nn.Linear(4, 4), stage)  # the stage's frame inlined, as in a model
    compiled = kiln.compile(net)
    x = torch.randn(3, 4)
    assert_same(compiled(x), net(x))
    s = stats()
    assert (s["traces"], s["graph_breaks"], s["unsupported"]) == (1, 0, 0), s


def test_iterating_a_set_of_modules_breaks_the_graph():
    # Iteration order of a set of modules follows their ids: not traced.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            for m in {self.lin}:
                x = m(x)
            return x.relu()

    net = Net()
    x = torch.randn(2, 4)
    assert_same(kiln.compile(net)(x), net(x))
    assert stats()["graph_breaks"] + stats()["unsupported"] >= 1


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        # diffusers' `self.dtype`, then every parameter once (parameters()
        # deduplicates through a set of tensors: Note [Tensors in sets]).
        dtype = next(iter(self.parameters())).dtype
        total = sum(p.sum() for p in self.parameters())
        return self.b(self.a(x.to(dtype))) + total


def test_parameter_walks_through_a_set_of_tensors():
    model = _Tied()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    assert_same(compiled(x), model(x))
    s = stats()
    assert (s["traces"], s["graph_breaks"], s["unsupported"]) == (1, 0, 0), s
    # Tying a weight makes two sources one tensor: the Distinct guard fails,
    # and parameters() yields it once, as eagerly.
    model.b.weight = model.a.weight
    assert_same(compiled(x), model(x))
    assert stats()["recompiles"] >= 1


# Note [Torch modules made in forward]: modules whose construction runs
# only torch.nn's code, made per call with constant arguments (T5 and BART
# build their loss so, transformers' Mamba its SiLUActivation through
# ACT2FN), are made while tracing; one holding a tensor, or of a class with
# its own constructor outside torch.nn, breaks the graph at the call.
class SiLUActivation(nn.Module):
    def forward(self, x):
        return nn.functional.silu(x)


def test_torch_modules_made_in_forward():
    def fn(logits, target):
        loss = nn.CrossEntropyLoss(ignore_index=-100)(logits, target)
        return nn.GELU(approximate="tanh")(logits).sum() + SiLUActivation()(logits).sum() + loss

    compiled = check_compiled(fn, lambda: (torch.randn(4, 5, requires_grad=True), torch.tensor([0, 2, -100, 4])))
    before = stats()
    for _ in range(2):
        compiled(torch.randn(4, 5, requires_grad=True), torch.tensor([1, 2, 3, -100]))
    assert delta(before, stats())["traces"] == 0


class OwnLoss(nn.CrossEntropyLoss):
    def __init__(self):
        super().__init__(ignore_index=0)


@pytest.mark.parametrize("fn, message", [
    (lambda logits, target: nn.BatchNorm1d(5)(logits), "holds _parameters entry 'weight'"),
    (lambda logits, target: nn.CrossEntropyLoss(weight=torch.ones(5))(logits, target),
     r"CrossEntropyLoss\(\) made in the trace with Tensor"),
    (lambda logits, target: OwnLoss()(logits, target), "call of Object"),
], ids=["holding-a-parameter", "given-a-tensor", "own-constructor"])
def test_modules_made_in_forward_that_break(fn, message):
    logits, target = torch.randn(4, 5), torch.tensor([0, 2, 1, 4])
    assert_same(kiln.compile(fn)(logits, target), fn(logits, target))
    with pytest.raises(kiln.Unsupported, match=message):
        kiln.compile(fn, fullgraph=True)(logits, target)


def test_weight_norm_parametrization_reads_its_module_dict():
    # torch's parametrizations (wav2vec2's positional conv): a property
    # getter that is a closure, reading self.parametrizations[name].
    from torch.nn.utils.parametrizations import weight_norm
    conv = weight_norm(nn.Conv1d(4, 4, 3, padding=1), name="weight", dim=2)

    def fn(x):
        return conv(x) * 2

    with torch.no_grad():
        check_compiled(fn, lambda: (torch.randn(1, 4, 8),))
