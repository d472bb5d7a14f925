// Decompositions of reductions: sum, mean, amax/amin, max/min (with and
// without a dim), argmax/argmin, var, std, var_mean.
#include <cmath>

#include "prims/decompositions.h"

namespace kiln::prims {
namespace {

PrimArg v(int id) { return PrimArg::of_value(id); }

// The dims argument: empty (all dims) when None.
std::vector<int64_t> dims_of(DecomposeCall& c, const char* name = "dim") {
  return c.given(name) ? c.ints(name) : std::vector<int64_t>{};
}

// var_mean's correction from `correction` or the legacy `unbiased`.
double correction_of(DecomposeCall& c) {
  if (c.given("correction")) return c.number("correction");
  if (c.given("unbiased")) return c.flag("unbiased") ? 1 : 0;
  return 1;
}

std::pair<int, int> var_mean_of(DecomposeCall& c) {
  return c.b.var_mean(c.tensor("input"), dims_of(c), correction_of(c), c.flag("keepdim"));
}

// max/min: with a tensor `dim` the elementwise form, without a dim the
// reduction to one value, with a dim (values, indices).
std::vector<int> extreme(DecomposeCall& c, Prim elementwise, Prim reduce, Prim arg) {
  const int x = c.tensor("input");
  if (c.is_tensor("dim")) return {c.b.binary(elementwise, PrimArg::of_value(x), PrimArg::of_value(c.tensor("dim")))};
  if (!c.given("dim")) return {c.b.reduce(reduce, x, {}, false)};
  const int64_t dim = c.integer("dim");
  const bool keepdim = c.flag("keepdim");
  return {c.b.reduce(reduce, x, {dim}, keepdim), c.b.reduce(arg, x, {dim}, keepdim)};
}

// argmax/argmin over one dim, or over the flattened tensor when dim is None.
std::vector<int> arg_extreme(DecomposeCall& c, Prim arg) {
  const int x = c.tensor("input");
  const std::vector<int64_t> dims = c.given("dim") ? std::vector<int64_t>{c.integer("dim")} : std::vector<int64_t>{};
  return {c.b.reduce(arg, x, dims, c.flag("keepdim"))};
}

}  // namespace

std::vector<int> decompose_Sum(DecomposeCall& c) {
  return {c.b.reduce(Prim::Sum, c.tensor("input"), dims_of(c), c.flag("keepdim"), c.dtype("dtype"))};
}

std::vector<int> decompose_Mean(DecomposeCall& c) {
  int x = c.tensor("input");
  if (auto dtype = c.dtype("dtype")) x = to_dtype(c.b, x, *dtype);
  if (!is_floating(c.b.meta(x).dtype) && !is_complex(c.b.meta(x).dtype)) c.unsupported("mean of integers");
  return {mean(c.b, x, dims_of(c), c.flag("keepdim"))};
}

std::vector<int> decompose_Amax(DecomposeCall& c) {
  return {c.b.reduce(Prim::Amax, c.tensor("input"), c.ints("dim"), c.flag("keepdim"))};
}

std::vector<int> decompose_Amin(DecomposeCall& c) {
  return {c.b.reduce(Prim::Amin, c.tensor("input"), c.ints("dim"), c.flag("keepdim"))};
}

std::vector<int> decompose_Max(DecomposeCall& c) { return extreme(c, Prim::Maximum, Prim::Amax, Prim::Argmax); }
std::vector<int> decompose_Min(DecomposeCall& c) { return extreme(c, Prim::Minimum, Prim::Amin, Prim::Argmin); }

std::vector<int> decompose_Argmax(DecomposeCall& c) { return arg_extreme(c, Prim::Argmax); }
std::vector<int> decompose_Argmin(DecomposeCall& c) { return arg_extreme(c, Prim::Argmin); }

std::vector<int> decompose_Var(DecomposeCall& c) { return {var_mean_of(c).first}; }

// sqrt(var), with torch's gradient where var is 0: its std_backward gives
// 0 there, where sqrt's would give 0 * inf = NaN (all-equal rows). Both
// wheres keep the sqrt's input and its gradient finite at 0.
std::vector<int> decompose_Std(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int var = var_mean_of(c).first;
  const int zero = b.binary(Prim::Eq, v(var), PrimArg::of_scalar(Scalar::of_float(0)));
  const int safe = b.where(zero, PrimArg::of_scalar(Scalar::of_float(1)), v(var));
  return {b.where(zero, PrimArg::of_scalar(Scalar::of_float(0)), v(b.unary(Prim::Sqrt, safe)))};
}

std::vector<int> decompose_VarMean(DecomposeCall& c) {
  auto [var, mean] = var_mean_of(c);
  return {var, mean};
}

// Note [Norms as prims]
// torch.norm, Tensor.norm, linalg.vector_norm, F.normalize and F.rms_norm
// were externs: a training step's backward re-ran each in Python for its
// gradient (Note [Extern gradients]; EdgeNeXt's six F.normalize calls of
// its cross-covariance attention cost 2.7 ms of a 21 ms CPU step that way).
// As prims the 1- and 2-norms fuse with their neighbours; other orders,
// out= and complex inputs stay torch's calls.
namespace {

std::vector<int> norm_call(DecomposeCall& c, const char* input, const char* ord_name) {
  int x = c.tensor(input);
  if (c.has_param("out") && c.given("out")) c.unsupported("out=");
  if (auto dtype = c.dtype("dtype")) x = to_dtype(c.b, x, *dtype);
  const DType dtype = c.b.meta(x).dtype;
  if (!is_floating(dtype)) c.unsupported("norm of a non-floating tensor");
  std::vector<int64_t> dims = dims_of(c);
  // "fro" over every element (no dim) is the 2-norm of the flattened tensor.
  const std::optional<double> ord = norm_order(c, ord_name, dims.size());
  if (!ord) c.unsupported("norm of an order other than 1 or 2");
  return {to_dtype(c.b, vector_norm(c.b, x, *ord, std::move(dims), c.flag("keepdim")), dtype)};
}

}  // namespace

std::vector<int> decompose_VectorNorm(DecomposeCall& c) { return norm_call(c, "x", "ord"); }
std::vector<int> decompose_Norm(DecomposeCall& c) { return norm_call(c, "input", "p"); }

}  // namespace kiln::prims
