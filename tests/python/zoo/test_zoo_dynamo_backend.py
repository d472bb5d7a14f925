"""Every zoo model (tests/python/zoo/zoo_models.py) through
torch.compile(model, backend="kiln") on the CPU: Dynamo captures, kiln
compiles (kiln.dynamo_backend); outputs equal to eager, each of Dynamo's
graphs runs as kiln's prims and kernels, later calls retrace nothing."""
import pytest
import torch

import kiln
from zoo_models import MODELS, build as build_model, build_or_skip, tensors_of


def build(name):
    """The zoo entry, or a skip naming its library where this machine lacks it."""
    return build_or_skip(build_model, name)


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_inference_through_torch_compile(name):
    model, args, kwargs = build(name)
    model.eval()
    with torch.no_grad():
        expected = model(*args, **kwargs)
        torch._dynamo.reset()
        kiln.reset()
        compiled = torch.compile(model, backend="kiln")
        got = compiled(*args, **kwargs)
        for a, b in zip(tensors_of(got), tensors_of(expected)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        s = kiln.stats()
        assert s["traces"] >= 1 and s["prim_fallbacks"] == 0 and s["eager_runs"] == 0, s
        compiled(*args, **kwargs)
        assert kiln.stats()["traces"] == s["traces"], kiln.stats()
