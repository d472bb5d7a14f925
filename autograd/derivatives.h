// Derivative rules: for one prim node, the prims that compute the gradients
// of its inputs from the gradients of its outputs (a vector-Jacobian
// product), appended through a PrimBuilder. One file per prim family:
// derivatives_pointwise.cpp, _reduction, _view, _matmul, _index, _extern.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "prims/prim_builder.h"

namespace kiln::autograd {

// What a rule sees of the node it differentiates, in the graph being built
// (the joint graph): the node, and the value ids of its inputs and outputs
// there. Scalar arguments have id -1. An extern's inputs are the values its
// arguments refer to, in extern_inputs() order.
struct NodeView {
  const prims::PrimNode& node;
  std::vector<int> inputs;   // per node.args (extern: per extern_inputs())
  std::vector<int> outputs;  // per node.outputs
};

// Thrown for a node kiln cannot differentiate (no rule yet, or a prim that
// has no gradient but an input that needs one): the caller falls back to
// eager autograd and says why.
class NoDerivative : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends the vector-Jacobian product of `view.node` to `b`. `grads` holds,
// per output, the value id of its gradient or -1 (a zero gradient); at
// least one is set. `needs` says, per argument, whether its gradient is
// wanted. Returns, per argument, the gradient's value id (with the
// argument's sizes and dtype) or -1 for none.
std::vector<int> vjp(prims::PrimBuilder& b, const NodeView& view, const std::vector<int>& grads,
                     const std::vector<bool>& needs);

// The values an extern node reads: one entry per tensor reference in its
// arguments (positional, then keyword, depth-first into tuples, lists and
// dicts), repeats included.
std::vector<int> extern_inputs(const prims::PrimNode& node);


// True for prims whose outputs never carry gradients (comparisons, integer
// and bool results, argmax, random draws): autograd does not visit them.
bool is_non_differentiable(prims::Prim prim);

}  // namespace kiln::autograd
