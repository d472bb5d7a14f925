"""Which backend torch's scaled_dot_product_attention would run on CUDA
operands (Note [Attention on the GPU] in prims/decompose_nn.cpp): kiln keeps
the call as torch's when it runs a fused kernel (flash, memory-efficient,
cuDNN) and decomposes it where torch would run its math backend."""
import torch

_MATH = int(torch.nn.attention.SDPBackend.MATH)
_choices = {}


def _operand(desc):
    sizes, strides, dtype, requires_grad, device = desc
    t = torch.empty_strided(sizes, strides, dtype=getattr(torch, dtype), device=device)
    return t.requires_grad_(requires_grad)


def runs_fused(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """True when torch would run the attention with a fused kernel, False for
    its math backend. Tensors are given as (sizes, strides, dtype name,
    requires_grad, device) tuples (attn_mask may be None); the answer depends
    on them and on torch's backend flags (torch.nn.attention.sdpa_kernel)."""
    flags = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(),
             torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())
    key_ = (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, flags)
    if key_ not in _choices:
        # Real (uninitialized) tensors: torch's choice reads their device's
        # properties, which meta tensors have not.
        q, k, v = _operand(query), _operand(key), _operand(value)
        mask = None if attn_mask is None else _operand(attn_mask)
        backend = torch._fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        _choices[key_] = backend != _MATH
    return _choices[key_]
