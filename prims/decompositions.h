// One decomposition function per op of stdlib's KILN_TORCH_OPS, expanded
// from that list: decompose_<Op>(call) appends prims and returns the
// values of the call's results (one per traced meta), or throws
// NotDecomposed. They are defined by family in prims/decompose_*.cpp.
#pragma once

#include <vector>

#include "prims/decompose_call.h"
#include "prims/torch_ops.h"

namespace kiln::prims {

#define KILN_DECLARE_DECOMPOSITION(name, ...) std::vector<int> decompose_##name(DecomposeCall& call);
KILN_TORCH_OPS(KILN_DECLARE_DECOMPOSITION)
#undef KILN_DECLARE_DECOMPOSITION

// A decomposition function.
using DecomposeFn = std::vector<int> (*)(DecomposeCall& call);

// The decomposition of `op`.
DecomposeFn decomposition_of(prims::TorchOp op);

}  // namespace kiln::prims
