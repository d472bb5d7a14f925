"""A wider set of library models than the zoo's, for capture checks
(`benchmarks/zoo_capture.py --set library`): more transformers
architectures, timm and torchvision families, diffusers transformers and
torchvision detection. Small configs, random weights from a fixed seed,
built offline; a model whose library is missing, or whose constructor this
library version rejects, is reported as an error row by the benchmark."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may reach a hub

import torch  # noqa: E402


def _tokens(vocab=100):
    return torch.randint(0, vocab, (2, 16))


def _image(size=64):
    return torch.randn(2, 3, size, size)


_TEXT = dict(vocab_size=100, hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2)


def _hf(model_class, config_class, **config):
    def make():
        import transformers
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
        return model, (_tokens(),), {}
    return make


def _hf_image(model_class, config_class, **config):
    def make():
        import transformers
        return getattr(transformers, model_class)(getattr(transformers, config_class)(**config)), (_image(32),), {}
    return make


def _timm(name, **kwargs):
    def make():
        import timm
        return timm.create_model(name, pretrained=False, **kwargs), (_image(),), {}
    return make


def _torchvision(name, size=64, **kwargs):
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kwargs), (_image(size),), {}
    return make


def _detection(name, images, **kwargs):
    def make():
        import torchvision
        model = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **kwargs)
        return model, ([torch.rand(3, images, images) for _ in range(2)],), {}
    return make


def _t5_generation():
    import transformers
    config = transformers.T5Config(num_layers=2, d_model=64, num_heads=4, d_kv=16, d_ff=128, vocab_size=100,
                                   dropout_rate=0.0, decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config), (_tokens(),), {"labels": _tokens()}


def _bart():
    import transformers
    config = transformers.BartConfig(vocab_size=100, d_model=64, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                     decoder_ffn_dim=128, max_position_embeddings=64)
    return transformers.BartModel(config), (_tokens(),), {}


def _unet2d():
    import diffusers
    model = diffusers.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(8, 16),
                                  layers_per_block=1, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                  up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=4,
                                  attention_head_dim=4)
    return model, (torch.randn(2, 3, 16, 16), torch.tensor([3, 5])), {}


def _vae():
    import diffusers
    model = diffusers.AutoencoderKL(block_out_channels=(8, 16), down_block_types=("DownEncoderBlock2D",) * 2,
                                    up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=4,
                                    layers_per_block=1)
    return model, (torch.randn(2, 3, 32, 32),), {}


def _dit():
    import diffusers
    model = diffusers.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=2,
                                            sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=4)
    return model, (torch.randn(2, 4, 8, 8),), {"timestep": torch.tensor([1, 2]), "class_labels": torch.tensor([0, 1])}


def _sd3():
    import diffusers
    model = diffusers.SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2,
                                            attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                            caption_projection_dim=16, pooled_projection_dim=8, out_channels=4,
                                            pos_embed_max_size=16)
    return model, (torch.randn(2, 4, 8, 8),), {"encoder_hidden_states": torch.randn(2, 5, 16),
                                               "pooled_projections": torch.randn(2, 8),
                                               "timestep": torch.tensor([1, 2])}


def _flux():
    import diffusers
    model = diffusers.FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                             attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                             pooled_projection_dim=8, axes_dims_rope=(2, 2, 4))
    return model, (torch.randn(2, 16, 16),), {"encoder_hidden_states": torch.randn(2, 5, 16),
                                              "pooled_projections": torch.randn(2, 8),
                                              "timestep": torch.tensor([1.0, 2.0]), "img_ids": torch.zeros(16, 3),
                                              "txt_ids": torch.zeros(5, 3)}


def _wan():
    import diffusers
    model = diffusers.WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                            in_channels=4, out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32,
                                            num_layers=1, rope_max_seq_len=32)
    return model, (torch.randn(1, 4, 1, 8, 8), torch.tensor([3]), torch.randn(1, 5, 16)), {}


_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _llama4_text():
    import transformers
    config = transformers.Llama4TextConfig(vocab_size=100, hidden_size=64, intermediate_size=64,
                                           intermediate_size_mlp=128, num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, head_dim=16, num_local_experts=4,
                                           num_experts_per_tok=1, interleave_moe_layer_step=1,
                                           attention_chunk_size=8, max_position_embeddings=64, **_IDS)
    return transformers.Llama4ForCausalLM(config), (_tokens(),), {}


def _wav2vec2():
    import transformers
    config = transformers.Wav2Vec2Config(
        vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, apply_spec_augment=False)
    return transformers.Wav2Vec2Model(config), (torch.randn(1, 1600),), {}


MODELS = {
    "hf-mistral": _hf("MistralForCausalLM", "MistralConfig", num_key_value_heads=2, **_TEXT),
    "hf-qwen2": _hf("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=2, **_TEXT),
    "hf-qwen3": _hf("Qwen3ForCausalLM", "Qwen3Config", num_key_value_heads=2, head_dim=16, **_TEXT),
    "hf-phi3": _hf("Phi3ForCausalLM", "Phi3Config", num_key_value_heads=2, pad_token_id=0, **_TEXT),
    "hf-gemma2": _hf("Gemma2ForCausalLM", "Gemma2Config", num_key_value_heads=2, head_dim=16, **_TEXT),
    "hf-gemma3": _hf("Gemma3ForCausalLM", "Gemma3TextConfig", num_key_value_heads=2, head_dim=16, **_TEXT),
    "hf-gpt-neox": _hf("GPTNeoXForCausalLM", "GPTNeoXConfig", **_TEXT),
    "hf-phimoe": _hf("PhimoeForCausalLM", "PhimoeConfig", num_key_value_heads=2, num_local_experts=4,
                     num_experts_per_tok=2, input_jitter_noise=0.0, router_jitter_noise=0.0, **_TEXT),
    "hf-recurrent-gemma": _hf("RecurrentGemmaForCausalLM", "RecurrentGemmaConfig", vocab_size=100, hidden_size=64,
                              intermediate_size=128, num_attention_heads=4, num_key_value_heads=1, lru_width=64,
                              attention_window_size=16, conv1d_width=4, num_hidden_layers=2,
                              block_types=["recurrent", "attention"]),
    "hf-opt": _hf("OPTForCausalLM", "OPTConfig", vocab_size=100, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                  num_hidden_layers=2, word_embed_proj_dim=64, dropout=0.0, attention_dropout=0.0),
    "hf-bloom": _hf("BloomForCausalLM", "BloomConfig", vocab_size=100, hidden_size=64, n_head=4, n_layer=2),
    "hf-falcon": _hf("FalconForCausalLM", "FalconConfig", vocab_size=100, hidden_size=64, num_attention_heads=4,
                     num_hidden_layers=2),
    "hf-mamba": _hf("MambaForCausalLM", "MambaConfig", vocab_size=100, hidden_size=64, state_size=8,
                    num_hidden_layers=2, expand=2, conv_kernel=4, **_IDS),
    "hf-mamba2": _hf("Mamba2ForCausalLM", "Mamba2Config", vocab_size=100, hidden_size=64, state_size=8,
                     num_hidden_layers=2, expand=2, num_heads=8, head_dim=16, n_groups=1, chunk_size=8, **_IDS),
    "hf-llama4-text": _llama4_text,
    "hf-beit": _hf_image("BeitModel", "BeitConfig", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, image_size=32, patch_size=8, use_relative_position_bias=True),
    "hf-wav2vec2": _wav2vec2,
    "hf-longformer": _hf("LongformerModel", "LongformerConfig", attention_window=[8, 8], max_position_embeddings=80,
                         pad_token_id=1, **_TEXT),
    "hf-roberta": _hf("RobertaModel", "RobertaConfig", max_position_embeddings=64, **_TEXT),
    "hf-albert": _hf("AlbertModel", "AlbertConfig", embedding_size=32, **_TEXT),
    "hf-electra": _hf("ElectraModel", "ElectraConfig", embedding_size=32, **_TEXT),
    "hf-deberta-v2": _hf("DebertaV2Model", "DebertaV2Config", max_position_embeddings=64, **_TEXT),
    "hf-mobilebert": _hf("MobileBertModel", "MobileBertConfig", vocab_size=100, hidden_size=64, num_attention_heads=4,
                         intermediate_size=128, num_hidden_layers=2, embedding_size=32, intra_bottleneck_size=32,
                         true_hidden_size=32),
    "hf-clip-text": _hf("CLIPTextModel", "CLIPTextConfig", max_position_embeddings=64, **_TEXT),
    "hf-clip-vision": _hf_image("CLIPVisionModel", "CLIPVisionConfig", hidden_size=64, num_attention_heads=4,
                                intermediate_size=128, num_hidden_layers=2, image_size=32, patch_size=8),
    "hf-swin": _hf_image("SwinModel", "SwinConfig", image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                         num_heads=[2, 2], window_size=4),
    "hf-convnext": _hf_image("ConvNextModel", "ConvNextConfig", hidden_sizes=[8, 16], depths=[1, 1], num_stages=2),
    "hf-segformer": _hf_image("SegformerModel", "SegformerConfig", hidden_sizes=[8, 16], depths=[1, 1],
                              num_encoder_blocks=2, sr_ratios=[2, 1], num_attention_heads=[1, 2],
                              decoder_hidden_size=16, strides=[4, 2], patch_sizes=[7, 3]),
    "hf-bart": _bart,
    "hf-t5-generation": _t5_generation,
    "timm-regnety_002": _timm("regnety_002"),
    "timm-efficientnetv2_rw_t": _timm("efficientnetv2_rw_t"),
    "timm-deit_tiny": _timm("deit_tiny_patch16_224", img_size=64),
    "timm-mobilevit_xxs": _timm("mobilevit_xxs"),
    "timm-resnest14d": _timm("resnest14d"),
    "timm-levit_128s": _timm("levit_128s", img_size=64),
    "timm-coatnet_nano": _timm("coatnet_nano_rw_224", img_size=64),
    "timm-maxvit_nano": _timm("maxvit_nano_rw_256", img_size=64),
    "timm-edgenext_xx_small": _timm("edgenext_xx_small"),
    "timm-ghostnet_100": _timm("ghostnet_100"),
    "timm-densenet121": _timm("densenet121"),
    "timm-dla34": _timm("dla34"),
    "timm-hrnet_w18_small": _timm("hrnet_w18_small"),
    "timm-poolformer_s12": _timm("poolformer_s12"),
    "timm-mixer_s16": _timm("mixer_s16_224", img_size=64),
    "timm-beit_base": _timm("beit_base_patch16_224", img_size=64),
    "timm-eva02_tiny": _timm("eva02_tiny_patch14_224", img_size=64),
    "timm-fastvit_t8": _timm("fastvit_t8"),
    "timm-crossvit_tiny_240": lambda: (__import__("timm").create_model("crossvit_tiny_240", pretrained=False),
                                       (_image(240),), {}),
    "tv-densenet121": _torchvision("densenet121"),
    "tv-efficientnet_v2_s": _torchvision("efficientnet_v2_s"),
    "tv-regnet_y_400mf": _torchvision("regnet_y_400mf"),
    "tv-shufflenet_v2": _torchvision("shufflenet_v2_x1_0"),
    "tv-squeezenet": _torchvision("squeezenet1_0"),
    "tv-mnasnet": _torchvision("mnasnet0_5"),
    "tv-googlenet": _torchvision("googlenet", aux_logits=False, init_weights=False),
    "tv-resnext50": _torchvision("resnext50_32x4d"),
    "tv-wide_resnet50": _torchvision("wide_resnet50_2"),
    "tv-maxvit_t": _torchvision("maxvit_t", size=224),
    "tv-swin_v2_t": _torchvision("swin_v2_t"),
    "tv-r3d_18": lambda: (__import__("torchvision").models.video.r3d_18(weights=None), (torch.rand(1, 3, 4, 32, 32),), {}),
    "tv-fasterrcnn": _detection("fasterrcnn_mobilenet_v3_large_fpn", 64, min_size=64, max_size=64),
    "tv-retinanet": _detection("retinanet_resnet50_fpn", 64, min_size=64, max_size=64),
    "tv-ssdlite": _detection("ssdlite320_mobilenet_v3_large", 96),
    "diffusers-vae": _vae,
    "diffusers-unet2d": _unet2d,
    "diffusers-dit": _dit,
    "diffusers-sd3": _sd3,
    "diffusers-flux": _flux,
    "diffusers-wan": _wan,
}


def build(name):
    """(model, args, kwargs) of an entry, with weights from a fixed seed."""
    torch.manual_seed(0)
    return MODELS[name]()
