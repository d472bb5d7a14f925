// Decompositions of nn ops: softmax, log_softmax, layer_norm, batch_norm
// (eval and train, see Note [Batch norm running statistics]), dropout,
// embedding and scaled_dot_product_attention.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "prims/common_meta.h"
#include "prims/decompositions.h"
#include "prims/layout.h"
#include "base/log.h"
#include "base/py_ref.h"
#include "base/torch_api.h"

namespace kiln::prims {
namespace {

PrimArg v(int id) { return PrimArg::of_value(id); }
PrimArg f(double x) { return PrimArg::of_scalar(Scalar::of_float(x)); }

std::vector<int> softmax_call(DecomposeCall& c, bool log) {
  if (!c.given("dim")) c.unsupported("softmax without dim");
  int x = c.tensor("input");
  if (auto dtype = c.dtype("dtype")) x = to_dtype(c.b, x, *dtype);
  if (!is_floating(c.b.meta(x).dtype)) c.unsupported("softmax of a non-floating tensor");
  // torch's kernels write a contiguous result for an input that is not
  // (Longformer's softmax over a permuted score view); the copy is the
  // kernel's own store.
  return {in_traced_layout(c.b, softmax(c.b, x, c.integer("dim"), log), c.traced(0))};
}

// A per-channel vector [C] viewed as [1, C, 1, ...] against a rank-`rank` input.
int per_channel(PrimBuilder& b, int vec, int64_t rank) {
  std::vector<int64_t> sizes(rank, 1);
  sizes[1] = b.meta(vec).sizes.at(0);
  return b.reshape(vec, sizes);
}

// The last dims of `input` that normalized_shape names (layer_norm, rms_norm).
std::vector<int64_t> normalized_dims(DecomposeCall& c, int input) {
  const int64_t rank = c.rank(input);
  const int64_t k = static_cast<int64_t>(c.ints("normalized_shape").size());
  if (k == 0 || k > rank) c.unsupported("normalized_shape rank");
  std::vector<int64_t> dims;
  for (int64_t d = rank - k; d < rank; ++d) dims.push_back(d);
  return dims;
}

// Tensor.copy_, the extern that writes running statistics back.
PyObject* tensor_copy_() {
  static PyObject* fn = [] {
    PyObject* torch = PyImport_ImportModule("torch");
    PyObject* tensor = torch ? PyObject_GetAttrString(torch, "Tensor") : nullptr;
    PyObject* copy = tensor ? PyObject_GetAttrString(tensor, "copy_") : nullptr;
    Py_XDECREF(tensor);
    Py_XDECREF(torch);
    return copy;  // kept for the process
  }();
  return fn;
}

// running = (1 - momentum) * running + momentum * batch, written in place.
void update_running(PrimBuilder& b, int running, int batch, double momentum) {
  PyObject* copy = tensor_copy_();
  if (!copy) throw NotDecomposed("batch_norm: Tensor.copy_ not found");
  const DType dtype = b.meta(running).dtype;
  const int old_part = b.binary(Prim::Mul, v(running), f(1 - momentum));
  const int new_part = b.binary(Prim::Mul, v(to_dtype(b, batch, dtype)), f(momentum));
  const int updated = to_dtype(b, b.binary(Prim::Add, v(new_part), v(old_part)), dtype);
  b.extern_call(copy, "Tensor.copy_", {graph::Arg::of_node(running), graph::Arg::of_node(updated)}, {},
                {b.meta(running)});
}

}  // namespace

std::vector<int> decompose_Softmax(DecomposeCall& c) { return softmax_call(c, false); }
std::vector<int> decompose_LogSoftmax(DecomposeCall& c) { return softmax_call(c, true); }

// layer_norm: (x - mean) / sqrt(var + eps) over the last dims, then the
// affine weight and bias; low-precision inputs compute in float32 as torch does.
std::vector<int> decompose_LayerNorm(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int input = c.tensor("input");
  const DType dtype = b.meta(input).dtype;
  if (!is_floating(dtype)) c.unsupported("layer_norm of a non-floating tensor");
  const std::vector<int64_t> dims = normalized_dims(c, input);
  // Note [Layer norm over strided rows]
  // On the GPU, rows strided in memory (ConvNeXt's LayerNorm over a permuted
  // NCHW tensor) make kiln's kernel read along the tile dim and store the
  // contiguous result along the rows, uncoalesced (a 56x56x96 stage's norm:
  // 181 us on the H100). Without gradients the rows are first copied
  // contiguous by torch, as torch's own layer_norm does (tv ConvNeXt-tiny
  // inference 6.17 -> 5.18 ms; torch's whole call: 6.07). With gradients the
  // strided kernel stays: its backward fuses with its neighbours, where the
  // copy's extern gradient and torch's call (rerun in the backward) cost
  // more (timm ConvNeXt-tiny training 20.4 ms, copy 24.8, torch's call 27.8;
  // one H100, docs/perf.md).
  int rows = input;
  const graph::TensorMeta& in = b.meta(input);
  if (in.device_type == graph::DeviceType::CUDA && !in.requires_grad && in.strides.back() != 1 && in.sizes.back() > 1) {
    static PyObject* contiguous = PyObject_GetAttrString(base::torch_api()->tensor_type, "contiguous");
    if (!contiguous) c.unsupported("torch.Tensor.contiguous is missing");
    graph::TensorMeta copied = in;
    copied.strides = graph::contiguous_strides(copied.sizes);
    rows = b.extern_call(contiguous, "Tensor.contiguous", {graph::Arg::of_node(input)}, {}, {copied},
                         /*pure=*/true, /*fresh=*/true)[0];
  }
  const int x = to_dtype(b, rows, opmath_dtype(dtype));
  auto [var, mean] = b.var_mean(x, dims, 0, true);
  const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), f(c.number("eps"))));
  int out = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(x), v(mean))), v(rstd));
  if (c.given("weight")) out = b.binary(Prim::Mul, v(out), v(c.tensor("weight")));
  if (c.given("bias")) out = b.binary(Prim::Add, v(out), v(c.tensor("bias")));
  out = to_dtype(b, out, dtype);
  // torch normalizes a contiguous copy of its input and returns a contiguous
  // result whatever the input's layout (ConvNeXt's permuted NHWC views).
  const graph::TensorMeta& m = b.meta(out);
  if (!is_contiguous(m.sizes, m.strides)) out = b.clone(out, MemoryFormat::Contiguous);
  return {out};
}

