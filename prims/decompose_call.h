// What a decomposition function sees: one torch-level call with its
// arguments bound to the spelling's parameters and read through typed
// accessors, the PrimBuilder to append prims with, and helpers several
// families share (dtype conversion, reductions, softmax).
#pragma once

#include <Python.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/py_ref.h"
#include "graph/graph.h"
#include "prims/prim_builder.h"
#include "prims/torch_ops.h"

namespace kiln::prims {

// Thrown by a decomposition for a call it does not handle (an argument form
// or option it does not model); the call stays an extern node.
class NotDecomposed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One torch-level call being decomposed.
class DecomposeCall {
 public:
  // `node_values[id]` are the prim values of traced node `id` (one per meta).
  DecomposeCall(PrimBuilder& builder, const graph::Graph& graph, const graph::Node& node,
                const prims::OpSpelling& spelling,
                const prims::BoundArgs& bound, const std::vector<std::vector<int>>& node_values);

  PrimBuilder& b;
  const graph::Node& node;

  // Throws NotDecomposed("<spelling>: <why>").
  [[noreturn]] void unsupported(const std::string& why) const;

  // True when the spelling has this parameter (F.relu has inplace, torch.relu not).
  bool has_param(const char* name) const;
  // The positionals a varargs parameter collected.
  const std::vector<const graph::Arg*>& rest() const { return bound_.rest; }
  // True when the parameter has a value other than None (given or default).
  bool given(const char* name) const;
  // True when the argument is a tensor of the graph.
  bool is_tensor(const char* name) const;
  // The prim value of a tensor argument.
  int tensor(const char* name) const;
  // A tensor or a Python number (bool, int, float, complex).
  PrimArg operand(const char* name) const;
  // A Python int (not bool).
  int64_t integer(const char* name) const;
  // An int, or nullopt for None.
  std::optional<int64_t> opt_integer(const char* name) const;
  // A Python int or float.
  double number(const char* name) const;
  // A Python bool.
  bool flag(const char* name) const;
  // A Python str.
  std::string text(const char* name) const;
  // A torch.dtype, or nullopt for None.
  std::optional<DType> dtype(const char* name) const;
  // An int or a sequence of ints; for the varargs parameter, its items (or
  // the one sequence given: x.view(2, 3) and x.view((2, 3)) alike).
  std::vector<int64_t> ints(const char* name) const;
  // A sequence of tensors; for the varargs parameter, its items (or the
  // one sequence given: einsum("ij,jk", a, b) and einsum("ij,jk", [a, b])).
  std::vector<int> tensors(const char* name) const;
  // The Python constant of an argument (given or default), or null when it
  // is not a constant (a tensor, or a container of graph values).
  PyObject* constant(const char* name) const;

  // The items of a tuple argument whose items are all constants (a tuple
  // constant, or a tuple the trace built from constants and lists of
  // constants, those made Python lists); false otherwise.
  bool constant_items(const char* name, std::vector<base::PyRef>* out) const;
  // As constant_items, where items may also be tensors of the graph: their
  // prim values in `tensor_values` (a null PyRef in `out`), -1 beside the
  // other items.
  bool index_items(const char* name, std::vector<base::PyRef>* out, std::vector<int>* tensor_values) const;
  // An index's items: index_items' for a tuple, else the one constant
  // index (tensor_values -1); throws NotDecomposed for a computed one.
  void index_or_item(const char* name, std::vector<base::PyRef>* out, std::vector<int>* tensor_values) const;

  // The traced metadata of the call's i-th result.
  const graph::TensorMeta& traced(size_t i = 0) const;
  // The rank of a value.
  int64_t rank(int value) const { return static_cast<int64_t>(b.meta(value).sizes.size()); }

 private:
  // The argument bound to `name`: a graph::Arg, or its default (constant).
  struct Bound {
    const graph::Arg* arg = nullptr;
    PyObject* default_value = nullptr;
  };
  Bound lookup(const char* name) const;
  int node_value(int node_id) const;
  int64_t int_of(PyObject* obj, const char* name) const;
  std::vector<int64_t> ints_of(const graph::Arg& arg, const char* name) const;

  const graph::Graph& graph_;
  const prims::OpSpelling& spelling_;
  const prims::BoundArgs& bound_;
  const std::vector<std::vector<int>>& node_values_;
};

// Helpers the decomposition families share.

// `value` converted to `dtype` (itself when it already has it).
int to_dtype(PrimBuilder& b, int value, DType dtype);
// The dtype low-precision floats compute in (float16/bfloat16 -> float32).
DType opmath_dtype(DType dtype);
// Every dim of a rank, for reductions over all dims.
std::vector<int64_t> all_dims(int64_t rank);
// The product of the sizes of `dims` (wrapped) of `value`.
int64_t count_of(PrimBuilder& b, int value, const std::vector<int64_t>& dims);
// mean over dims (empty: all), computed in the input's dtype.
int mean(PrimBuilder& b, int value, std::vector<int64_t> dims, bool keepdim);
// softmax or log_softmax over one dim, in the input's dtype.
int softmax(PrimBuilder& b, int value, int64_t dim, bool log);
// `value` laid out as torch laid out the traced result `traced` (dense, in
// any dim order): itself where the strides agree, else a copy (a clone in
// the traced memory format, or a clone of a permute into the traced dim
// order, permuted back).
int in_traced_layout(PrimBuilder& b, int value, const graph::TensorMeta& traced);
// a * scalar, skipping multiplication by 1.
int scale(PrimBuilder& b, int value, double factor);
// The vector norm of order `ord` of a DecomposeCall argument: 2 from None or
// "fro" (with at most two dims), else the number; nullopt for orders the
// norm decompositions do not model (infinities, 0, others, "nuc").
std::optional<double> norm_order(DecomposeCall& c, const char* name, size_t dims);
// The 1- or 2-norm over dims (empty: all), computed and returned in the
// input's compute dtype (opmath_dtype); a 2-norm's gradient is 0 where the
// norm is 0, as torch's (not sqrt's NaN).
int vector_norm(PrimBuilder& b, int value, double ord, std::vector<int64_t> dims, bool keepdim);

}  // namespace kiln::prims
