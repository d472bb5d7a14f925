// The torch-level ops kiln decomposes into prims, each with every spelling
// that names it (torch function, Tensor method, nn.functional, operator
// module) and that spelling's signature. The list is written once
// (KILN_TORCH_OPS); prims/decompositions.h expands it into one
// decomposition function per op. Callables are resolved once, by identity.
#pragma once

#include <Python.h>

#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace kiln::prims {

// Note [Torch op spellings]
// X(op, "prefix.name(signature)", ...). Prefixes: torch., Tensor., F.
// (torch.nn.functional), operator., builtins. Signatures use Python syntax:
// parameters bind by position in order, `*` starts keyword-only ones,
// `*name` collects the remaining positionals, defaults are Python literals.
// Parameter names are the op's canonical names (the Tensor method's self is
// `input`), so one decomposition reads every spelling; they must equal the
// names torch accepts as keywords. A spelling torch lacks (a torch 2.x
// function on 1.13) is skipped. In-place spellings are never listed: those
// calls stay externs, except operator.setitem, whose decomposition is the
// functional write that functionalize_inplace (decompose.cpp) makes of it.
#define KILN_TORCH_OPS(X)                                                                          \
  /* elementwise binary */                                                                         \
  X(Add, "torch.add(input, other, *, alpha=1)", "Tensor.add(input, other, *, alpha=1)",            \
    "operator.add(input, other)", "Tensor.__add__(input, other)", "Tensor.__radd__(input, other)") \
  X(Sub, "torch.sub(input, other, *, alpha=1)", "Tensor.sub(input, other, *, alpha=1)",            \
    "operator.sub(input, other)", "Tensor.__sub__(input, other)", "torch.subtract(input, other, *, alpha=1)") \
  X(RSub, "torch.rsub(input, other, *, alpha=1)", "Tensor.__rsub__(input, other)")                 \
  X(Mul, "torch.mul(input, other)", "Tensor.mul(input, other)", "operator.mul(input, other)",      \
    "Tensor.__mul__(input, other)", "Tensor.__rmul__(input, other)", "torch.multiply(input, other)") \
  X(Div, "torch.div(input, other, *, rounding_mode=None)",                                         \
    "Tensor.div(input, other, *, rounding_mode=None)", "operator.truediv(input, other)",           \
    "Tensor.__truediv__(input, other)", "torch.true_divide(input, other)", "torch.divide(input, other, *, rounding_mode=None)") \
  X(FloorDivide, "torch.floor_divide(input, other)", "Tensor.floor_divide(input, other)",          \
    "operator.floordiv(input, other)", "Tensor.__floordiv__(input, other)")                        \
  X(Remainder, "torch.remainder(input, other)", "Tensor.remainder(input, other)",                  \
    "operator.mod(input, other)", "Tensor.__mod__(input, other)")                                  \
  X(Fmod, "torch.fmod(input, other)", "Tensor.fmod(input, other)")                                 \
  X(Pow, "torch.pow(input, exponent)", "Tensor.pow(input, exponent)",                              \
    "operator.pow(input, exponent)", "Tensor.__pow__(input, exponent)")                            \
  X(Square, "torch.square(input)", "Tensor.square(input)")                                         \
  X(Maximum, "torch.maximum(input, other)", "Tensor.maximum(input, other)")                        \
  X(Minimum, "torch.minimum(input, other)", "Tensor.minimum(input, other)")                        \
  X(Atan2, "torch.atan2(input, other)", "Tensor.atan2(input, other)")                              \
  X(Eq, "torch.eq(input, other)", "Tensor.eq(input, other)", "operator.eq(input, other)",          \
    "Tensor.__eq__(input, other)")                                                                 \
  X(Ne, "torch.ne(input, other)", "Tensor.ne(input, other)", "operator.ne(input, other)",          \
    "Tensor.__ne__(input, other)")                                                                 \
  X(Lt, "torch.lt(input, other)", "Tensor.lt(input, other)", "operator.lt(input, other)",          \
    "Tensor.__lt__(input, other)")                                                                 \
  X(Le, "torch.le(input, other)", "Tensor.le(input, other)", "operator.le(input, other)",          \
    "Tensor.__le__(input, other)")                                                                 \
  X(Gt, "torch.gt(input, other)", "Tensor.gt(input, other)", "operator.gt(input, other)",          \
    "Tensor.__gt__(input, other)")                                                                 \
  X(Ge, "torch.ge(input, other)", "Tensor.ge(input, other)", "operator.ge(input, other)",          \
    "Tensor.__ge__(input, other)")                                                                 \
  X(LogicalAnd, "torch.logical_and(input, other)", "Tensor.logical_and(input, other)")             \
  X(LogicalOr, "torch.logical_or(input, other)", "Tensor.logical_or(input, other)")                \
  X(LogicalXor, "torch.logical_xor(input, other)", "Tensor.logical_xor(input, other)")             \
  X(BitwiseAnd, "torch.bitwise_and(input, other)", "operator.and_(input, other)",                  \
    "Tensor.__and__(input, other)")                                                                \
  X(BitwiseOr, "torch.bitwise_or(input, other)", "operator.or_(input, other)",                     \
    "Tensor.__or__(input, other)")                                                                 \
  X(BitwiseXor, "torch.bitwise_xor(input, other)", "operator.xor(input, other)",                   \
    "Tensor.__xor__(input, other)")                                                                \
  X(Where, "torch.where(condition, input, other)", "Tensor.where(input, condition, other)")        \
  X(MaskedFill, "Tensor.masked_fill(input, mask, value)", "torch.masked_fill(input, mask, value)")  \
  X(Tril, "torch.tril(input, diagonal=0)", "Tensor.tril(input, diagonal=0)")                     \
  X(Triu, "torch.triu(input, diagonal=0)", "Tensor.triu(input, diagonal=0)")                     \
  X(Clamp, "torch.clamp(input, min=None, max=None)", "Tensor.clamp(input, min=None, max=None)",    \
    "torch.clip(input, min=None, max=None)", "Tensor.clip(input, min=None, max=None)")             \
  /* elementwise unary */                                                                          \
  X(Neg, "torch.neg(input)", "Tensor.neg(input)", "operator.neg(input)", "Tensor.__neg__(input)")  \
  X(Abs, "torch.abs(input)", "Tensor.abs(input)", "operator.abs(input)", "Tensor.__abs__(input)")  \
  X(Exp, "torch.exp(input)", "Tensor.exp(input)")                                                  \
  X(Exp2, "torch.exp2(input)", "Tensor.exp2(input)")                                               \
  X(Log, "torch.log(input)", "Tensor.log(input)")                                                  \
  X(Log2, "torch.log2(input)", "Tensor.log2(input)")                                               \
  X(Log1p, "torch.log1p(input)", "Tensor.log1p(input)")                                            \
  X(Expm1, "torch.expm1(input)", "Tensor.expm1(input)")                                            \
  X(Sqrt, "torch.sqrt(input)", "Tensor.sqrt(input)")                                               \
  X(Rsqrt, "torch.rsqrt(input)", "Tensor.rsqrt(input)")                                            \
  X(Sin, "torch.sin(input)", "Tensor.sin(input)")                                                  \
  X(Cos, "torch.cos(input)", "Tensor.cos(input)")                                                  \
  X(Tan, "torch.tan(input)", "Tensor.tan(input)")                                                  \
  X(Tanh, "torch.tanh(input)", "Tensor.tanh(input)", "F.tanh(input)")                              \
  X(Sigmoid, "torch.sigmoid(input)", "Tensor.sigmoid(input)", "F.sigmoid(input)")                  \
  X(Erf, "torch.erf(input)", "Tensor.erf(input)")                                                  \
  X(Floor, "torch.floor(input)", "Tensor.floor(input)")                                            \
  X(Ceil, "torch.ceil(input)", "Tensor.ceil(input)")                                               \
  X(Round, "torch.round(input)", "Tensor.round(input)")                                            \
  X(Trunc, "torch.trunc(input)", "Tensor.trunc(input)")                                            \
  X(Sign, "torch.sign(input)", "Tensor.sign(input)")                                               \
  X(Reciprocal, "torch.reciprocal(input)", "Tensor.reciprocal(input)")                             \
  X(LogicalNot, "torch.logical_not(input)", "Tensor.logical_not(input)")                           \
  X(BitwiseNot, "torch.bitwise_not(input)", "operator.invert(input)", "Tensor.__invert__(input)")  \
  X(IsNan, "torch.isnan(input)", "Tensor.isnan(input)")                                            \
  X(IsInf, "torch.isinf(input)", "Tensor.isinf(input)")                                            \
  /* activations */                                                                                \
  X(Relu, "torch.relu(input)", "Tensor.relu(input)", "F.relu(input, inplace=False)")               \
  X(Silu, "F.silu(input, inplace=False)")                                                          \
  X(Softplus, "F.softplus(input, beta=1.0, threshold=20.0)")                                       \
  X(Hardsigmoid, "F.hardsigmoid(input, inplace=False)")                                            \
  X(Hardswish, "F.hardswish(input, inplace=False)")                                                \
  X(Gelu, "F.gelu(input, approximate='none')")                                                     \
  /* reductions */                                                                                 \
  X(Sum, "torch.sum(input, dim=None, keepdim=False, *, dtype=None)",                               \
    "Tensor.sum(input, dim=None, keepdim=False, *, dtype=None)")                                   \
  X(Mean, "torch.mean(input, dim=None, keepdim=False, *, dtype=None)",                             \
    "Tensor.mean(input, dim=None, keepdim=False, *, dtype=None)")                                  \
  X(Amax, "torch.amax(input, dim=(), keepdim=False)", "Tensor.amax(input, dim=(), keepdim=False)") \
  X(Amin, "torch.amin(input, dim=(), keepdim=False)", "Tensor.amin(input, dim=(), keepdim=False)") \
  X(Max, "torch.max(input, dim=None, keepdim=False)", "Tensor.max(input, dim=None, keepdim=False)") \
  X(Argmax, "torch.argmax(input, dim=None, keepdim=False)", "Tensor.argmax(input, dim=None, keepdim=False)") \
  X(Argmin, "torch.argmin(input, dim=None, keepdim=False)", "Tensor.argmin(input, dim=None, keepdim=False)") \
  X(Min, "torch.min(input, dim=None, keepdim=False)", "Tensor.min(input, dim=None, keepdim=False)") \
  X(Var, "torch.var(input, dim=None, unbiased=None, keepdim=False, *, correction=None)",           \
    "Tensor.var(input, dim=None, unbiased=None, keepdim=False, *, correction=None)")               \
  X(Std, "torch.std(input, dim=None, unbiased=None, keepdim=False, *, correction=None)",           \
    "Tensor.std(input, dim=None, unbiased=None, keepdim=False, *, correction=None)")               \
  X(VarMean, "torch.var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None)")  \
  X(VectorNorm, "linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None)")     \
  X(Norm, "torch.norm(input, p='fro', dim=None, keepdim=False, out=None, dtype=None)",               \
    "Tensor.norm(input, p='fro', dim=None, keepdim=False, dtype=None)")                              \
  /* shapes and views */                                                                           \
  X(View, "Tensor.view(input, *size)")                                                             \
  X(Reshape, "Tensor.reshape(input, *shape)", "torch.reshape(input, shape)")                       \
  X(Permute, "Tensor.permute(input, *dims)", "torch.permute(input, dims)")                         \
  X(Transpose, "torch.transpose(input, dim0, dim1)", "Tensor.transpose(input, dim0, dim1)")        \
  X(SwapAxes, "torch.swapaxes(input, axis0, axis1)", "Tensor.swapaxes(input, axis0, axis1)",      \
    "torch.swapdims(input, dim0, dim1)", "Tensor.swapdims(input, dim0, dim1)")                    \
  X(Repeat, "Tensor.repeat(input, *repeats)")                                                      \
  X(RepeatInterleave, "torch.repeat_interleave(input, repeats, dim=None, *, output_size=None)",    \
    "Tensor.repeat_interleave(input, repeats, dim=None, *, output_size=None)")                    \
  X(T, "torch.t(input)", "Tensor.t(input)")                                                        \
  X(GetAttr, "builtins.getattr(input, name)")                                                      \
  X(Flatten, "torch.flatten(input, start_dim=0, end_dim=-1)",                                      \
    "Tensor.flatten(input, start_dim=0, end_dim=-1)")                                              \
  X(Unflatten, "torch.unflatten(input, dim, sizes)", "Tensor.unflatten(input, dim, sizes)")        \
  X(Unsqueeze, "torch.unsqueeze(input, dim)", "Tensor.unsqueeze(input, dim)")                      \
  X(Squeeze, "torch.squeeze(input, dim=None)", "Tensor.squeeze(input, dim=None)")                  \
  X(Expand, "Tensor.expand(input, *size)")                                                         \
  X(ExpandAs, "Tensor.expand_as(input, other)")                                                    \
  X(ReshapeAs, "Tensor.reshape_as(input, other)")                                                  \
  X(ViewAs, "Tensor.view_as(input, other)")                                                        \
  X(Contiguous, "Tensor.contiguous(input)")                                                        \
  X(Clone, "torch.clone(input)", "Tensor.clone(input)")                                            \
  X(GetItem, "operator.getitem(input, index)", "Tensor.__getitem__(input, index)")                 \
  X(SetItem, "operator.setitem(input, index, value)", "Tensor.__setitem__(input, index, value)")   \
  X(Gather, "torch.gather(input, dim, index, *, sparse_grad=False)",                               \
    "Tensor.gather(input, dim, index, *, sparse_grad=False)")                                       \
  X(IndexSelect, "torch.index_select(input, dim, index)", "Tensor.index_select(input, dim, index)") \
  X(ScatterAdd, "torch.scatter_add(input, dim, index, src)", "Tensor.scatter_add(input, dim, index, src)") \
  X(Scatter, "torch.scatter(input, dim, index, src=None, *, value=None, reduce=None)",              \
    "Tensor.scatter(input, dim, index, src=None, *, value=None, reduce=None)")                      \
  X(Cat, "torch.cat(tensors, dim=0)", "torch.concat(tensors, dim=0)")                              \
  X(Pad, "F.pad(input, pad, mode='constant', value=None)")                                         \
  X(Interpolate, "F.interpolate(input, size=None, scale_factor=None, mode='nearest', "              \
                 "align_corners=None, recompute_scale_factor=None, antialias=False)")              \
  X(Roll, "torch.roll(input, shifts, dims=None)", "Tensor.roll(input, shifts, dims=None)")         \
  X(Flip, "torch.flip(input, dims)", "Tensor.flip(input, *dims)")                                  \
  X(Stack, "torch.stack(tensors, dim=0)")                                                          \
  X(Split, "torch.split(input, split_size_or_sections, dim=0)",                                    \
    "Tensor.split(input, split_size, dim=0)", "torch.chunk(input, chunks, dim=0)",                 \
    "Tensor.chunk(input, chunks, dim=0)", "torch.unbind(input, dim=0)", "Tensor.unbind(input, dim=0)") \
  X(To, "Tensor.to(input, *args, dtype=None, device=None, non_blocking=False, copy=False)")                  \
  X(Float, "Tensor.float(input)")                                                                  \
  X(Double, "Tensor.double(input)")                                                                \
  X(Half, "Tensor.half(input)")                                                                    \
  X(Long, "Tensor.long(input)")                                                                    \
  X(Int, "Tensor.int(input)")                                                                      \
  X(Bool, "Tensor.bool(input)")                                                                    \
  X(TypeAs, "Tensor.type_as(input, other)")                                                        \
  /* factories */                                                                                  \
  X(Zeros, "torch.zeros(*size, dtype=None, device=None, requires_grad=False)")                                                                   \
  X(Ones, "torch.ones(*size, dtype=None, device=None, requires_grad=False)")                                                                     \
  X(Full, "torch.full(size, fill_value, *, dtype=None, device=None, requires_grad=False)")                                                          \
  X(ZerosLike, "torch.zeros_like(input, *, dtype=None, device=None, requires_grad=False)")                                                          \
  X(FullLike, "torch.full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False)") \
  X(OnesLike, "torch.ones_like(input, *, dtype=None, device=None, requires_grad=False)")                                                            \
  X(NewZeros, "Tensor.new_zeros(input, *size, dtype=None, device=None, requires_grad=False)")       \
  X(NewOnes, "Tensor.new_ones(input, *size, dtype=None, device=None, requires_grad=False)")         \
  X(NewFull, "Tensor.new_full(input, size, fill_value, *, dtype=None, device=None, requires_grad=False)") \
  X(Arange, "torch.arange(*args, start=None, end=None, step=None, dtype=None, device=None, requires_grad=False)")                                                                 \
  X(Empty, "torch.empty(*size, dtype=None, device=None, requires_grad=False)")                     \
  X(EmptyLike, "torch.empty_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None)") \
  X(NewEmpty, "Tensor.new_empty(input, *size, dtype=None, device=None, requires_grad=False)")       \
  X(Bernoulli, "Tensor.bernoulli(input, p=None, *, generator=None)",                               \
    "torch.bernoulli(input, p=None, *, generator=None)")                                           \
  X(Rand, "torch.rand(*size, dtype=None, device=None, requires_grad=False)")                                                                     \
  X(Randn, "torch.randn(*size, dtype=None, device=None, requires_grad=False)")                                                                   \
  /* matrix products */                                                                            \
  X(Matmul, "torch.matmul(input, other)", "Tensor.matmul(input, other)",                           \
    "operator.matmul(input, other)", "Tensor.__matmul__(input, other)")                            \
  X(Mm, "torch.mm(input, mat2)", "Tensor.mm(input, mat2)", "torch.bmm(input, mat2)",               \
    "Tensor.bmm(input, mat2)")                                                                     \
  X(Addmm, "torch.addmm(input, mat1, mat2, *, beta=1, alpha=1)",                                   \
    "Tensor.addmm(input, mat1, mat2, *, beta=1, alpha=1)")                                         \
  X(Baddbmm, "torch.baddbmm(input, batch1, batch2, *, beta=1, alpha=1)",                          \
    "Tensor.baddbmm(input, batch1, batch2, *, beta=1, alpha=1)")                                   \
  X(Linear, "F.linear(input, weight, bias=None)")                                                  \
  X(Outer, "torch.outer(input, vec2)", "Tensor.outer(input, vec2)", "torch.ger(input, vec2)")      \
  X(Einsum, "torch.einsum(equation, *operands)")                                                   \
  /* nn */                                                                                         \
  X(Softmax, "torch.softmax(input, dim, dtype=None)", "Tensor.softmax(input, dim, dtype=None)",    \
    "F.softmax(input, dim=None, _stacklevel=3, dtype=None)")                                       \
  X(LogSoftmax, "torch.log_softmax(input, dim, dtype=None)",                                       \
    "Tensor.log_softmax(input, dim, dtype=None)",                                                  \
    "F.log_softmax(input, dim=None, _stacklevel=3, dtype=None)")                                   \
  X(LayerNorm, "F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05)")         \
  X(GroupNorm, "F.group_norm(input, num_groups, weight=None, bias=None, eps=1e-05)")               \
  X(RmsNorm, "F.rms_norm(input, normalized_shape, weight=None, eps=None)")                           \
  X(Normalize, "F.normalize(input, p=2.0, dim=1, eps=1e-12, out=None)")                             \
  X(AdaptiveAvgPool2d, "F.adaptive_avg_pool2d(input, output_size)")                                \
  X(AvgPool2d, "F.avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, "         \
               "count_include_pad=True, divisor_override=None)")                                   \
  X(MaxPool2d, "F.max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, "              \
               "ceil_mode=False, return_indices=False)")                                           \
  X(BatchNorm, "F.batch_norm(input, running_mean, running_var, weight=None, bias=None, "           \
               "training=False, momentum=0.1, eps=1e-05)")                                         \
  X(Dropout, "F.dropout(input, p=0.5, training=True, inplace=False)")                              \
  X(Embedding, "F.embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, "       \
               "scale_grad_by_freq=False, sparse=False)")                                          \
  X(ScaledDotProductAttention, "F.scaled_dot_product_attention(query, key, value, "                \
                               "attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, "   \
                               "enable_gqa=False)")                                                \
  /* losses */                                                                                     \
  X(MseLoss, "F.mse_loss(input, target, size_average=None, reduce=None, reduction='mean')")        \
  X(NllLoss, "F.nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, "       \
             "reduce=None, reduction='mean')")                                                     \
  X(CrossEntropy, "F.cross_entropy(input, target, weight=None, size_average=None, "                \
                  "ignore_index=-100, reduce=None, reduction='mean', label_smoothing=0.0)")

