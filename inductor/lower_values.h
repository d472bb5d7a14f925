// Evaluating the prim values of a fusion group as kernel expressions at an
// iteration index: the machinery every lowering (lower_pointwise,
// lower_group) shares, and the facts about prims that fusion decisions need
// (which prims kernels compute, which views fold into indexing).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "inductor/kernel_ir.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// Thrown for a group a lowering cannot compute; the message names the node
// and why.
class LoweringError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A group's kernel and what to bind to it: kernel input i reads (through
// the kernel's strides and offset) the storage of prim value inputs[i];
// output i is prim value outputs[i].
struct LoweredKernel {
  Kernel kernel;
  std::vector<int> inputs;
  std::vector<int> outputs;
};

// True for an elementwise prim kernels compute (unary, binary, compare,
// where, convert_element_type) over dtypes they support.
bool is_elementwise(const prims::PrimGraph& graph, const prims::PrimNode& node);

// True for a reduction prim kernels compute (sum, prod, amax, amin,
// var_mean) over dtypes they support.
bool is_kernel_reduction(const prims::PrimGraph& graph, const prims::PrimNode& node);

// True for a view prim that may fold into a kernel's indexing.
bool is_view_node(const prims::PrimNode& node);

// True for a node that joins a kernel reading it but starts none: a cat
// kernels compute by reading each piece where it lies (Note [Cat in
// kernels]: few pieces, dtypes kernels support), or a fill with a real
// scalar (a constant in the kernel; the zero blocks of a slice's gradient).
bool joins_readers(const prims::PrimGraph& graph, const prims::PrimNode& node);

// For a view: true when it folds into the indexing of a kernel reading it,
// over a kernel input or a computed value alike (Note [Reshapes in
// kernels]); false for a reshape of an empty value.
bool view_folds(const prims::PrimGraph& graph, const prims::PrimNode& node);

// The reduced dims of a reduction node over its input (all of them when
// its dims attribute is empty), ascending.
std::vector<int64_t> reduction_dims(const prims::PrimGraph& graph, const prims::PrimNode& node);

// Where one dim's index of a value comes from, at a point of a kernel's
// iteration space: `offset` (a slice's start) plus iteration dim `dim`'s
// index (dim >= 0) or the value of int64 expression `expr` of the kernel
// (expr >= 0: a cat piece's clamped index, Note [Cat in kernels], an
// Index over several dims, a split view's, or a digit of a merged one,
// Note [Reshapes in kernels]); never both.
struct IndexTerm {
  int dim = -1;
  int64_t offset = 0;
  int expr = -1;

  // The index of iteration dim d itself.
  static IndexTerm along(int d) { return IndexTerm{d, 0, -1}; }
  // True for iteration dim `d` itself, nothing added.
  bool is(int d) const { return dim == d && offset == 0 && expr < 0; }
  bool operator<(const IndexTerm& o) const { return std::tie(dim, offset, expr) < std::tie(o.dim, o.offset, o.expr); }
  bool operator==(const IndexTerm& o) const { return std::tie(dim, offset, expr) == std::tie(o.dim, o.offset, o.expr); }
};

// Emits prim values of one group into out->kernel (Note [Pointwise fusion],
// Note [Reduction lowering]).
class ValueLowering {
 public:
  // Per dim of a value: where its index comes from.
  using IndexMap = std::vector<IndexTerm>;

  // Each dim of a value of `rank` dims at the iteration dim of its number.
  static IndexMap identity(size_t rank);

  // `nodes` are the group's members; out->kernel.sizes must be set, and
  // out->kernel.reduced too when the group reduces.
  ValueLowering(const prims::PrimGraph& graph, const std::vector<int>& nodes, LoweredKernel* out);

  // The expression computing `value` at `map`, in the dtype kernels compute
  // it in (low-precision floats as float32). Throws LoweringError.
  int emit(int value, const IndexMap& map);

 private:
  bool in_group(int value) const;
  int load(int value, const std::vector<int64_t>& strides, int64_t offset, const IndexMap& map);
  int cast_to(int expr, DType dtype);
  int operand(const prims::PrimArg& arg, const std::vector<int64_t>& sizes, const IndexMap& map, DType dtype);
  int emit_node(int value, const IndexMap& map);
  // A pointwise node's value in its compute dtype, before rounding.
  int emit_pointwise(int value, const IndexMap& map);
  int emit_view(const prims::PrimNode& node, const IndexMap& map);
  int emit_cat(const prims::PrimNode& node, const IndexMap& map);
  int emit_fill(const prims::PrimNode& node);
  // The map of a view's or reshape's input at its own `map` (Note
  // [Reshapes in kernels]); nullopt for an empty input.
  std::optional<IndexMap> reshape_input_map(const graph::TensorMeta& in, const graph::TensorMeta& out,
                                            const IndexMap& map);
  struct Digit;
  // `expr` as a digit of a linear index, if it is one.
  std::optional<Digit> digit_of(int expr) const;
  // Replaces the digits of one linear index that a load's strides make
  // contiguous (every digit present) by the index itself.
  void fold_digits(std::vector<std::pair<int, int64_t>>* terms) const;
  // The int64 expression of a term's index.
  int index_of(const IndexTerm& term);
  // The Index expression with these strides, made once.
  int index_expr(const std::vector<int64_t>& strides);
  int emit_reduction(int value, const IndexMap& map);
  // x ** exponent as torch's CPU kernel computes it for the exponents it
  // special-cases (Note [Pow by a constant]), or nullopt.
  std::optional<int> emit_pow_special(int x, double exponent, DType dtype);

  const prims::PrimGraph& graph_;
  std::set<int> members_;
  LoweredKernel* out_;
  std::map<std::pair<int, IndexMap>, int> memo_;
  std::map<int, int> reductions_;  // value -> its Reduce result expression
  std::map<std::vector<int64_t>, int> index_exprs_;  // strides -> their Index expression
};

// The dtype a value is computed in: low-precision floats in float32.
DType compute_dtype(DType dtype);

}  // namespace kiln::inductor
