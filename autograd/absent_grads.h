// Backward graphs for calls where some output gradients never arrive
// (Note [Absent gradients] in absent_grads.cpp).
#pragma once

#include <vector>

#include "prims/prim_graph.h"

namespace kiln::autograd {

// A backward graph without what flows from its inputs marked `absent`
// (gradients that did not arrive; inputs from `first_grad` on are the
// incoming gradients, those before it saved values): same inputs (the
// absent ones unread), and as outputs only the gradients something present
// still reaches, whose positions among `backward`'s outputs go to
// `present_outputs`.
prims::PrimGraph without_absent_grads(const prims::PrimGraph& backward, size_t first_grad,
                                      const std::vector<bool>& absent, std::vector<int>* present_outputs);

}  // namespace kiln::autograd
