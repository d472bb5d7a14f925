"""Library models beyond the zoo that capture whole because of a general
mechanism (tests/python/zoo/library_models.py; the whole set is measured by
`benchmarks/zoo_capture.py --set library`): each compiles to one graph with
no break and gives eager's outputs. The mechanism each one needs is named."""
import pytest
import torch

import kiln
from library_models import build as build_model
from zoo_models import build_or_skip, tensors_of

WHOLE = {
    "hf-bloom": "a custom torch.autograd.Function (Note [Custom autograd Functions])",
    "timm-regnety_002": "children() through a set of modules",
    "diffusers-flux": "dicts keyed by dtypes and enum members",
    "diffusers-unet2d": "self.dtype: yield from, parameters() through a set of tensors (Note [Tensors in sets])",
    "hf-qwen3": "a recent decoder architecture",
    "hf-gemma3": "sliding-window and global attention layers",
}


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
