"""One model from each library people compile (transformers, timm,
torchvision, diffusers): built from a small config with random weights,
offline, compiled by kiln and compared with eager. Capture quality (graph
breaks) is the real-models issue's; here the result must be right."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing in the test tier may reach a hub

import pytest  # noqa: E402
import torch  # noqa: E402

import kiln  # noqa: E402
from zoo_models import tensors_of  # noqa: E402


def gpt2():
    import transformers
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config), (torch.randint(0, 100, (2, 16)),), {}


def timm_resnet():
    import timm
    return timm.create_model("resnet18", pretrained=False, num_classes=10), (torch.randn(2, 3, 64, 64),), {}


def torchvision_mobilenet():
    import torchvision
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10), (torch.randn(2, 3, 64, 64),), {}


def diffusers_unet():
    # The GPU machine's image has no diffusers (CI's venv pins it).
    diffusers = pytest.importorskip("diffusers")
    unet = diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    return unet, (torch.randn(1, 4, 16, 16), torch.tensor([10])), {"encoder_hidden_states": torch.randn(1, 8, 32)}


MODELS = {"transformers-gpt2": gpt2, "timm-resnet18": timm_resnet, "torchvision-mobilenet_v3_small": torchvision_mobilenet,
          "diffusers-unet2d_condition": diffusers_unet}


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_library_model_compiled_equals_eager(name):
    torch.manual_seed(0)
    model, args, kwargs = MODELS[name]()
    model.eval()
    compiled = kiln.compile(model)
    with torch.no_grad():
        expected = model(*args, **kwargs)
        for _ in range(2):
            got = compiled(*args, **kwargs)
            assert type(got) is type(expected)
            want, have = tensors_of(expected), tensors_of(got)
            assert len(have) == len(want) > 0
            for a, b in zip(have, want):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert kiln.stats()["traces"] > 0  # kiln compiled something, not only ran it


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("feature_cls", ["getter", "hook"])
def test_timm_feature_backbone_captures_whole(feature_cls):
    # Detection backbones: features_only models. feature_cls="hook" collects
    # each stage's output through forward hooks into a defaultdict keyed by
    # torch.device, which the model's forward reads out and clears.
    import timm
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, features_only=True, feature_cls=feature_cls).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
        explained = kiln.explain(model)(x)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
        compiled = kiln.compile(model)
        for _ in range(3):
            got = compiled(x)
            assert len(got) == len(expected) == 5
            for a, b in zip(got, expected):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert kiln.stats()["recompiles"] == 0
