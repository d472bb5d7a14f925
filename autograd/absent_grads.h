// Backward graphs for calls where some output gradients never arrive
// (Note [Absent gradients] in absent_grads.cpp).
#pragma once

#include <vector>

#include "prims/prim_graph.h"

namespace kiln::autograd {

// A backward graph without what flows from its inputs marked `absent`
// (gradients that did not arrive; inputs from `first_grad` on are the
// incoming gradients, those before it saved values): same inputs (the
// absent ones unread), and as outputs those of `backward` marked `keep`, in
// order (zeros where only absent gradients made one: a path through sign
// gives eager a zero gradient, not None).
prims::PrimGraph without_absent_grads(const prims::PrimGraph& backward, size_t first_grad,
                                      const std::vector<bool>& absent, const std::vector<bool>& keep);

}  // namespace kiln::autograd