// F.normalize: input / max(norm, eps), the norm in the input's dtype as
// torch computes it (Note [Norms as prims]).
std::vector<int> decompose_Normalize(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  if (c.given("out")) c.unsupported("out=");
  const int x = c.tensor("input");
  const DType dtype = b.meta(x).dtype;
  if (!is_floating(dtype)) c.unsupported("normalize of a non-floating tensor");
  std::vector<int64_t> dims = c.ints("dim");
  const std::optional<double> ord = norm_order(c, "p", dims.size());
  if (!ord) c.unsupported("normalize with an order other than 1 or 2");
  const int norm = to_dtype(b, vector_norm(b, x, *ord, std::move(dims), true), dtype);
  const int denominator = b.binary(Prim::Maximum, v(norm), f(c.number("eps")));
  return {b.binary(Prim::Div, v(x), v(denominator))};
}

// F.rms_norm: x * rsqrt(mean(x^2) + eps) * weight over the last dims, in
// float32 for 16-bit inputs and cast back to the input's dtype at the end,
// as torch's CPU kernel (bit-equal for bfloat16); eps defaults to the
// epsilon of the compute dtype.
std::vector<int> decompose_RmsNorm(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int input = c.tensor("input");
  const DType dtype = b.meta(input).dtype;
  if (!is_floating(dtype)) c.unsupported("rms_norm of a non-floating tensor");
  const std::vector<int64_t> dims = normalized_dims(c, input);
  const DType compute = opmath_dtype(dtype);
  const double eps = c.given("eps") ? c.number("eps")
                     : compute == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                 : std::numeric_limits<float>::epsilon();
  const int x = to_dtype(b, input, compute);
  const int mean_square = mean(b, b.binary(Prim::Mul, v(x), v(x)), dims, true);
  const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(mean_square), f(eps)));
  int out = b.binary(Prim::Mul, v(x), v(rstd));
  if (c.given("weight")) out = b.binary(Prim::Mul, v(out), v(to_dtype(b, c.tensor("weight"), compute)));
  return {to_dtype(b, out, dtype)};
}

// Note [Group norm and global pooling as prims]
// F.group_norm and F.adaptive_avg_pool2d(x, 1) were externs, so a training
// step's backward ran each again in Python to get its gradient (Note
// [Extern gradients]): a diffusers UNet's 21 group norms cost 2.4 ms of a
// 28 ms CPU training step that way, mobilenet_v3's ten squeeze-excitation
// pools 1.4 ms of 26. As prims they fuse with their neighbours and their
// gradients are kiln's, as torch.compile decomposes them. Group norm is a
// layer norm over each group of channels (statistics in float32 for
// 16-bit inputs, like torch's kernel), the affine per channel; global
// average pooling is the mean over the last two dims, which is what
// torch's adaptive_avg_pool2d itself computes for a 1x1 output (other
// output sizes stay torch's calls). A group norm of a non-contiguous input
// (a transposed attention output reshaped back to NCHW in diffusers' VAE)
// is computed over a contiguous copy.
std::vector<int> decompose_GroupNorm(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int input = c.tensor("input");
  const graph::TensorMeta in = b.meta(input);
  if (!is_floating(in.dtype)) c.unsupported("group_norm of a non-floating tensor");
  if (in.sizes.size() < 2) c.unsupported("group_norm of a tensor of rank below 2");

  const int64_t n = in.sizes[0], channels = in.sizes[1], groups = c.integer("num_groups");
  if (groups <= 0 || channels % groups != 0) c.unsupported("channels not divisible into groups");
  int64_t numel = 1;
  for (int64_t s : in.sizes) numel *= s;
  if (numel == 0) c.unsupported("group_norm of an empty tensor");
  const double eps = c.number("eps");
  const DType compute = opmath_dtype(in.dtype);
  int out;
  if (in.sizes.size() == 4 && !is_contiguous(in.sizes, in.strides) &&
      is_channels_last_contiguous(in.sizes, in.strides)) {
    // An NHWC input is normalized in its own memory order, [N, H*W, G,
    // C/G] over dims 1 and 3, so no kernel copies it to NCHW first; the
    // result stays channels-last (elementwise ops keep their input's
    // layout).
    const int64_t h = in.sizes[2], w = in.sizes[3];
    const int nhwc = b.permute(to_dtype(b, input, compute), {0, 2, 3, 1});
    const int x = b.reshape(nhwc, {n, h * w, groups, channels / groups});
    auto [var, mean] = b.var_mean(x, {1, 3}, 0, true);
    const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), f(eps)));
    const int normed = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(x), v(mean))), v(rstd));
    out = b.permute(b.reshape(normed, {n, h, w, channels}), {0, 3, 1, 2});
  } else {
    // Another non-contiguous input is read through a contiguous copy
    // (which the statistics' kernel reads in place).
    const int dense = is_contiguous(in.sizes, in.strides) ? input : b.clone(input, MemoryFormat::Contiguous);
    const int x = b.reshape(to_dtype(b, dense, compute), {n, groups, numel / (n * groups)});
    auto [var, mean] = b.var_mean(x, {2}, 0, true);
    const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), f(eps)));
    out = b.reshape(b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(x), v(mean))), v(rstd)), in.sizes);
  }
  std::vector<int64_t> per_channel(in.sizes.size(), 1);
  per_channel[1] = channels;
  if (c.given("weight")) out = b.binary(Prim::Mul, v(out), v(b.reshape(c.tensor("weight"), per_channel)));
  if (c.given("bias")) out = b.binary(Prim::Add, v(out), v(b.reshape(c.tensor("bias"), per_channel)));
  // The traced layout: channels-last on the CPU for an NHWC input, else
  // contiguous (Note [Meta layouts]).
  return {in_traced_layout(b, to_dtype(b, out, in.dtype), c.traced(0))};
}

