#include "runtime/aten_calls.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mm.h>
#include <torch/csrc/autograd/python_variable.h>

#include <stdexcept>
#include <string>

namespace kiln::runtime {
namespace {

// What torch's Python binding would say for `e`: a c10::Error's message
// without the C++ backtrace its what() appends.
const char* error_text(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  return error ? error->what_without_backtrace() : e.what();
}

// Note [Padded GEMM dims]
// cuBLAS runs its fast tensor-core kernels on 16-bit operands only when
// the matrices' leading dimensions are multiples of 8 elements. GPT-2's LM
// head ([4096, 768] @ [768, 50257], bf16) otherwise gets an align-1
// cutlass kernel: 3.3 ms on an H100 against 0.46 ms with the 50257 columns
// padded to 50264, and its two gradient products 2.5 and 2.2 ms against
// 0.41 (s15 probe; padding only the result's row stride kept the slow
// kernel). So a large CUDA product pads, with zeros, each of M, K, N that
// is the leading dimension of an operand or of the result as they are laid
// out, multiplies the padded operands (zero rows and columns add nothing),
// and gives back the M x N corner: copied contiguous when N was padded, a
// fresh non-view tensor over the padded rows when only M was. Outside
// autograd only (the copies here record no gradient): kiln's own graphs.

bool column_major(const at::Tensor& m) { return m.stride(0) == 1 && m.stride(1) != 1; }

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// `m` ([rows, cols]) copied into a buffer of [rows_to, cols_to] laid out
// in `m`'s order, the new rows and columns zero.
at::Tensor zero_padded(const at::Tensor& m, int64_t rows_to, int64_t cols_to) {
  if (rows_to == m.size(0) && cols_to == m.size(1)) return m;
  at::Tensor padded = column_major(m) ? at::empty({cols_to, rows_to}, m.options()).t()
                                      : at::empty({rows_to, cols_to}, m.options());
  padded.narrow(0, 0, m.size(0)).narrow(1, 0, m.size(1)).copy_(m);
  if (rows_to > m.size(0)) padded.narrow(0, m.size(0), rows_to - m.size(0)).zero_();
  if (cols_to > m.size(1)) padded.narrow(0, 0, m.size(0)).narrow(1, m.size(1), cols_to - m.size(1)).zero_();
  return padded;
}

// The element multiple to pad `a @ b` to, or 0 to run it as it is.
int64_t gemm_padding_multiple(const at::Tensor& a, const at::Tensor& b) {
  if (!a.is_cuda() || a.dim() != 2 || b.dim() != 2 || a.scalar_type() != b.scalar_type()) return 0;
  if (a.scalar_type() != c10::ScalarType::BFloat16 && a.scalar_type() != c10::ScalarType::Half) return 0;
  if (at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) return 0;
  // The copies cost about one pass over the operands; below ~2^28 multiply-
  // adds the slow kernel's loss is smaller than that.
  const double work = static_cast<double>(a.size(0)) * static_cast<double>(a.size(1)) * static_cast<double>(b.size(1));
  if (work < static_cast<double>(int64_t{1} << 28)) return 0;
  return 8;
}

at::Tensor matmul_with_padded_dims(const at::Tensor& a, const at::Tensor& b, int64_t multiple) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  auto aligned = [&](int64_t d) { return d % multiple == 0; };
  // The dims that are a leading dimension somewhere: the result's is N.
  const bool pad_m = !aligned(m) && column_major(a);
  const bool pad_k = !aligned(k) && (!column_major(a) || column_major(b));
  const bool pad_n = !aligned(n);
  if (!pad_m && !pad_k && !pad_n) return at::mm(a, b);
  const int64_t mp = pad_m ? round_up(m, multiple) : m;
  const int64_t kp = pad_k ? round_up(k, multiple) : k;
  const int64_t np = pad_n ? round_up(n, multiple) : n;
  at::Tensor product = at::mm(zero_padded(a, mp, kp), zero_padded(b, kp, np));
  if (pad_n) return product.narrow(0, 0, m).narrow(1, 0, n).contiguous();
  if (!pad_m) return product;
  at::Tensor rows = at::empty({0}, product.options());
  rows.set_(product.storage(), 0, {m, n}, {n, 1});
  return rows;
}

}  // namespace

