// Who computes the CPU graphs' matrix products under backend="inductor"
// (kiln.config.cpu_matmul; Note [GEMM nodes] in gemm_nodes.cpp).
#pragma once

#include <optional>
#include <string>

namespace kiln::inductor {

enum class MatmulPolicy {
  Aten,  // torch.matmul, as the prim executor runs it
  Kiln,  // kiln's generated kernel (inductor/cpu/gemm.h) wherever it applies
  Auto,  // per shape and layout, whichever was faster when first timed
};

// "aten", "kiln" or "auto".
const char* matmul_policy_name(MatmulPolicy policy);

// The policy named `name`, or nullopt.
std::optional<MatmulPolicy> matmul_policy_from_name(const std::string& name);

}  // namespace kiln::inductor
