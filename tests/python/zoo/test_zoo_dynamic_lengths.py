"""Language models of the zoo at varying sequence lengths (issue: dynamic
shapes): two traces (static, then dynamic), comparisons of the length
kept as size-relation guards (Note [Size relations]), every later length
run by a compiled instance of the dynamic graph (Note [Size instances]),
never by the eager replay; outputs equal to eager at every length."""
import pytest
import torch

import kiln
from zoo_models import build

LENGTHS = [16, 24, 40, 33, 50, 24, 40]


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name", ["hf-gpt2", "hf-llama"])
def test_forward_at_varying_lengths(name):
    model, (tokens,), _ = build(name)
    model.eval()
    compiled = kiln.compile(model)
    with torch.no_grad():
        for length in LENGTHS:
            ids = torch.randint(0, 100, (tokens.shape[0], length))
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)
    s = kiln.stats()
    assert s["traces"] == 2 and s["graph_breaks"] == 0, s
    # 16 is the static trace's; 24, 40, 33 and 50 each get an instance.
    assert s["size_instances"] == 4, s
    assert s["prim_fallbacks"] == 0 and s["eager_runs"] == 0, s
    assert s["kernels"] > 0, s