// One torch-level op kiln decomposes.
enum class TorchOp : int16_t {
#define KILN_TORCH_OP_ENUM(name, ...) name,
  KILN_TORCH_OPS(KILN_TORCH_OP_ENUM)
#undef KILN_TORCH_OP_ENUM
      kCount
};

// Returns the op's name, e.g. "Softmax".
const char* torch_op_name(TorchOp op);

// One parameter of a spelling's signature.
struct Param {
  std::string name;
  PyObject* default_value = nullptr;  // borrowed from the table; null: required
  bool keyword_only = false;
  bool varargs = false;  // *name: collects the remaining positionals
};

// A callable kiln decomposes: which op, and how its arguments bind.
struct OpSpelling {
  TorchOp op;
  std::string text;  // "F.softmax"
  std::vector<Param> params;
};

// Returns the op a callable is a spelling of, or null when kiln does not
// decompose it. The table is built on first use (the GIL held); lookups
// compare the callable's identity.
const OpSpelling* find_torch_op(PyObject* callable);

// A call's arguments bound to a spelling's parameters: for each parameter
// in order, the argument given (null: not given, use the default), and for a
// varargs parameter the positionals it collected.
struct BoundArgs {
  std::vector<const graph::Arg*> given;
  std::vector<const graph::Arg*> rest;  // varargs
};

// Binds `args` and `kwargs` as Python would. Returns false (with *why set)
// when they do not fit the signature (an unknown keyword, too many
// positionals, a required parameter missing).
bool bind_args(const OpSpelling& spelling, const std::vector<graph::Arg>& args,
               const std::vector<std::pair<std::string, graph::Arg>>& kwargs, BoundArgs* out,
               std::string* why);

}  // namespace kiln::prims
