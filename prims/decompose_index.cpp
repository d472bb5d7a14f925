// Decompositions of the indexed reads and writes: gather, index_select,
// scatter and scatter_add (and, through their out-of-place twins, the
// in-place scatter_add_/scatter_ of traced code: functionalize_inplace).
// As externs, their gradients reran them in Python (Note [Extern
// gradients]); as prims their derivatives are kiln's (derivatives_index.cpp).
// MoE routers use them (PhiMoE's backward scatters its gradient).
#include "prims/decompositions.h"

namespace kiln::prims {

std::vector<int> decompose_Gather(DecomposeCall& c) {
  if (c.flag("sparse_grad")) c.unsupported("sparse_grad=True");
  return {c.b.gather(c.tensor("input"), c.integer("dim"), c.tensor("index"))};
}

std::vector<int> decompose_IndexSelect(DecomposeCall& c) {
  return {c.b.index_select(c.tensor("input"), c.integer("dim"), c.tensor("index"))};
}

std::vector<int> decompose_ScatterAdd(DecomposeCall& c) {
  if (!c.is_tensor("src")) c.unsupported("scatter_add of a non-tensor src");
  return {c.b.scatter(c.tensor("input"), c.integer("dim"), c.tensor("index"), c.operand("src"), /*add=*/true)};
}

// scatter(input, dim, index, src) or its value form; a reduce mode stays
// torch's call.
std::vector<int> decompose_Scatter(DecomposeCall& c) {
  if (c.given("reduce")) c.unsupported("reduce=");
  const char* source = c.given("src") ? "src" : c.given("value") ? "value" : nullptr;
  if (!source) c.unsupported("neither src nor value");
  return {c.b.scatter(c.tensor("input"), c.integer("dim"), c.tensor("index"), c.operand(source))};
}

}  // namespace kiln::prims