std::vector<int> decompose_AdaptiveAvgPool2d(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int input = c.tensor("input");
  const DType dtype = b.meta(input).dtype;
  const int64_t rank = c.rank(input);
  if (!is_floating(dtype) || (rank != 3 && rank != 4)) c.unsupported("adaptive_avg_pool2d input rank or dtype");
  for (int64_t s : c.ints("output_size")) {
    if (s != 1) c.unsupported("an output size other than 1");
  }
  const int x = to_dtype(b, input, opmath_dtype(dtype));
  return {to_dtype(b, mean(b, x, {rank - 2, rank - 1}, true), dtype)};
}

// Note [Batch norm running statistics]
// In eval mode batch_norm reads running_mean/running_var. In training mode
// it normalizes with the batch's statistics and, like torch, updates the
// running buffers in place: the new values are computed with prims and
// written back by an extern Tensor.copy_ on the buffer (a graph input), so
// the mutation happens at the op's position in the graph and is visible to
// the caller exactly as in eager mode. momentum=None (a cumulative average
// driven by num_batches_tracked) stays an extern.
std::vector<int> decompose_BatchNorm(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int input = c.tensor("input");
  const DType dtype = b.meta(input).dtype;
  const int64_t rank = c.rank(input);
  if (rank < 2 || !is_floating(dtype)) c.unsupported("batch_norm input rank or dtype");
  const int x = to_dtype(b, input, opmath_dtype(dtype));
  const bool training = c.flag("training");
  const double eps = c.number("eps");
  int mean, var;
  if (training) {
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
    const int64_t count = count_of(b, x, dims);
    std::tie(var, mean) = b.var_mean(x, dims, 0, false);
    if (c.given("running_mean") || c.given("running_var")) {
      if (!c.given("momentum")) c.unsupported("momentum=None (cumulative average)");
      if (count < 2) c.unsupported("one value per channel");
      const double momentum = c.number("momentum");
      if (c.given("running_mean")) update_running(b, c.tensor("running_mean"), mean, momentum);
      if (c.given("running_var")) {
        const int unbiased = b.binary(Prim::Mul, v(var), f(static_cast<double>(count) / (count - 1)));
        update_running(b, c.tensor("running_var"), unbiased, momentum);
      }
    }
  } else {
    if (!c.given("running_mean") || !c.given("running_var")) c.unsupported("eval without running stats");
    mean = c.tensor("running_mean");
    var = c.tensor("running_var");
  }
  const int invstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(per_channel(b, var, rank)), f(eps)));
  int out = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(x), v(per_channel(b, mean, rank)))), v(invstd));
  if (c.given("weight")) out = b.binary(Prim::Mul, v(out), v(per_channel(b, c.tensor("weight"), rank)));
  if (c.given("bias")) out = b.binary(Prim::Add, v(out), v(per_channel(b, c.tensor("bias"), rank)));
  return {to_dtype(b, out, dtype)};
}

// dropout: x * (mask / (1 - p)), the mask drawn by bernoulli(1 - p) from
// torch's generator (deterministic under torch.manual_seed, though not the
// same numbers as eager's dropout kernel).
namespace {

// x with each element zeroed with probability p, the rest scaled by 1 / (1 - p).
int dropout(DecomposeCall& c, int x, double p) {
  const graph::TensorMeta& m = c.b.meta(x);
  if (!is_floating(m.dtype)) c.unsupported("dropout of a non-floating tensor");
  if (p == 1) return c.b.binary(Prim::Mul, v(x), f(0));
  const int keep = c.b.full(m.sizes, Scalar::of_float(1 - p), m.dtype,
                            Placement{m.device_type, m.device_index, false});
  const int mask = c.b.bernoulli(keep);
  const int scaled = c.b.binary(Prim::Div, v(mask), f(1 - p));
  return c.b.binary(Prim::Mul, v(x), v(scaled));
}

}  // namespace

