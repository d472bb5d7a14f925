// Decompositions of matrix products: matmul (with torch's 1-d cases),
// mm/bmm, addmm, baddbmm and linear.
#include "prims/decompositions.h"

namespace kiln::prims {
namespace {

PrimArg v(int id) { return PrimArg::of_value(id); }

// A batch of rows a (rank >= 3) times one matrix b (a Linear) is one
// product over all rows, as F.linear and at::matmul fold it when the rows
// are contiguous; rows that are not (a permuted NHWC view) are copied once
// here, where at::matmul would copy them and broadcast b into a bmm.
// `bias`, when >= 0, is added to the 2-d product, where the bias epilogue
// pass finds it (Note [Bias epilogues]).
int rows_times_matrix(PrimBuilder& pb, int a, int b, int bias = -1) {
  std::vector<int64_t> sizes = pb.meta(a).sizes;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) rows *= sizes[d];
  int product = pb.matmul(pb.reshape(a, {rows, sizes.back()}), b);
  if (bias >= 0) product = pb.binary(Prim::Add, v(product), v(bias));
  sizes.back() = pb.meta(b).sizes[1];
  return pb.reshape(product, sizes);
}

// torch.matmul: a 1-d operand is a row (left) or column (right) vector
// whose dim is removed from the result.
int matmul_any(DecomposeCall& c, int a, int b) {
  PrimBuilder& pb = c.b;
  const int64_t ra = c.rank(a), rb = c.rank(b);
  if (ra == 0 || rb == 0) c.unsupported("matmul of a 0-dim tensor");
  if (ra >= 3 && rb == 2) return rows_times_matrix(pb, a, b);
  const int lhs = ra == 1 ? pb.unsqueeze(a, 0) : a;
  const int rhs = rb == 1 ? pb.unsqueeze(b, 1) : b;
  int out = pb.matmul(lhs, rhs);
  const int64_t rank = c.rank(out);
  std::vector<int64_t> drop;
  if (ra == 1) drop.push_back(rank - 2);
  if (rb == 1) drop.push_back(rank - 1);
  return drop.empty() ? out : pb.squeeze(out, drop);
}

}  // namespace

std::vector<int> decompose_Matmul(DecomposeCall& c) {
  return {matmul_any(c, c.tensor("input"), c.tensor("other"))};
}

std::vector<int> decompose_Mm(DecomposeCall& c) { return {c.b.matmul(c.tensor("input"), c.tensor("mat2"))}; }

namespace {

// beta * input + alpha * (a @ b): addmm, and baddbmm over a batch (Bloom's
// attention scores: its ALiBi bias plus the scaled product).
int scaled_product_plus_input(DecomposeCall& c, const char* a, const char* b) {
  const int product = scale(c.b, c.b.matmul(c.tensor(a), c.tensor(b)), c.number("alpha"));
  const double beta = c.number("beta");
  if (beta == 0) c.unsupported("beta=0 ignores NaN in input");
  const int bias = scale(c.b, c.tensor("input"), beta);
  return c.b.binary(Prim::Add, v(bias), v(product));
}

}  // namespace

std::vector<int> decompose_Addmm(DecomposeCall& c) { return {scaled_product_plus_input(c, "mat1", "mat2")}; }

std::vector<int> decompose_Baddbmm(DecomposeCall& c) {
  if (c.rank(c.tensor("batch1")) != 3 || c.rank(c.tensor("batch2")) != 3) c.unsupported("baddbmm of non-3-d batches");
  return {scaled_product_plus_input(c, "batch1", "batch2")};
}

// outer(a, b) = a[:, None] * b[None, :]: one product per element, as
// torch computes it.
std::vector<int> decompose_Outer(DecomposeCall& c) {
  const int a = c.tensor("input"), b = c.tensor("vec2");
  if (c.rank(a) != 1 || c.rank(b) != 1) c.unsupported("outer of other than two vectors");
  return {c.b.binary(Prim::Mul, v(c.b.unsqueeze(a, 1)), v(c.b.unsqueeze(b, 0)))};
}

// linear(x, W, b) = x @ W^T + b.
std::vector<int> decompose_Linear(DecomposeCall& c) {
  const int weight = c.tensor("weight");
  const int w = c.rank(weight) == 2 ? c.b.permute(weight, {1, 0}) : weight;
  const int input = c.tensor("input");
  if (c.rank(input) >= 3 && c.rank(weight) == 2) {
    return {rows_times_matrix(c.b, input, w, c.given("bias") ? c.tensor("bias") : -1)};
  }
  int out = matmul_any(c, input, w);
  if (c.given("bias")) out = c.b.binary(Prim::Add, v(out), v(c.tensor("bias")));
  return {out};
}

}  // namespace kiln::prims
