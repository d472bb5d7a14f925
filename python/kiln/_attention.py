"""torch's fused attention kernels, as kiln's graphs call them on CUDA
operands (Note [Attention on the GPU] in prims/decompose_nn.cpp), and on
CPU operands that need gradients (torch's CPU flash kernel: Note [CPU flash
attention with gradients]).

`backend` asks torch which kernel its scaled_dot_product_attention would run
for the traced layouts: kiln decomposes the call where that is torch's math
backend. Where it is cuDNN's, flash or memory-efficient attention, the
graph calls the kernel itself through `attention`
(the boolean mask converted in the graph, where kiln fuses it and computes
it once for all layers), keeping the outputs its
backward kernel reads, and `attention.kiln_vjp` calls that backward kernel:
no second forward, as an extern's gradient would pay (Note [Extern
gradients]). `layouts` gives the outputs' metadata, found by running the
kernels once at compile time."""
import torch

_MATH = int(torch.nn.attention.SDPBackend.MATH)
CUDNN = int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION)
FLASH = int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)
EFFICIENT = int(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION)
_choices = {}
_layouts = {}


def _operand(desc):
    sizes, strides, dtype, requires_grad, device = desc
    t = torch.empty_strided(sizes, strides, dtype=getattr(torch, dtype), device=device)
    return t.requires_grad_(requires_grad)


def backend(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """The torch.nn.attention.SDPBackend (as an int) torch would run the
    attention with. Tensors are given as (sizes, strides, dtype name,
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
        choice = torch._fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        _choices[key_] = int(choice)
    return _choices[key_]


def _efficient_bias(mask, query, key):
    """`mask` as torch's own call hands it to the memory-efficient kernel:
    rows padded to 16 elements for the kernel's aligned loads unless laid
    out so already (Note [Attention bias alignment], which the prim
    executor's C++ call of `attention` follows), broadcast to (batch,
    heads, queries, keys)."""
    strides = mask.stride()
    if not strides or strides[-1] != 1 or any(s % 16 for s in strides[:-1]):
        last = mask.shape[-1]
        mask = torch.nn.functional.pad(mask, (0, 16 - last % 16))[..., :last]
    return mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[-2])


def attention(query, key, value, attn_mask, backend_, is_causal, scale, with_lse):
    """torch's attention kernel `backend_` (CUDNN, FLASH or EFFICIENT;
    flash takes no mask): the output, or with `with_lse` what its backward
    kernel reads: (out, logsumexp, philox seed, philox offset), for
    EFFICIENT (out, logsumexp). On CPU operands, torch's CPU flash kernel
    (a mask of the query's dtype allowed): the output, or (out,
    logsumexp). No dropout."""
    if query.device.type == "cpu":
        r = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
        return (r[0], r[1]) if with_lse else r[0]
    if backend_ == EFFICIENT:
        if attn_mask is not None:
            attn_mask = _efficient_bias(attn_mask, query, key)
        r = torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, with_lse, 0.0, is_causal, scale=scale)
        # No dropout: the kernel's RNG state (r[2], r[3]) is never read.
        return (r[0], r[1]) if with_lse else r[0]
    if backend_ == CUDNN:
        r = torch.ops.aten._scaled_dot_product_cudnn_attention(
            query, key, value, attn_mask, with_lse, 0.0, is_causal, False, scale=scale)
    else:
        r = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, is_causal, False, scale=scale)
    return (r[0], r[1], r[6], r[7]) if with_lse else r[0]


def _like(gradient, operand):
    """`gradient` in empty_like(operand)'s layout (a copy only where it differs)."""
    like = torch.empty_like(operand)
    return gradient if gradient.stride() == like.stride() else like.copy_(gradient)


