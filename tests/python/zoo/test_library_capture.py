"""Library models beyond the zoo that capture whole because of a general
mechanism (tests/python/zoo/library_models.py; the whole set is measured by
`benchmarks/zoo_capture.py --set library`): each compiles to one graph with
no break and gives eager's outputs. The mechanism each one needs is named."""
import warnings

import pytest
import torch

import kiln
from library_models import build as build_model
from zoo_models import build_or_skip, tensors_of, without_randomness

WHOLE = {
    "hf-bloom": "a custom torch.autograd.Function (Note [Custom autograd Functions])",
    "timm-regnety_002": "children() through a set of modules",
    "diffusers-flux": "dicts keyed by dtypes and enum members",
    "diffusers-unet2d": "self.dtype: yield from, parameters() through a set of tensors (Note [Tensors in sets])",
    "hf-qwen3": "a recent decoder architecture",
    "hf-gemma3": "sliding-window and global attention layers",
    "hf-t5-generation": "the decoder's cache deep-copies the config (Note [Deep copies]); "
                        "CrossEntropyLoss made in forward (Note [Torch modules made in forward])",
    "hf-bart": "the config copy's strict-dataclass validators: typing.Union keys, `int | None`'s __args__",
    "hf-phimoe": "torch.memory_format constants (its router's empty_like), a custom Function",
    "hf-recurrent-gemma": "dict.fromkeys in its cache layers, a custom Function",
    "hf-mamba": "torch's associative_scan over a function defined in the forward (Note [Functions made in "
                "the trace as arguments]); its combine function under vmap (Note [Frames under torch.func "
                "transforms])",
    "hf-mamba2": "kwargs | {...}; a SiLUActivation made per call (Note [Torch modules made in forward])",
    "hf-llama4-text": "torch.zeros(n, dtype=int)",
    "hf-beit": "a decorated static method's closure read through its class",
    "hf-wav2vec2": "lru_cache'd availability checks folded; weight-norm parametrization (property closure, "
                   "ModuleDict item)",
    "timm-crossvit_tiny_240": "torch.jit.annotate(List[torch.Tensor], [])",
    "diffusers-wan": "a video transformer (3-d patches, rotary embeddings)",
}

# Models whose training step (a loss, a backward) is one graph too, with
# gradients equal to eager's and no internal error on the way: the
# encoder-decoders' cache made in forward and loss module made per call,
# and MobileBERT's backward, whose kernel groups once waited on each other
# (a group straddling another's scheduling window, inductor/schedule.cpp);
# Bloom's and RecurrentGemma's custom Functions, forward and backward traced
# (Note [Traced Function backwards]); wav2vec2's feature encoder making a
# view of its input require grad (Note [Grad leaves made in a graph]);
# RecurrentGemma's scan and Wan's interleaved rotary embedding write into
# buffers on the gradient path (Note [Index writes on intermediates]).
WHOLE_TRAINING = ["hf-bart", "hf-bloom", "hf-mobilebert", "hf-recurrent-gemma", "hf-t5-generation", "hf-wav2vec2",
                  "diffusers-wan"]

# Training steps captured whole whose graph runs through torch's autograd
# (a prim fallback), and why.
TORCH_AUTOGRAD = {}


def build(name):
    """The entry, or a skip naming its library where this machine lacks it."""
    return build_or_skip(build_model, name)


@pytest.mark.cpu_semantics("library capture: CPU, fp32")
@pytest.mark.parametrize("name", sorted(WHOLE))
def test_library_model_captures_whole(name):
    model, args, kwargs = build(name)
    model.eval()
    with torch.no_grad():
        expected = model(*args, **kwargs)
        got = kiln.compile(model)(*args, **kwargs)
    have, want = tensors_of(got), tensors_of(expected)
    assert len(have) == len(want) > 0
    for a, b in zip(have, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"], s["unsupported"], s["eager_runs"]) == (1, 0, 0, 0), (WHOLE[name], s)


@pytest.mark.cpu_semantics("library capture: CPU, fp32")
@pytest.mark.parametrize("name", WHOLE_TRAINING)
def test_library_training_step_captures_whole(name):
    import copy

    model, args, kwargs = build(name)
    without_randomness(model).train()
    compiled_model = copy.deepcopy(model)
    compiled = kiln.compile(compiled_model)

    def step(module):
        out = module(*args, **kwargs)
        # Not a plain or squared mean: of layer-normed outputs, those are
        # constants with gradients of rounding noise.
        loss = out.loss if getattr(out, "loss", None) is not None else out[0][..., :3].float().pow(3).mean()
        loss.backward()
        return loss

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # the second step reuses the trace
            torch.testing.assert_close(step(compiled), step(model), rtol=1e-4, atol=1e-5)
    internal = [str(w.message) for w in caught if "internal error" in str(w.message)]
    assert not internal, internal
    for (name_a, a), (_, b) in zip(compiled_model.named_parameters(), model.named_parameters()):
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5, msg=name_a)
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"], s["unsupported"], s["eager_runs"]) == (1, 0, 0, 0), s
    # Differentiated by kiln's autograd, not run through torch's, except
    # where TORCH_AUTOGRAD says why not.
    fallbacks = 1 if name in TORCH_AUTOGRAD else 0
    assert (s["autograd_graphs"], s["prim_fallbacks"]) == (1 - fallbacks, fallbacks), (TORCH_AUTOGRAD.get(name), s)
