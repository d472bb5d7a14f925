"""torchvision's segmentation models return an OrderedDict built by
IntermediateLayerGetter and their heads (issue 19: compiled, they used to
return an empty one). Small images, random weights, nothing downloaded."""
from collections import OrderedDict

import pytest
import torch

import kiln

from torchvision.models import segmentation

# (builder, with the auxiliary head): lraspp has none.
MODELS = [("fcn_resnet50", False), ("fcn_resnet50", True), ("deeplabv3_resnet50", False),
          ("deeplabv3_resnet50", True), ("deeplabv3_mobilenet_v3_large", False),
          ("deeplabv3_mobilenet_v3_large", True), ("lraspp_mobilenet_v3_large", False)]


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name,aux_loss", MODELS, ids=[f"{n}{'-aux' if a else ''}" for n, a in MODELS])
def test_segmentation_outputs_equal_eager(name, aux_loss):
    torch.manual_seed(0)
    kwargs = {"aux_loss": True} if aux_loss else {}
    model = getattr(segmentation, name)(weights=None, weights_backbone=None, num_classes=3, **kwargs).eval()
    compiled = kiln.compile(model)
    for size in (64, 64, 48):
        x = torch.randn(1, 3, size, size)
        with torch.no_grad():
            expected = model(x)
            got = compiled(x)
        assert type(got) is OrderedDict
        assert list(got) == list(expected) == (["out", "aux"] if aux_loss else ["out"])
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-4)
