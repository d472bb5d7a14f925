"""kiln.compile(options=...): kiln.config settings for one compile's graphs
only, torch.compile's option names for the modes they mean, and clear
errors for anything else."""
import pytest
import torch

import kiln

needs_cpu_kernels = pytest.mark.skipif(not kiln._C.cpu_kernels_available(),
                                       reason="kiln built without LLVM: no CPU kernels")
pytestmark = pytest.mark.cpu_semantics("kiln.config's CPU settings")


def pointwise(x):
    return torch.tanh(x) * 2 + x.exp()


def matmul(a, b):
    return (a @ b).relu()


@needs_cpu_kernels
def test_an_option_holds_for_its_compile_only():
    x = torch.randn(64)
    torch.testing.assert_close(kiln.compile(pointwise, options={"cpu_kernels": False})(x), pointwise(x))
    assert kiln.stats()["kernels"] == 0 and kiln.stats()["prim_graphs"] == 0, kiln.stats()
    assert kiln.config.cpu_kernels
    torch.testing.assert_close(kiln.compile(pointwise)(x), pointwise(x))
    assert kiln.stats()["kernels"] > 0, kiln.stats()


@needs_cpu_kernels
def test_cpu_matmul_option_picks_who_multiplies():
    a, b = torch.randn(32, 48), torch.randn(48, 16)
    process_wide = kiln.config.cpu_matmul
    torch.testing.assert_close(kiln.compile(matmul, options={"cpu_matmul": "aten"})(a, b), matmul(a, b))
    assert kiln.stats()["gemm_kernels"] == 0, kiln.stats()
    torch.testing.assert_close(kiln.compile(matmul, options={"cpu_matmul": "kiln"})(a, b), matmul(a, b),
                               rtol=1e-4, atol=1e-4)
    assert kiln.stats()["gemm_kernels"] == 1, kiln.stats()
    assert kiln.config.cpu_matmul == process_wide


def test_torch_option_names_mean_their_modes():
    x = torch.randn(16)
    for options in ({"max_autotune": True}, {"triton.cudagraphs": True}, {"triton.cudagraphs": False}):
        torch.testing.assert_close(kiln.compile(pointwise, options=options)(x), pointwise(x))


@pytest.mark.parametrize("options, error, match", [
    ({"epilogue_fusion": True}, ValueError,
     r"unknown options \['epilogue_fusion'\]; valid: batch_input_casts, constant_subgraphs, conv_bias, conv_layout"),
    ({"cpu_kernels": 1}, TypeError, r"options\['cpu_kernels'\] must be a bool, got int"),
    ({"cpu_matmul": "blas"}, ValueError, r"'auto', 'kiln' or 'aten', got 'blas'"),
    ({"conv_layout": "nhwc"}, ValueError, r"'auto', 'channels_last' or 'keep', got 'nhwc'"),
    ({"conv_bias": "epilogue"}, ValueError, r"'auto', 'kernels' or 'convolution', got 'epilogue'"),
    ({"max_autotune": True, "triton.cudagraphs": True}, ValueError, "two modes"),
    ([("cpu_kernels", True)], TypeError, "options must be a dict"),
])
def test_bad_options_are_named(options, error, match):
    with pytest.raises(error, match=match):
        kiln.compile(pointwise, options=options)


def test_mode_and_options_together_are_refused_as_torch_compile_does():
    with pytest.raises(ValueError, match="mode or options, not both"):
        kiln.compile(pointwise, mode="max-autotune", options={"cpu_kernels": True})
    with pytest.raises(ValueError, match="unknown options"):
        kiln.compile(options={"nope": 1})  # the decorator form checks at once
