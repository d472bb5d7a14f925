// Float16/bfloat16 round trips that a kernel can skip without changing a
// result (Note [Exact round trips] in simplify_casts.cpp).
#pragma once

#include "inductor/kernel_ir.h"

namespace kiln::inductor {

// Rewrites `kernel` so that no expression or output converts a value to a
// storage dtype (float16, bfloat16) and back when the value is already
// exact in that dtype, then drops the expressions no output needs. Every
// result keeps its bits; a NaN may keep its payload.
void simplify_casts(Kernel& kernel);

}  // namespace kiln::inductor
