"""The model zoo of the real-models tier: small configs of the models people
compile, random weights, built offline. Each entry builds (model, args,
kwargs) from a fixed seed. Dropout is 0 in the configs (a training step is
compared with eager, and random masks are drawn differently); stochastic
depth stays on in the models and is turned off by `without_randomness` for
training steps."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing in the zoo may reach a hub

import torch  # noqa: E402

SEQ = 16
BATCH = 2


def _tokens(vocab=100):
    return torch.randint(0, vocab, (BATCH, SEQ))


def _image(size=32, channels=3):
    return torch.randn(BATCH, channels, size, size)


def hf_gpt2():
    import transformers
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config), (_tokens(),), {}


def hf_bert():
    import transformers
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=100, max_position_embeddings=64,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertModel(config), (_tokens(),), {}


def hf_llama():
    import transformers
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                                      max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config), (_tokens(),), {}


def hf_t5():
    import transformers
    config = transformers.T5Config(num_layers=2, d_model=64, num_heads=4, d_kv=16, d_ff=128, vocab_size=100, dropout_rate=0.0)
    return transformers.T5EncoderModel(config), (_tokens(),), {}


def hf_distilbert():
    import transformers
    config = transformers.DistilBertConfig(n_layers=2, dim=64, n_heads=4, hidden_dim=128, vocab_size=100,
                                           max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)
    return transformers.DistilBertModel(config), (_tokens(),), {}


def hf_vit():
    import transformers
    config = transformers.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                    intermediate_size=128, image_size=32, patch_size=8, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    return transformers.ViTModel(config), (_image(),), {}


def _timm(name, **kwargs):
    import timm
    return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)


def timm_resnet():
    return _timm("resnet18"), (_image(64),), {}


def timm_efficientnet():
    return _timm("efficientnet_b0"), (_image(64),), {}


def timm_convnext():
    return _timm("convnext_atto"), (_image(64),), {}


def timm_vit():
    return _timm("vit_tiny_patch16_224", img_size=32, patch_size=8), (_image(32),), {}


def _torchvision(name, **kwargs):
    import torchvision
    return getattr(torchvision.models, name)(weights=None, num_classes=10, **kwargs)


def tv_resnet():
    return _torchvision("resnet18"), (_image(64),), {}


def tv_mobilenet_v3():
    return _torchvision("mobilenet_v3_small"), (_image(64),), {}


def tv_convnext():
    # ConvNeXt's blocks (stochastic depth, layer scale) at a small width.
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    settings = [CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 2)]
    return ConvNeXt(settings, stochastic_depth_prob=0.1, num_classes=10), (_image(32),), {}


def tv_vit():
    from torchvision.models import VisionTransformer
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                              num_classes=10)
    return model, (_image(32),), {}


def tv_swin():
    from torchvision.models import SwinTransformer
    model = SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                            stochastic_depth_prob=0.1, num_classes=10)
    return model, (_image(32),), {}


def diffusers_unet():
    import diffusers
    unet = diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    return unet, (torch.randn(1, 4, 16, 16), torch.tensor([10])), {"encoder_hidden_states": torch.randn(1, 8, 32)}


MODELS = {
    "hf-gpt2": hf_gpt2,
    "hf-bert": hf_bert,
    "hf-llama": hf_llama,
    "hf-t5-encoder": hf_t5,
    "hf-distilbert": hf_distilbert,
    "hf-vit": hf_vit,
    "timm-resnet18": timm_resnet,
    "timm-efficientnet_b0": timm_efficientnet,
    "timm-convnext_atto": timm_convnext,
    "timm-vit_tiny": timm_vit,
    "tv-resnet18": tv_resnet,
    "tv-mobilenet_v3_small": tv_mobilenet_v3,
    "tv-convnext": tv_convnext,
    "tv-vit": tv_vit,
    "tv-swin": tv_swin,
    "diffusers-unet2d_condition": diffusers_unet,
}


def build(name):
    """(model, args, kwargs) of a zoo entry, with weights from a fixed seed."""
    torch.manual_seed(0)
    return MODELS[name]()


def build_or_skip(make, name):
    """make(name) for a test, or a pytest skip naming the library this machine
    lacks (the GPU machine's image has no diffusers; requirements.txt installs
    every library here and in CI, where every entry runs)."""
    import pytest
    try:
        return make(name)
    except ModuleNotFoundError as missing:
        pytest.skip(f"{name}: {missing.name} is not installed on this machine")


def tensors_of(output):
    """The tensors of a model output in a stable order (ModelOutput, dict, tuple, cache objects)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        return [t for value in output.values() for t in tensors_of(value)]
    if isinstance(output, (list, tuple)):
        return [t for value in output for t in tensors_of(value)]
    return []


def loss_of(output):
    """A scalar standing for the model's output, for a training step."""
    return sum(t.float().pow(2).mean() for t in tensors_of(output) if t.is_floating_point())


def without_randomness(model):
    """Sets dropout and stochastic-depth probabilities to 0 (for comparing training steps with eager):
    dropout modules' p, and float attributes named for dropout that forwards pass to F.dropout
    (transformers' `self.dropout = config.dropout`, timm's `drop_rate`)."""
    for module in model.modules():
        for attr in ("p", "drop_prob"):
            if isinstance(getattr(module, attr, None), float) and "drop" in type(module).__name__.lower() + attr:
                setattr(module, attr, 0.0)
        for attr, value in list(vars(module).items()):
            if "drop" in attr.lower() and isinstance(value, float) and not isinstance(value, bool):
                setattr(module, attr, 0.0)
        if type(module).__name__ == "StochasticDepth":
            module.p = 0.0
    return model