std::vector<int> decompose_Dropout(DecomposeCall& c) {
  if (c.flag("inplace")) c.unsupported("inplace=True");
  const int x = c.tensor("input");
  const double p = c.number("p");
  if (!c.flag("training") || p == 0) return {x};  // torch returns the input itself
  return {dropout(c, x, p)};
}

// embedding(idx, W) = W.index_select(0, idx.flatten()).view(*idx.shape, D).
std::vector<int> decompose_Embedding(DecomposeCall& c) {
  if (c.given("max_norm")) c.unsupported("max_norm renormalizes the weight in place");
  const int idx = c.tensor("input");
  const int weight = c.tensor("weight");
  if (c.rank(weight) != 2) c.unsupported("weight is not 2-d");
  std::vector<int64_t> sizes = c.b.meta(idx).sizes;
  sizes.push_back(c.b.meta(weight).sizes[1]);
  const int rows = c.b.index_select(weight, 0, c.b.reshape(idx, {-1}));
  return {c.b.reshape(rows, sizes)};
}

namespace {

// The call kept as torch's attention (Note [Attention on the GPU]). Its
// fused kernels take a mask only with unit stride along keys: a broadcast
// mask (a padding mask expanded over queries, stride 0) would send torch to
// its math backend, which writes the score matrix in float32. Such a mask
// is made contiguous first, as a buffer the graph computes.
std::vector<int> attention_call(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  std::vector<graph::Arg> args = {graph::Arg::of_node(c.tensor("query")), graph::Arg::of_node(c.tensor("key")),
                                  graph::Arg::of_node(c.tensor("value"))};
  std::vector<std::pair<std::string, graph::Arg>> kwargs;
  if (c.given("attn_mask")) {
    int mask = c.tensor("attn_mask");
    const graph::TensorMeta& m = b.meta(mask);
    if (!is_contiguous(m.sizes, m.strides)) mask = b.clone(mask, MemoryFormat::Contiguous);
    kwargs.emplace_back("attn_mask", graph::Arg::of_node(mask));
  }
  for (const char* name : {"dropout_p", "is_causal", "scale", "enable_gqa"}) {
    if (!c.has_param(name) || !c.given(name)) continue;
    PyObject* constant = c.constant(name);
    if (!constant) c.unsupported(std::string(name) + " is not a constant");
    kwargs.emplace_back(name, graph::Arg::of_constant(constant));
  }
  return b.extern_call(c.node.target, c.node.target_name, std::move(args), std::move(kwargs), {c.traced(0)},
                       /*pure=*/true);
}

// (sizes, strides, dtype name, requires_grad, device) of a value, as
// kiln._attention.backend and layouts read it; `contiguous` describes the
// contiguous copy attention_call would pass instead.
PyObject* operand_description(PrimBuilder& b, int value, bool contiguous) {
  const graph::TensorMeta& m = b.meta(value);
  const std::vector<int64_t> strides = contiguous ? graph::contiguous_strides(m.sizes) : m.strides;
  auto tuple_of = [](const std::vector<int64_t>& ints) {
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(ints.size()));
    for (size_t i = 0; t && i < ints.size(); ++i) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(ints[i]));
    return t;
  };
  const std::string device = m.device_type == graph::DeviceType::CUDA
                                 ? "cuda:" + std::to_string(m.device_index < 0 ? 0 : m.device_index)
                                 : graph::device_name(m.device_type, m.device_index);
  return Py_BuildValue("(NNsOs)", tuple_of(m.sizes), tuple_of(strides), graph::dtype_name(m.dtype),
                       m.requires_grad ? Py_True : Py_False, device.c_str());
}

// kiln._attention's function `name`, imported on first use and kept for the
// process; null (no error set) when it cannot be imported.
PyObject* attention_helper(const char* name) {
  base::PyRef module = base::PyRef::steal(PyImport_ImportModule("kiln._attention"));
  PyObject* fn = module ? PyObject_GetAttrString(module.get(), name) : nullptr;
  PyErr_Clear();
  return fn;
}

// torch.nn.attention.SDPBackend values kiln tells apart.
constexpr long kUnknownBackend = -2;  // torch could not be asked: keep its call
constexpr long kMathBackend = 0;
constexpr long kFlashBackend = 1;
constexpr long kEfficientBackend = 2;
constexpr long kCudnnBackend = 3;

// The backend torch would run this attention call with
// (kiln._attention.backend), for the mask as attention_call passes it;
// kUnknownBackend when it cannot tell.
long torch_attention_backend(DecomposeCall& c) {
  static PyObject* backend = attention_helper("backend");
  if (!backend) return kUnknownBackend;
  PrimBuilder& b = c.b;
  base::PyRef mask;
  if (c.given("attn_mask")) {
    const int m = c.tensor("attn_mask");
    mask = base::PyRef::steal(operand_description(b, m, !is_contiguous(b.meta(m).sizes, b.meta(m).strides)));
  } else {
    mask = base::PyRef::borrow(Py_None);
  }
  base::PyRef scale = base::PyRef::borrow(c.given("scale") ? c.constant("scale") : Py_None);
  if (!scale) scale = base::PyRef::borrow(Py_None);
  const bool gqa = c.has_param("enable_gqa") && c.given("enable_gqa") && c.flag("enable_gqa");
  base::PyRef result = base::PyRef::steal(PyObject_CallFunction(
      backend, "NNNOdOOO", operand_description(b, c.tensor("query"), false),
      operand_description(b, c.tensor("key"), false), operand_description(b, c.tensor("value"), false), mask.get(),
      c.number("dropout_p"), c.flag("is_causal") ? Py_True : Py_False, scale.get(), gqa ? Py_True : Py_False));
  const long choice = result ? PyLong_AsLong(result.get()) : kUnknownBackend;
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return kUnknownBackend;
  }
  return choice;
}