PyObject* aten_matmul_with_padded_dims(PyObject* a, PyObject* b, int64_t multiple) {
  try {
    return THPVariable_Wrap(matmul_with_padded_dims(THPVariable_Unpack(a), THPVariable_Unpack(b), multiple));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, error_text(e));
    return nullptr;
  }
}

namespace {

// Runs `compute()` with the GIL released; false with a RuntimeError set
// (torch's message) when it throws.
template <typename Compute>
bool run_without_gil(Compute compute) {
  std::string error;
  Py_BEGIN_ALLOW_THREADS
  try {
    compute();
  } catch (const std::exception& e) {
    error = error_text(e);
  }
  Py_END_ALLOW_THREADS
  if (error.empty()) return true;
  PyErr_SetString(PyExc_RuntimeError, error.c_str());
  return false;
}

// `compute()`'s tensor wrapped for Python, computed with the GIL released;
// null with a RuntimeError set when torch raises.
template <typename Compute>
PyObject* wrap_without_gil(Compute compute) {
  at::Tensor result;
  if (!run_without_gil([&] { result = compute(); })) return nullptr;
  return THPVariable_Wrap(std::move(result));
}

}  // namespace

PyObject* aten_linear(PyObject* x, PyObject* w, PyObject* b) {
  const at::Tensor& input = THPVariable_Unpack(x);
  const at::Tensor& weight = THPVariable_Unpack(w);
  if (b == nullptr) {
    // The product the decomposition made, matmul(x, w^T), with its padding
    // of large 16-bit products (Note [Linear without a bias]).
    return wrap_without_gil([&] {
      const at::Tensor right = weight.t();
      const int64_t multiple = gemm_padding_multiple(input, right);
      return multiple ? matmul_with_padded_dims(input, right, multiple) : at::matmul(input, right);
    });
  }
  const at::Tensor& bias = THPVariable_Unpack(b);
  return wrap_without_gil([&] { return at::linear(input, weight, bias); });
}

PyObject* aten_matmul(PyObject* a, PyObject* b) {
  const at::Tensor& left = THPVariable_Unpack(a);
  const at::Tensor& right = THPVariable_Unpack(b);
  return wrap_without_gil([&] {
    const int64_t multiple = gemm_padding_multiple(left, right);
    return multiple ? matmul_with_padded_dims(left, right, multiple) : at::matmul(left, right);
  });
}

PyObject* aten_view(PyObject* x, const ViewCall& call) {
  const at::Tensor& t = THPVariable_Unpack(x);
  try {
    switch (call.op) {
      case ViewCall::Op::Reshape: return THPVariable_Wrap(t.reshape(call.ints));
      case ViewCall::Op::View: return THPVariable_Wrap(t.view(call.ints));
      case ViewCall::Op::Expand: return THPVariable_Wrap(t.expand(call.ints));
      case ViewCall::Op::Permute: return THPVariable_Wrap(t.permute(call.ints));
      case ViewCall::Op::Slice: {
        return THPVariable_Wrap(t.slice(call.dim, call.start, call.end, call.step));
      }
      case ViewCall::Op::Squeeze:
        return THPVariable_Wrap(call.ints.empty() ? t.squeeze() : t.squeeze(call.ints[0]));
      case ViewCall::Op::Unsqueeze: return THPVariable_Wrap(t.unsqueeze(call.dim));
      case ViewCall::Op::AsStrided: return THPVariable_Wrap(t.as_strided(call.ints, call.strides, call.offset));
    }
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "%s", error_text(e));
    return nullptr;
  }
  PyErr_SetString(PyExc_RuntimeError, "kiln: unknown view op");
  return nullptr;
}

PyObject* aten_fill_slices(PyObject* x, const std::vector<ViewCall>& slices, PyObject* value) {
  at::Tensor t = THPVariable_Unpack(x);
  const at::Scalar scalar = PyBool_Check(value)   ? at::Scalar(value == Py_True)
                            : PyLong_Check(value) ? at::Scalar(static_cast<int64_t>(PyLong_AsLongLong(value)))
                                                  : at::Scalar(PyFloat_AsDouble(value));
  if (PyErr_Occurred()) return nullptr;
  try {
    for (const ViewCall& slice : slices) t = t.slice(slice.dim, slice.start, slice.end, slice.step);
    t.fill_(scalar);
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "%s", error_text(e));
    return nullptr;
  }
  Py_RETURN_NONE;
}


