"""Convolutions channels-last, the kernels between them following (Note
[Channels-last convolutions] in prims/channels_last.cpp): on by default for
CUDA graphs; here forced on CPU graphs with options={"conv_layout":
"channels_last"}. Results, gradients and output strides against eager; the
layouts torch's convolutions really receive (a dispatch mode sees the calls
kiln makes from C++); and the graphs the plan must leave alone."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import kiln
from conftest import TEST_DEVICE, assert_same

# The plan runs under backend='inductor' with kernels for the graph's device:
# LLVM's for CPU tensors, NVRTC's under KILN_TEST_DEVICE=cuda.
pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no plan on CPU graphs")


@pytest.fixture(autouse=True)
def exact_cudnn_convolutions():
    """cuDNN's TF32 convolutions differ between NCHW and NHWC algorithms by
    more than the comparisons allow; eager and kiln both run fp32 here."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved

CHANNELS_LAST = {"conv_layout": "channels_last"}


def channels_last(*tensors):
    return all(t.is_contiguous(memory_format=torch.channels_last) for t in tensors)


class ConvInputs(TorchDispatchMode):
    """Whether each convolution torch runs gets channels-last tensors (input
    and weight; a backward also its output's gradient)."""

    def __init__(self):
        super().__init__()
        self.layouts = []
        self.pools = []  # whether each max pool's input is channels-last

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name == "convolution":
            self.layouts.append(channels_last(args[0], args[1]))
        elif name.startswith("max_pool2d") and "backward" not in name:
            self.pools.append(channels_last(args[0]))
        elif name == "convolution_backward":
            self.layouts.append(channels_last(args[0], args[1], args[2]))
        return func(*args, **(kwargs or {}))


class Block(nn.Module):
    """What conv nets are made of: conv-BN-ReLU, pooling (a torch call the plan
    hands its traced layout), a residual, a depthwise conv and a
    squeeze-excitation gate over [N, C, 1, 1] maps."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.se_down = nn.Conv2d(8, 4, 1)
        self.se_up = nn.Conv2d(4, 8, 1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.stem(x)))
        y = F.max_pool2d(y, 2)
        y = y + F.relu(self.conv(y))
        y = self.dw(y)
        gate = torch.sigmoid(self.se_up(F.relu(self.se_down(y.mean((2, 3), keepdim=True)))))
        y = y * gate
        return self.fc(y.mean((2, 3))), y


def test_inference_runs_every_convolution_channels_last_and_equals_eager():
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 3, 12, 12)
    compiled = kiln.compile(model, options=CHANNELS_LAST)
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
        assert_same(got, want)
        # The returned feature map keeps eager's (contiguous) strides.
        assert got[1].stride() == want[1].stride()
        with ConvInputs() as seen:
            assert_same(compiled(x), want)
    assert kiln.stats()["channels_last_convolutions"] == 5, kiln.stats()
    assert seen.layouts == [True] * 5, seen.layouts
    # The max pool between convolutions takes the channels-last map as it is.
    assert seen.pools == [True], seen.pools


def test_training_gradients_equal_eager():
    torch.manual_seed(0)
    model = Block().train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    compiled = kiln.compile(model, options=CHANNELS_LAST)
    for _ in range(2):
        logits, fmap = compiled(x)
        (logits.square().sum() + fmap.sum()).backward()
        logits, fmap = reference(x_ref)
        (logits.square().sum() + fmap.sum()).backward()
    assert kiln.stats()["channels_last_convolutions"] == 5, kiln.stats()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if name == "stem.bias":
            # A bias feeding a training-mode batch norm has gradient 0: what
            # either side holds is the rounding of sums of terms up to ~70
            # (bn's gradients), ~1e-5 on the GPU, where eager channels-last
            # differs from eager by as much (H200, fp32 cuDNN).
            assert p.grad.abs().max() < 1e-4 and q.grad.abs().max() < 1e-4, (p.grad, q.grad)
            continue
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean)
    torch.testing.assert_close(model.bn.running_var, reference.bn.running_var)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
    assert x.grad.stride() == x_ref.grad.stride()


def test_backward_convolutions_read_channels_last_gradients():
    torch.manual_seed(0)
    conv1, conv2 = nn.Conv2d(3, 6, 3), nn.Conv2d(6, 4, 3)

    def f(x):
        y = conv2(F.gelu(conv1(x)))
        return (y * y).sum()

    x = torch.randn(2, 3, 10, 10, requires_grad=True)
    compiled = kiln.compile(f, options=CHANNELS_LAST)
    compiled(x).backward()
    got = [p.grad.clone() for p in (*conv1.parameters(), *conv2.parameters(), x)]
    for p in (*conv1.parameters(), *conv2.parameters(), x):
        p.grad = None
    f(x).backward()
    want = [p.grad for p in (*conv1.parameters(), *conv2.parameters(), x)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # torch's backward kernels took channels-last gradients: none copied them back.
    # The weights' gradients come back in the weights' (contiguous) layout
    # (Note [Input gradients in their inputs' layouts]): a hook sees them
    # before AccumulateGrad, which would otherwise copy them.
    handed = []
    hooks = [w.register_hook(lambda g: handed.append(g.is_contiguous())) for w in (conv1.weight, conv2.weight)]
    loss = compiled(x)
    with ConvInputs() as seen:
        loss.backward()
    for h in hooks:
        h.remove()
    assert seen.layouts == [True, True], seen.layouts
    assert handed == [True, True], handed
    assert kiln.stats()["channels_last_convolutions"] == 2


@pytest.mark.parametrize("case", ["grouped", "float64", "view", "keep",
                                  pytest.param("auto_on_cpu", marks=pytest.mark.cpu_semantics("auto plans CUDA graphs only"))])
def test_graphs_the_plan_leaves_alone_still_equal_eager(case):
    torch.manual_seed(0)
    dtype = torch.float64 if case == "float64" else torch.float32
    conv = nn.Conv2d(4, 8, 3, groups=2 if case == "grouped" else 1).to(dtype)

    def f(x):
        y = F.relu(conv(x))
        # A view of a channels-last map's C, H, W as one dim has no strides.
        return y.view(y.shape[0], -1) if case == "view" else y.flatten(1)

    options = {"auto_on_cpu": {"conv_layout": "auto"}, "keep": {"conv_layout": "keep"}}.get(case, CHANNELS_LAST)
    compiled = kiln.compile(f, options=options)
    x = torch.randn(2, 4, 8, 8, dtype=dtype)
    with torch.no_grad():
        assert_same(compiled(x), f(x))
    assert kiln.stats()["channels_last_convolutions"] == 0, kiln.stats()


def test_the_option_and_setting_take_only_known_layouts():
    with pytest.raises(ValueError, match="conv_layout"):
        kiln.compile(lambda x: x, options={"conv_layout": "nhwc"})
    with pytest.raises(TypeError, match="conv_layout"):
        kiln.config.conv_layout = True
    with pytest.raises(ValueError, match="conv_layout"):
        kiln.config.conv_layout = "nhwc"
    assert kiln.config.conv_layout == "auto"
    kiln.config.conv_layout = "channels_last"
    try:
        assert kiln.config.conv_layout == "channels_last"
        conv = nn.Conv2d(3, 4, 3)
        x = torch.randn(1, 3, 6, 6)
        with torch.no_grad():
            assert_same(kiln.compile(conv)(x), conv(x))
        assert kiln.stats()["channels_last_convolutions"] == 1
    finally:
        kiln.config.conv_layout = "auto"
