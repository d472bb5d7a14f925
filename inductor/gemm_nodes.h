// The GEMM nodes of the inductor's CPU pass: a prim graph's matmul node
// becomes an extern node whose callable runs kiln's generated kernel
// (inductor/cpu/gemm.h), or torch's matmul where the policy or the
// operands' layout say so. See Note [GEMM nodes] in gemm_nodes.cpp.
#pragma once

#include "graph/tensor_meta.h"
#include "inductor/matmul_policy.h"
#include "base/py_ref.h"

namespace kiln::inductor {

// A callable computing matmul(a, b) for operands laid out as `a` and `b`
// (CPU, float32 or float64), with the kernel compiled now or taken from
// the kernel cache (*compiled_now says which); with `rows_at_run_time`, a
// kernel for every m of this shape (Note [GEMM rows at run time]). Null
// when the generated kernel does not apply to these operands. Throws
// cpu::CodegenError when the kernel cannot be compiled.
base::PyRef make_gemm_call(const graph::TensorMeta& a, const graph::TensorMeta& b, MatmulPolicy policy,
                           bool rows_at_run_time, bool* compiled_now);

// Forgets the "auto" policy's timings: GEMM nodes made from now on time
// their spec again on their first call (tests).
void clear_matmul_choices();

}  // namespace kiln::inductor