// The metas of kiln._attention.attention's outputs for these operands
// (kiln._attention.layouts runs the kernels once; every output is on the
// query's device), or nothing, with `why`, where it cannot give them.
std::optional<std::vector<graph::TensorMeta>> fused_attention_metas(PrimBuilder& b, int q, int k, int value,
                                                                    int mask, long backend, bool causal,
                                                                    PyObject* scale, bool with_lse,
                                                                    std::string& why) {
  static PyObject* layouts = attention_helper("layouts");
  if (!layouts) return std::nullopt;
  base::PyRef mask_desc = mask >= 0 ? base::PyRef::steal(operand_description(b, mask, false))
                                       : base::PyRef::borrow(Py_None);
  base::PyRef found = base::PyRef::steal(PyObject_CallFunction(
      layouts, "NNNOlOOO", operand_description(b, q, false), operand_description(b, k, false),
      operand_description(b, value, false), mask_desc.get(), backend, causal ? Py_True : Py_False, scale,
      with_lse ? Py_True : Py_False));
  if (!found || !PyList_Check(found.get())) {
    PyErr_Clear();
    if (found && PyUnicode_Check(found.get())) why = PyUnicode_AsUTF8(found.get());
    return std::nullopt;
  }
  std::vector<graph::TensorMeta> metas;
  const Py_ssize_t count = PyList_GET_SIZE(found.get());
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* sizes = nullptr;
    PyObject* strides = nullptr;
    const char* dtype = nullptr;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(found.get(), i), "O!O!s", &PyTuple_Type, &sizes, &PyTuple_Type, &strides,
                          &dtype)) {
      PyErr_Clear();
      return std::nullopt;
    }
    auto ints = [](PyObject* tuple) {
      std::vector<int64_t> out;
      for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(tuple); ++d) out.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, d)));
      return out;
    };
    graph::TensorMeta meta = b.meta(q);
    meta.sizes = ints(sizes);
    meta.strides = ints(strides);
    meta.dtype = graph::dtype_from_name(dtype);
    meta.requires_grad = false;
    metas.push_back(std::move(meta));
  }
  if (PyErr_Occurred() || metas.empty()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return metas;
}

// `mask` as the fused kernels take it: contiguous, and a boolean one made
// additive in the query's dtype, `masked_out` where it is false (torch's
// call does the same conversion). With `aligned_rows` (the
// memory-efficient kernel: Note [Attention bias alignment] in
// runtime/aten_calls.cpp) rows of a length that is not a multiple of 16
// are padded to one and read through a slice: the padding is a cat with
// a fill that the kernel converting a boolean mask reads, so that kernel
// writes the padded rows and no call pads them again.
int additive_mask(PrimBuilder& b, int mask, double masked_out, DType query_dtype, bool aligned_rows) {
  // Copied before the graph grows (a reference into its values would not
  // survive a new node).
  const graph::TensorMeta meta = b.meta(mask);
  if (!is_contiguous(meta.sizes, meta.strides)) mask = b.clone(mask, MemoryFormat::Contiguous);
  const int rank = static_cast<int>(meta.sizes.size());
  const int64_t keys = rank > 0 ? meta.sizes.back() : 0;
  const bool pad = aligned_rows && rank >= 2 && keys % 16 != 0;
  if (pad) {
    std::vector<int64_t> fill_sizes = meta.sizes;
    fill_sizes.back() = 16 - keys % 16;
    const Placement where{meta.device_type, meta.device_index, false};
    const int fill = b.full(fill_sizes, Scalar::of_int(0), meta.dtype, where);
    mask = b.cat({mask, fill}, rank - 1);
  }
  if (meta.dtype == DType::Bool) mask = b.convert(b.where(mask, f(0), f(masked_out)), query_dtype);
  if (pad) mask = b.slice(mask, rank - 1, 0, keys);
  return mask;
}

