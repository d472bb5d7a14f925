// Reading the kernel IR's text form (format_kernel in kernel_ir.h) back
// into a Kernel, so tests and tools can write kernels as text.
#pragma once

#include <string>

#include "inductor/kernel_ir.h"

namespace kiln::inductor {

// Parses format_kernel's text form into a Kernel (the inverse of
// format_kernel: format_kernel(parse_kernel(t)) == t for t that it wrote).
// Blank lines are skipped; expressions, inputs and outputs must be numbered
// in order from 0. Checks the syntax only (verify() checks the rest).
// Throws std::invalid_argument naming the line and what was wrong.
Kernel parse_kernel(const std::string& text);

}  // namespace kiln::inductor
