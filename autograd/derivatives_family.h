// The per-family halves of vjp() (derivatives.h), one per derivatives_*.cpp.
#pragma once

#include <optional>
#include <vector>

#include "autograd/derivatives.h"

namespace kiln::autograd {

// Elementwise prims, where, convert_element_type.
std::vector<int> vjp_pointwise(prims::PrimBuilder& b, const NodeView& view,
                               const std::vector<int>& grads, const std::vector<bool>& needs);
// sum, prod, amax, amin, var_mean.
std::vector<int> vjp_reduction(prims::PrimBuilder& b, const NodeView& view,
                               const std::vector<int>& grads, const std::vector<bool>& needs);
// Views, clone, cat.
std::vector<int> vjp_view(prims::PrimBuilder& b, const NodeView& view,
                          const std::vector<int>& grads, const std::vector<bool>& needs);
// matmul.
std::vector<int> vjp_matmul(prims::PrimBuilder& b, const NodeView& view,
                            const std::vector<int>& grads, const std::vector<bool>& needs);
// gather, scatter, index_select, index_put.
std::vector<int> vjp_index(prims::PrimBuilder& b, const NodeView& view,
                           const std::vector<int>& grads, const std::vector<bool>& needs);
// A custom Function call whose backward the tracer traced: that graph,
// decomposed (Note [Traced Function backwards]); nullopt for other
// externs and where the traced backward cannot be used.
std::optional<std::vector<int>> vjp_traced_function(prims::PrimBuilder& b, const NodeView& view,
                                                    const std::vector<int>& grads);
// extern: a backward extern node that asks torch (Note [Extern gradients]).
std::vector<int> vjp_extern(prims::PrimBuilder& b, const NodeView& view,
                            const std::vector<int>& grads, const std::vector<bool>& needs);

}  // namespace kiln::autograd