// The call's output through kiln._attention.attention with these operands
// and output metas (the first needs a gradient when `with_lse`), or -1 when
// the helper cannot be imported. The trace ran torch's attention on meta
// tensors, whose kernels give the output contiguous where the fused
// kernels give it in the query's dim order; later views were traced
// against the contiguous one, so it is copied (the copy fuses with the
// transpose-and-merge that usually follows).
int attention_output(DecomposeCall& c, int q, int k, int value, int mask, long backend, bool causal, PyObject* scale,
                     bool with_lse, const std::vector<graph::TensorMeta>& metas) {
  PrimBuilder& b = c.b;
  static PyObject* attention = attention_helper("attention");
  if (!attention) return -1;
  std::vector<graph::TensorMeta> made = metas;
  made[0].requires_grad = with_lse;
  base::PyRef backend_id = base::PyRef::steal(PyLong_FromLong(backend));
  std::vector<graph::Arg> args = {graph::Arg::of_node(q), graph::Arg::of_node(k), graph::Arg::of_node(value),
                                  mask >= 0 ? graph::Arg::of_node(mask) : graph::Arg::of_constant(Py_None),
                                  graph::Arg::of_constant(backend_id.get()),
                                  graph::Arg::of_constant(causal ? Py_True : Py_False),
                                  graph::Arg::of_constant(scale),
                                  graph::Arg::of_constant(with_lse ? Py_True : Py_False)};
  const int out = b.extern_call(attention, kAttentionExtern, std::move(args), {}, made, /*pure=*/true,
                                /*fresh=*/true)[0];
  const graph::TensorMeta& traced = c.traced(0);
  if (is_contiguous(traced.sizes, traced.strides) && !is_contiguous(b.meta(out).sizes, b.meta(out).strides)) {
    return b.clone(out, MemoryFormat::Contiguous);
  }
  return out;
}

// Note [CPU flash attention with gradients]
// On the CPU torch runs attention with gradients through its flash kernel
// (at::_scaled_dot_product_flash_attention_for_cpu), which returns the
// logsumexp its backward kernel reads. Kept as F.scaled_dot_product_attention,
// the gradient ran the attention forward again and built an autograd graph
// around it in the backward (Note [Extern gradients]): 150 us of a 2.2 ms
// Llama training step per layer on the dev machine. So a CPU call with
// gradients calls the kernel itself (kiln._attention.attention: output and
// logsumexp) and its backward kernel from `attention.kiln_vjp`, as the GPU
// does (Note [Fused attention kernels]). A boolean mask becomes the
// additive 0/-inf mask torch's call would make (the kernel takes a mask of
// the query's dtype only), and grouped heads are repeated in the graph as
// torch's call repeats them (results and gradients equal eager's bit for
// bit). Without gradients the call stays torch's (no logsumexp to keep);
// a mask that needs a gradient stays torch's too.
std::optional<std::vector<int>> cpu_flash_attention_call(DecomposeCall& c, long backend, std::string& why) {
  PrimBuilder& b = c.b;
  const int q = c.tensor("query");
  int k = c.tensor("key"), value = c.tensor("value");
  const bool with_lse = b.meta(q).requires_grad || b.meta(k).requires_grad || b.meta(value).requires_grad;
  if (backend != kFlashBackend || !with_lse || c.number("dropout_p") != 0) {
    why = "torch's fused CPU kernel (kept for calls without gradients or with dropout)";
    return std::nullopt;
  }
  PyObject* scale = c.given("scale") ? c.constant("scale") : Py_None;
  if (!scale) {
    why = "scale is not a constant";
    return std::nullopt;
  }
  const DType query_dtype = b.meta(q).dtype;
  int mask = -1;
  if (c.given("attn_mask")) {
    mask = c.tensor("attn_mask");
    const bool mask_grad = b.meta(mask).requires_grad;
    const DType mask_dtype = b.meta(mask).dtype;
    if (mask_grad || (mask_dtype != DType::Bool && mask_dtype != query_dtype)) {
      why = mask_grad ? "the mask needs a gradient" : "a mask of another dtype than the query's";
      return std::nullopt;
    }
  }
  // Nodes made from here on are dropped again if the call stays torch's.
  const size_t start = b.graph().nodes().size();
  auto back_out = [&](const std::string& reason) {
    b.graph().truncate(start);
    why = reason;
    return std::nullopt;
  };
  if (mask >= 0) mask = additive_mask(b, mask, -std::numeric_limits<double>::infinity(), query_dtype, false);
  if (c.has_param("enable_gqa") && c.given("enable_gqa") && c.flag("enable_gqa")) {
    // Grouped heads: torch's call repeats each key/value head for its
    // group of query heads (repeat_interleave) before the kernel; so does
    // the graph, whose gradient sums the repeats back.
    const std::vector<int64_t>& qs = b.meta(q).sizes;
    const std::vector<int64_t>& ks = b.meta(k).sizes;
    if (qs.size() != 4 || ks.size() != 4 || ks[1] == 0 || qs[1] % ks[1] != 0) {
      return back_out("grouped heads other than 4-d operands with query heads a multiple of key heads");
    }
    const int64_t groups = qs[1] / ks[1];
    auto repeat_heads = [&](int t) {
      std::vector<int64_t> s = b.meta(t).sizes;
      const int wide = b.expand(b.unsqueeze(t, 2), {s[0], s[1], groups, s[2], s[3]});
      return b.reshape(wide, {s[0], s[1] * groups, s[2], s[3]});
    };
    k = repeat_heads(k);
    value = repeat_heads(value);
  }
  const bool causal = c.flag("is_causal");
  std::optional<std::vector<graph::TensorMeta>> metas =
      fused_attention_metas(b, q, k, value, mask, backend, causal, scale, /*with_lse=*/true, why);
  if (!metas || metas->size() != 2u) return back_out(why.empty() ? "kiln._attention gave no layouts" : why);
  const int out = attention_output(c, q, k, value, mask, backend, causal, scale, true, *metas);
  if (out < 0) return back_out("kiln._attention.attention cannot be imported");
  return std::vector<int>{out};
}