PyObject* aten_cat(PyObject* const* tensors, size_t count, int64_t dim) {
  std::vector<at::Tensor> parts;
  parts.reserve(count);
  for (size_t i = 0; i < count; ++i) parts.push_back(THPVariable_Unpack(tensors[i]));
  return wrap_without_gil([&] { return at::cat(parts, dim); });
}

PyObject* aten_index_select(PyObject* x, int64_t dim, PyObject* index) {
  const at::Tensor& input = THPVariable_Unpack(x);
  const at::Tensor& indices = THPVariable_Unpack(index);
  return wrap_without_gil([&] { return at::index_select(input, dim, indices); });
}

PyObject* aten_index(PyObject* x, PyObject* const* indices, size_t count) {
  const at::Tensor& input = THPVariable_Unpack(x);
  c10::List<std::optional<at::Tensor>> list;
  list.reserve(count);
  for (size_t i = 0; i < count; ++i) list.push_back(THPVariable_Unpack(indices[i]));
  return wrap_without_gil([&] { return at::index(input, list); });
}

namespace {

// Note [Attention bias alignment]
// The memory-efficient kernel reads its additive bias with aligned vector
// loads: every stride but the last a multiple of 16 elements, the last 1.
// torch's own call pads a bias that is not so laid out (a copy and a fill
// a call); kiln's graphs lay the bias out aligned where they make it
// (prims/decompose_nn.cpp), so this pad is the fallback for other layouts.
// kiln._attention.attention applies the same rule.
at::Tensor efficient_bias(const at::Tensor& mask, const at::Tensor& query, const at::Tensor& key) {
  bool aligned = mask.dim() > 0 && mask.stride(-1) == 1;
  for (int64_t d = 0; aligned && d + 1 < mask.dim(); ++d) aligned = mask.stride(d) % 16 == 0;
  at::Tensor bias = mask;
  if (!aligned) {
    const int64_t last = mask.size(-1);
    bias = at::constant_pad_nd(mask, {0, 16 - last % 16}).slice(-1, 0, last);
  }
  return bias.expand({query.size(0), query.size(1), query.size(2), key.size(-2)});
}

// The backend ids of torch.nn.attention.SDPBackend kiln calls.
constexpr int kFlash = 1;
constexpr int kEfficient = 2;
constexpr int kCudnn = 3;

}  // namespace

PyObject* aten_attention(PyObject* query, PyObject* key, PyObject* value, PyObject* mask, const AttentionCall& call) {
  const at::Tensor& q = THPVariable_Unpack(query);
  const at::Tensor& k = THPVariable_Unpack(key);
  const at::Tensor& v = THPVariable_Unpack(value);
  std::optional<at::Tensor> bias;
  if (mask != Py_None) bias = THPVariable_Unpack(mask);
  std::vector<at::Tensor> results;
  const bool ran = run_without_gil([&] {
    if (q.device().is_cpu()) {
      auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, call.causal, bias, call.scale);
      results = {out, lse};
    } else if (call.backend == kEfficient) {
      if (bias) bias = efficient_bias(*bias, q, k);
      auto r = at::_scaled_dot_product_efficient_attention(q, k, v, bias, call.with_lse, 0.0, call.causal,
                                                           call.scale);
      results = {std::get<0>(r), std::get<1>(r)};  // no dropout: its RNG state is never read
    } else if (call.backend == kCudnn) {
      auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, bias, call.with_lse, 0.0, call.causal, false,
                                                       call.scale);
      results = {std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)};
    } else if (call.backend == kFlash) {
      auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, call.causal, false, call.scale);
      results = {std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)};
    } else {
      throw std::runtime_error("kiln: attention backend " + std::to_string(call.backend) +
                               " is none of flash, memory-efficient, cuDNN");
    }
  });
  if (!ran) return nullptr;
  if (!call.with_lse) return THPVariable_Wrap(std::move(results[0]));
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(results.size()));
  if (!tuple) return nullptr;
  for (size_t i = 0; i < results.size(); ++i) {
    PyObject* item = THPVariable_Wrap(std::move(results[i]));
    if (!item) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), item);
  }
  return tuple;
}

}  // namespace kiln::runtime
