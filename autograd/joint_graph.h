// The joint forward+backward graph of a prim graph: the forward's nodes,
// then, for every output that carries a gradient, the derivative rules of
// the nodes it depends on, in reverse, summing gradients per value.
#pragma once

#include <string>
#include <vector>

#include "prims/prim_graph.h"

namespace kiln::autograd {

struct JointGraph {
  prims::PrimGraph graph;
  int forward_input_count = 0;       // graph.inputs()[0..n) are the forward's inputs
  std::vector<int> forward_outputs;  // value ids of the forward's outputs
  int forward_node_count = 0;        // graph.nodes()[0..n) are the forward's nodes, the rest the backward's
  // Per forward output: the graph input carrying its gradient, or -1 when
  // the output carries none (integer results, outputs not needing grad).
  std::vector<int> grad_inputs;
  // Per forward input: the value id of its gradient, or -1 (no gradient
  // wanted, or the outputs do not depend on it).
  std::vector<int> input_grads;
  // Per forward input: the outputs (positions among those with a gradient
  // input) from which a differentiable path reaches it, ascending. Eager
  // autograd gives the input a gradient tensor (zeros, through sign) when
  // any of them receives one, and None when none does.
  std::vector<std::vector<int>> input_grad_reach;
};

// Builds the joint graph of `forward`; `requires_grad[i]` says whether
// forward input i wants a gradient. Throws NoDerivative (derivatives.h) for
// a node on a gradient path that has no rule, and PrimError for bad input.
JointGraph build_joint_graph(const prims::PrimGraph& forward, const std::vector<bool>& requires_grad);

// The values of `forward` that carry gradients given the inputs' flags:
// floating or complex values computed, through differentiable prims, from
// an input that requires grad.
std::vector<bool> values_requiring_grad(const prims::PrimGraph& forward,
                                        const std::vector<bool>& requires_grad);

}  // namespace kiln::autograd