// Note [Fused attention kernels]
// Where torch would run cuDNN's, flash or memory-efficient attention (a
// decode step's one-row queries, where torch's per-call backend choice cost
// ~0.2 ms of host time on the H100, docs/perf.md session 21; or a mask that
// needs a gradient, as T5's learned position bias), the graph calls that
// kernel itself (kiln._attention.attention) rather than
// F.scaled_dot_product_attention. Two costs go: torch's call converted a
// boolean mask in every layer (where + two scalar_tensor launches, ~100 us
// of host time a call on the H100), which here is a where in the graph that
// kiln's kernels take (still one per layer: kiln has no CSE pass yet); and
// the gradient,
// which as an extern ran the attention forward again in the backward (GPT-2
// training: 12 more attention kernels and ~4 ms of host time a step). With
// gradients, the call also returns the logsumexp and RNG state its backward
// kernel reads; `attention.kiln_vjp` calls that kernel (Note [Extern
// gradients]). The outputs' and gradients' layouts come from running the
// kernels once at compile time (kiln._attention.layouts). Taken only as
// torch would run it: no dropout (its RNG offsets would differ from
// eager's), a mask that needs a gradient only through the memory-efficient
// kernel (the only one that gives it; summed back over the broadcast the
// kernel reads), the memory-efficient kernel with gradients only with a
// mask, grouped-query attention only through cuDNN (which reads the shared
// heads itself), head dims that flash takes unpadded; otherwise the call
// stays torch's (attention_call).
// Sets `why` when the call stays torch's.
std::optional<std::vector<int>> fused_attention_call(DecomposeCall& c, long backend, std::string& why) {
  PrimBuilder& b = c.b;
  const bool cpu = b.meta(c.tensor("query")).device_type == graph::DeviceType::CPU;
  if (cpu) return cpu_flash_attention_call(c, backend, why);
  if (backend != kCudnnBackend && backend != kFlashBackend && backend != kEfficientBackend) {
    why = "torch's backend " + std::to_string(backend) + " is none of cuDNN, flash and memory-efficient attention";
    return std::nullopt;
  }
  if (c.number("dropout_p") != 0) {
    why = "dropout";
    return std::nullopt;
  }
  const bool gqa = c.has_param("enable_gqa") && c.given("enable_gqa") && c.flag("enable_gqa");
  const int q = c.tensor("query"), k = c.tensor("key"), value = c.tensor("value");
  if (backend == kFlashBackend && (gqa || c.given("attn_mask") || b.meta(q).sizes.back() % 8 != 0)) {
    why = "flash attention with grouped heads, a mask or a head dim torch pads";
    return std::nullopt;
  }
  const bool mask_grad = c.given("attn_mask") && b.meta(c.tensor("attn_mask")).requires_grad;
  const bool with_lse =
      b.meta(q).requires_grad || b.meta(k).requires_grad || b.meta(value).requires_grad || mask_grad;
  // Memory-efficient attention's backward is called through its
  // scaled_dot_product entry, which takes a bias: with gradients, only a
  // call with a mask.
  if (backend == kEfficientBackend && (gqa || (with_lse && !c.given("attn_mask")) ||
                                       b.meta(q).sizes.size() != 4 || b.meta(q).sizes.back() % 8 != 0)) {
    why = "memory-efficient attention with gradients and no mask, grouped heads, other than 4-d operands or a "
          "head dim torch pads";
    return std::nullopt;
  }
  int mask = -1;
  if (c.given("attn_mask")) {
    mask = c.tensor("attn_mask");
    if (mask_grad && backend != kEfficientBackend) {
      why = "the mask needs a gradient, which only the memory-efficient kernel gives";
      return std::nullopt;
    }
    // torch's cuDNN path adds 0 where the mask is true, -65504 elsewhere,
    // in the query's dtype; its memory-efficient path -inf.
    const double masked_out = backend == kEfficientBackend ? -std::numeric_limits<double>::infinity() : -65504.0;
    mask = additive_mask(b, mask, masked_out, b.meta(q).dtype, backend == kEfficientBackend);
  }
  PyObject* scale = c.given("scale") ? c.constant("scale") : Py_None;
  if (!scale) {
    why = "scale is not a constant";
    return std::nullopt;
  }
  const bool causal = c.flag("is_causal");
  std::optional<std::vector<graph::TensorMeta>> metas =
      fused_attention_metas(b, q, k, value, mask, backend, causal, scale, with_lse, why);
  const size_t outputs = !with_lse ? 1u : backend == kEfficientBackend ? 2u : 4u;
  if (!metas || metas->size() != outputs) {
    if (why.empty()) why = "kiln._attention gave no layouts";
    return std::nullopt;
  }
  const int out = attention_output(c, q, k, value, mask, backend, causal, scale, with_lse, *metas);
  if (out < 0) {
    why = "kiln._attention.attention cannot be imported";
    return std::nullopt;
  }
  return std::vector<int>{out};
}

// softmax over the last dim with rows that are all -inf giving zeros, not
// NaN: torch's math backend (at::_safe_softmax) does so. Such rows are
// zeroed before the softmax too, so no NaN reaches its gradient.
int safe_softmax(PrimBuilder& b, int scores) {
  const int max = b.reduce(Prim::Amax, scores, {-1}, true);
  b.graph().stop_grad(max);
  const int masked = b.binary(Prim::Eq, v(max), f(-std::numeric_limits<double>::infinity()));
  const int finite = b.where(masked, f(0), v(scores));
  return b.where(masked, f(0), v(softmax(b, finite, -1, false)));
}

}  // namespace

