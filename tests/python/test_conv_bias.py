"""Convolution biases added in kiln's kernels (Note [Convolution biases in
kernels] in inductor/conv_bias.cpp): by default on CUDA inference graphs;
here forced on CPU graphs with options={"conv_bias": "kernels"}. Results
and gradients against eager, and the bias argument of the convolutions
torch really runs (a dispatch mode sees the calls kiln makes from C++)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import kiln
from conftest import TEST_DEVICE, assert_same

# The rewrite runs among the kernel passes: LLVM's kernels for CPU tensors.
pytestmark = pytest.mark.skipif(TEST_DEVICE == "cpu" and not kiln._C.cpu_kernels_available(),
                                reason="kiln built without LLVM: no CPU kernels, so no kernel passes on CPU graphs")

KERNELS = {"conv_bias": "kernels"}


class ConvBiases(TorchDispatchMode):
    """Whether each convolution torch runs is given a bias."""

    def __init__(self):
        super().__init__()
        self.biased = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "convolution":
            self.biased.append(args[2] is not None)
        return func(*args, **(kwargs or {}))


class Net(nn.Module):
    """A ConvNeXt-like stem and block: a biased convolution a layer norm reads,
    a depthwise one whose output only a convolution reads, and a 1x1 one
    whose output is returned through a GELU."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 2, stride=2)
        self.norm = nn.LayerNorm(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 6, 1)

    def forward(self, x):
        x = self.norm(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return F.gelu(self.pw(self.dw(x)))


def biased_convolutions(options):
    """Net's compiled inference at a second call (the first compiles), equal
    to eager: whether each convolution torch ran got a bias."""
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 3, 16, 16)
    compiled = kiln.compile(net, options=options)
    with torch.no_grad():
        want = net(x)
        assert_same(compiled(x), want)
        with ConvBiases() as seen:
            assert_same(compiled(x), want)
    return seen.biased


def test_inference_adds_biases_in_kernels_and_equals_eager():
    # The depthwise convolution's output is read by a convolution only: it keeps its bias.
    assert biased_convolutions(KERNELS) == [False, True, False]


def test_training_gradients_equal_eager():
    torch.manual_seed(0)
    net = Net()
    ref = copy.deepcopy(net)
    x = torch.randn(2, 3, 16, 16)
    compiled = kiln.compile(net, options=KERNELS)
    ref(x).square().mean().backward()
    compiled(x)  # compiles (the trace runs fakes of the convolutions, bias and all)
    with ConvBiases() as seen:
        out = compiled(x)
    out.square().mean().backward()
    # The bias gradients come from the adds' backward, the others from the convolutions'.
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_same(p.grad, q.grad)
    assert seen.biased == [False, True, False], seen.biased
    assert kiln.stats()["autograd_graphs"] >= 1


@pytest.mark.parametrize("options", [None, {"conv_bias": "convolution"}])
def test_cpu_graphs_keep_biases_in_the_call_unless_asked(options):
    assert biased_convolutions(options) == [True, True, True]


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="conv_bias"):
        kiln.compile(lambda x: x, options={"conv_bias": "epilogue"})
    with pytest.raises(TypeError, match="conv_bias"):
        kiln.config.conv_bias = True
    with pytest.raises(ValueError, match="conv_bias"):
        kiln.config.conv_bias = "epilogue"
    assert kiln.config.conv_bias == "auto"
