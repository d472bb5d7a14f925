// The ops the prim executor runs through ATen from C++ rather than through
// their Python bindings (Note [Native views] in prim_executor.cpp): views,
// matmuls, linear layers, slice fills, cats, index_select, advanced indexing and torch's fused
// attention kernels. Each records autograd history as the Python call would.
// Only aten_calls.cpp includes ATen for them.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::runtime {

// at::matmul(a, b), computed with the GIL released; null with a
// RuntimeError set when torch raises. Preconditions: is_tensor(a), is_tensor(b).
PyObject* aten_matmul(PyObject* a, PyObject* b);

// at::linear(x, w, b) (torch.nn.functional.linear's op), computed with the
// GIL released; null with a RuntimeError set when torch raises. A null
// `b`: no bias, computed as aten_matmul(x, w^T) computes it. Preconditions:
// is_tensor of x, w and a non-null b.
PyObject* aten_linear(PyObject* x, PyObject* w, PyObject* b);

// a @ b of 2-d operands with each of M, K, N that is a leading dimension
// zero-padded to a multiple of `multiple` elements (Note [Padded GEMM
// dims]: aten_matmul takes this path for large 16-bit CUDA products), the
// result contiguous and not a view. Null with a RuntimeError set when torch
// raises. Preconditions: is_tensor(a), is_tensor(b), multiple > 0.
PyObject* aten_matmul_with_padded_dims(PyObject* a, PyObject* b, int64_t multiple);

// A view op the prim executor runs through ATen without Python (Note
// [Native views] in prim_executor.cpp).
struct ViewCall {
  enum class Op : uint8_t { Reshape, View, Expand, Permute, Slice, Squeeze, Unsqueeze, AsStrided };
  Op op = Op::View;
  std::vector<int64_t> ints;     // sizes (reshape, view, expand, as_strided); dims (permute, squeeze: 0 or 1)
  std::vector<int64_t> strides;  // as_strided
  int64_t dim = 0;               // slice, unsqueeze
  std::optional<int64_t> start;  // slice
  std::optional<int64_t> end;    // slice
  int64_t step = 1;              // slice
  int64_t offset = 0;            // as_strided
};

// `call` applied to `x` by ATen's op of that name (autograd records it as
// the Python call would); null with a RuntimeError set when torch raises.
// Precondition: is_tensor(x).
PyObject* aten_view(PyObject* x, const ViewCall& call);

// x[key] = value for a key of slices (the leading dims', in order) and a
// Python bool, int or float: ATen slice views, then fill_ (autograd
// records it as Python's setitem would). Py_None, or null with a
// RuntimeError set when torch raises. Preconditions: is_tensor(x), every
// call a Slice.
PyObject* aten_fill_slices(PyObject* x, const std::vector<ViewCall>& slices, PyObject* value);

// torch.cat(tensors, dim) of `count` tensors; null with a RuntimeError set
// when torch raises. Precondition: is_tensor of each.
PyObject* aten_cat(PyObject* const* tensors, size_t count, int64_t dim);

// torch.index_select(x, dim, index); null with a RuntimeError set when
// torch raises. Preconditions: is_tensor(x), is_tensor(index).
PyObject* aten_index_select(PyObject* x, int64_t dim, PyObject* index);

// x[indices] for a key of `count` index tensors (operator.getitem with a
// tuple of integer or boolean tensors of rank >= 1: at::index, advanced
// indexing); null with a RuntimeError set when torch raises.
// Preconditions: is_tensor of x and of each index.
PyObject* aten_index(PyObject* x, PyObject* const* indices, size_t count);

// How kiln._attention.attention calls torch's fused attention kernel
// (Note [Fused attention kernels] in prims/decompose_nn.cpp).
struct AttentionCall {
  int backend = 0;              // torch.nn.attention.SDPBackend: 1 flash, 2 memory-efficient, 3 cuDNN
  bool causal = false;
  std::optional<double> scale;  // None: 1/sqrt(head dim)
  bool with_lse = false;        // also the logsumexp (and RNG state) its backward reads
};

// kiln._attention.attention(query, key, value, mask, ...) from C++: the
// output tensor, or with `with_lse` the tuple the Python function returns;
// `mask` may be Py_None. Null with a RuntimeError set when torch raises.
// Preconditions: is_tensor of query, key, value and of mask unless None.
PyObject* aten_attention(PyObject* query, PyObject* key, PyObject* value, PyObject* mask, const AttentionCall& call);

}  // namespace kiln::runtime