// dropout(softmax(q k^T * scale + mask)) v, with is_causal as a
// lower-triangular mask. On the GPU the call stays torch's where torch runs
// it fused (Note [Attention on the GPU]).
std::vector<int> decompose_ScaledDotProductAttention(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  // Note [Attention on the GPU]
  // torch's CUDA attention (flash, cuDNN, memory-efficient) never writes the
  // L x S score matrix and runs as one kernel; the decomposition writes it,
  // reads it back for the softmax and again for the second matmul, and on
  // the zoo's transformers that made whole models slower than eager
  // (docs/perf.md). The call stays an extern there: kiln fuses the work
  // around it, and its gradient comes from torch's own attention backward
  // (Note [Extern gradients]). The same holds on the CPU, where torch runs
  // a flash kernel: the decomposed softmax over the scores cost GPT-2 (2
  // layers, 384 tokens) 11.8 ms a forward against 4.8 ms with the call
  // kept (torch.compile keeps it too). Where torch itself would run its math
  // backend (T5's training: a float position bias that needs a gradient,
  // with dropout), that backend is a dozen float32 calls (it upcasts 16-bit
  // operands) with float32 batched GEMMs; the decomposition does the same
  // work in the operands' dtype, its softmax, mask and dropout fused, as
  // torch.compile does. Which backend torch picks is asked of torch itself
  // (kiln._attention), for the operands' layouts and the backend flags in
  // effect at compile time.
  const graph::DeviceType device = b.meta(c.tensor("query")).device_type;
  const bool cuda = device == graph::DeviceType::CUDA;
  // Dropout in a graph that needs gradients: torch's call draws its mask
  // inside, and its gradient (Note [Extern gradients]) runs the call again,
  // drawing another mask: the gradients would belong to a different
  // dropout than the output. The decomposition draws the mask as a value
  // the backward reads.
  bool random_with_gradient = c.given("dropout_p") && c.number("dropout_p") > 0;
  if (random_with_gradient) {
    random_with_gradient = false;
    for (const char* operand : {"query", "key", "value"}) {
      random_with_gradient = random_with_gradient || b.meta(c.tensor(operand)).requires_grad;
    }
  }
  if (cuda && random_with_gradient) {
    KILN_LOG(prims, c.node.target_name << " (node %" << c.node.id
                                       << ") is decomposed: dropout with gradients needs its mask kept");
  }
  if ((cuda || device == graph::DeviceType::CPU) && !random_with_gradient) {
    // A CPU call torch cannot be asked about is decomposed as before; on
    // the GPU it stays torch's.
    const long backend = torch_attention_backend(c);
    if (backend != kMathBackend && (cuda || backend != kUnknownBackend)) {
      std::string why;  // Note [Fused attention kernels], Note [CPU flash attention with gradients]
      if (std::optional<std::vector<int>> fused = fused_attention_call(c, backend, why)) return *fused;
      KILN_LOG(prims, c.node.target_name << " (node %" << c.node.id << ") stays torch's call: " << why);
      return attention_call(c);
    }
  }
  if (c.has_param("enable_gqa") && c.given("enable_gqa") && c.flag("enable_gqa")) c.unsupported("enable_gqa=True");
  const double dropout_p = c.number("dropout_p");
  const int q = c.tensor("query"), k = c.tensor("key"), value = c.tensor("value");
  const auto& qs = b.meta(q).sizes;
  const auto& ks = b.meta(k).sizes;
  if (qs.size() < 2 || ks.size() < 2) c.unsupported("query or key below rank 2");
  const int64_t L = qs[qs.size() - 2], E = qs.back(), S = ks[ks.size() - 2];
  const double scale = c.given("scale") ? c.number("scale") : 1.0 / std::sqrt(static_cast<double>(E));
  std::vector<int64_t> perm = all_dims(c.rank(k));
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  int scores = b.binary(Prim::Mul, v(b.matmul(q, b.permute(k, perm))), f(scale));
  const PrimArg minus_inf = f(-std::numeric_limits<double>::infinity());
  if (c.flag("is_causal")) {
    if (c.given("attn_mask")) c.unsupported("attn_mask with is_causal");
    const Placement where{b.meta(q).device_type, b.meta(q).device_index, false};
    const int rows = b.unsqueeze(b.iota(L, 0, 1, DType::Int64, where), 1);
    const int cols = b.unsqueeze(b.iota(S, 0, 1, DType::Int64, where), 0);
    scores = b.where(b.binary(Prim::Le, v(cols), v(rows)), v(scores), minus_inf);
  } else if (c.given("attn_mask")) {
    const int mask = c.tensor("attn_mask");
    scores = b.meta(mask).dtype == DType::Bool ? b.where(mask, v(scores), minus_inf)
                                               : b.binary(Prim::Add, v(scores), v(mask));
  }
  // Only a mask can make a whole row -inf.
  int weights = c.given("attn_mask") ? safe_softmax(b, scores) : softmax(b, scores, -1, false);
  if (dropout_p != 0) weights = dropout(c, weights, dropout_p);
  return {b.matmul(weights, value)};
}

}  // namespace kiln::prims
