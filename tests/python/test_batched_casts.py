"""kiln._batched_casts.cast_all, the call a graph's batched input casts
run (Note [Batched weight casts] in inductor/batched_casts.cpp): each copy
equals the tensor's own cast, laid out as it, on the CPU too."""
import torch

from kiln._batched_casts import cast_all


def test_cast_all_equals_one_cast_each():
    torch.manual_seed(0)
    tensors = [torch.randn(5, 4), torch.randn(3), torch.randn(2, 3, 4).permute(2, 0, 1)]
    got = cast_all(torch.bfloat16, *tensors)
    assert isinstance(got, tuple) and len(got) == 3
    for out, t in zip(got, tensors):
        assert out.dtype == torch.bfloat16
        assert out.shape == t.shape and out.stride() == t.stride()
        assert torch.equal(out, t.to(torch.bfloat16))
        assert out.data_ptr() != t.data_ptr()