def _attention_vjp(args, kwargs, outputs, slots, grads):
    """Gradients of `attention(*args)` for the argument positions in `slots`
    ((0, i) paths: query/key/value, and for EFFICIENT the mask) by torch's
    backward kernel, from the
    forward's saved `outputs` and the output's gradient grads[0]."""
    query, key, value, mask, backend_, is_causal, scale, _ = args
    out, lse = outputs[0], outputs[1]
    grad = grads[0] if grads[0] is not None else torch.zeros_like(out)
    if query.device.type == "cpu":
        found = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, query, key, value, out, lse, 0.0, is_causal, attn_mask=mask, scale=scale)
        # The kernel lays gradients out in its own (batch, sequence, head)
        # order; kiln's gradient rule gives each its operand's empty_like
        # layout.
        found = tuple(_like(g, t) for g, t in zip(found, (query, key, value)))
        gradients = tuple(found[path[1]] for path in slots)
        return gradients[0] if len(gradients) == 1 else gradients
    if backend_ == EFFICIENT:
        return _efficient_vjp(query, key, value, mask, is_causal, scale, out, lse, slots, grad)
    seed, offset = outputs[2], outputs[3]
    max_q, max_k = query.shape[-2], key.shape[-2]
    if backend_ == CUDNN:
        found = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            grad, query, key, value, out, lse, seed, offset, mask, None, None, max_q, max_k, 0.0, is_causal,
            scale=scale)
    else:
        found = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad, query, key, value, out, lse, None, None, max_q, max_k, 0.0, is_causal, seed, offset, scale=scale)
    gradients = tuple(found[path[1]] for path in slots)
    return gradients[0] if len(gradients) == 1 else gradients


# The memory-efficient backward kernel reads its RNG state only with dropout.
_NO_RNG_STATE = torch.empty((), dtype=torch.long)


def _efficient_vjp(query, key, value, mask, is_causal, scale, out, lse, slots, grad):
    """The memory-efficient backward kernel's gradients for `slots`, the
    mask's among them where asked (a position bias that is learned, as
    T5's). The kernel reads the bias as the forward did (padded rows,
    broadcast) and gives the bias gradient at the broadcast shape; it is
    summed back to the mask's. Each gradient in empty_like's layout of its
    operand."""
    wanted = [any(path[1] == i for path in slots) for i in range(4)]
    found = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        grad, query, key, value, _efficient_bias(mask, query, key), out, lse, _NO_RNG_STATE, _NO_RNG_STATE, 0.0,
        wanted, is_causal, scale=scale)
    operands = (query, key, value, mask)
    gradients = []
    for path in slots:
        g = found[path[1]]
        if path[1] == 3:
            g = g.sum_to_size(mask.shape)
        gradients.append(_like(g, operands[path[1]]))
    return gradients[0] if len(gradients) == 1 else tuple(gradients)


attention.kiln_vjp = _attention_vjp


def layouts(query, key, value, attn_mask, backend_, is_causal, scale, with_lse):
    """(sizes, strides, dtype name) of each output of `attention` for these
    operands (described as for `backend`), or why kiln keeps torch's call
    (a string): the kernel refuses the operands, or kiln's gradient rule
    would not describe the backward's results (each gradient laid out as
    empty_like of its operand: prims/layout.h preserved_strides). Found by
    running the kernels once on uninitialized tensors."""
    key_ = (query, key, value, attn_mask, backend_, is_causal, scale, with_lse)
    if key_ in _layouts:
        return _layouts[key_]
    q, k, v = (_operand(d).detach() for d in (query, key, value))
    mask = None if attn_mask is None else _operand(attn_mask).detach()
    try:
        with torch.no_grad():
            result = attention(q, k, v, mask, backend_, is_causal, scale, with_lse)
            outputs = result if with_lse else (result,)
            found = [(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch.")) for t in outputs]
            if any(t.device != q.device for t in outputs):
                found = "an output of torch's kernel is not on the query's device"
            if with_lse:
                slots = ((0, 0), (0, 1), (0, 2))
                if backend_ == EFFICIENT and attn_mask is not None and attn_mask[3]:
                    slots += ((0, 3),)  # a mask that needs a gradient: the kernel must give one
                grads = _attention_vjp((q, k, v, mask, backend_, is_causal, scale, True), {}, outputs,
                                       slots, (torch.zeros_like(outputs[0]),))
                for name, g, t in zip("qkv", grads, (q, k, v)):
                    if g.stride() != torch.empty_like(t).stride() or g.dtype != t.dtype:
                        found = (f"the {name} gradient's layout {tuple(g.stride())} {g.dtype} is not "
                                 f"empty_like's {tuple(torch.empty_like(t).stride())} {t.dtype}")
    except Exception as error:  # a kernel that refuses these operands: kiln keeps torch's call
        found = f"torch's kernel refused the operands: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    _layouts[key_] = found
    return found
