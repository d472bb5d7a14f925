// The inductor's graph passes: every group the scheduler fuses
// (schedule_kernels: pointwise chains, reductions with their pointwise
// inputs and epilogues) becomes one extern node calling a compiled LLVM
// kernel (CPU graphs) or NVRTC kernel (graphs on one CUDA device); the rest
// of the graph is left to the prim executor. See Note [Kernel nodes] in
// fuse_kernels.cpp.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "inductor/lower_group.h"
#include "inductor/lower_values.h"
#include "inductor/matmul_policy.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

struct FusedGraph {
  std::shared_ptr<prims::PrimGraph> graph;  // same inputs and outputs, in order
  int kernels = 0;        // kernel nodes in `graph`
  int fused_prims = 0;    // prims they replaced
  int compiled = 0;       // kernels compiled now (the others came from the cache)
  int reused_buffers = 0; // kernel outputs written into a dead kernel output's buffer (Note [Buffer reuse])
  int gemms = 0;          // matmul nodes made GEMM nodes (Note [GEMM nodes])
};

// The targets kernels may be compiled for.
struct KernelTargets {
  bool cpu = true;    // graphs whose tensors are all on the CPU: LLVM
  bool cuda = false;  // graphs whose tensors are all on one CUDA device: NVRTC
  // mode="max-autotune": each CUDA kernel times its launch configurations
  // at its first launch (Note [CUDA autotuning]) and calls `autotuned`
  // (when set) each time candidates were timed.
  bool autotune = false;
  std::function<void()> autotuned;
  MatmulPolicy cpu_matmul = MatmulPolicy::Auto;  // who computes CPU matmul nodes (Note [GEMM nodes])
  bool gemm_rows_at_run_time = false;             // Note [GEMM rows at run time]
  bool cuda_runtime_layout = false;               // Note [CUDA run-time layout]
  bool conv_bias_in_kernels = false;              // Note [Convolution biases in kernels]
  bool batch_input_casts = false;                 // Note [Batched weight casts] (CUDA graphs)
};

// Inductor's passes, in the order the compile pipeline runs them
// (interpreter/compile_pipeline.cpp): plan_kernels -> lower_kernels ->
// compile_kernels -> emit_kernel_graph. None throws for a graph the prim
// executor can run: a group that cannot be lowered or compiled stays prim
// nodes (logged under `prims`).

// A prim graph rewritten for kernels, its nodes grouped into kernels
// (Note [Kernel scheduling]), and the target they compile for.
struct KernelPlan {
  prims::PrimGraph graph;
  std::vector<KernelGroup> groups;
  int device = -1;       // CUDA kernels: the graph's one CUDA device
  bool on_cuda = false;  // groups become CUDA kernels
  bool on_cpu = false;   // groups become CPU kernels
  int schedules = 0;     // times the graph was scheduled (Note [Recomputed kernel outputs]'s rounds)
  KernelTargets targets;
};

// Rewrites `graph` before scheduling (dead nodes, casts above reshapes,
// bias epilogues, batched input casts, two-step outer reductions, explicit
// copies) to their
// fixed point, then groups its nodes; Note [Recomputed kernel outputs] may
// rewrite the scheduled graph, which is then planned again while a round
// stores fewer bytes (at most 8 rounds).
// No groups when `targets` allows no kernels for the graph's tensors.
KernelPlan plan_kernels(const prims::PrimGraph& graph, KernelTargets targets);

// Each group's loop-level kernel (Note [Pointwise fusion]); a group that
// cannot be lowered is dropped from plan->groups, its nodes left as they are.
std::vector<LoweredKernel> lower_kernels(KernelPlan* plan);

struct KernelEntry;  // a compiled kernel, CPU or CUDA (fuse_kernels.cpp)

// Per lowered kernel, its compiled code (LLVM through ORC, or NVRTC), from
// the kernel caches where they hold it; null where compiling failed.
struct CompiledKernels {
  std::vector<std::shared_ptr<KernelEntry>> entries;
  int compiled = 0;  // compiled now (the others came from a cache)
};
CompiledKernels compile_kernels(const KernelPlan& plan, const std::vector<LoweredKernel>& lowered);

// The plan's graph with each compiled group replaced by one node calling
// its kernel (Note [Kernel nodes]), units ordered after what they read,
// dead kernel outputs' buffers reused (Note [Buffer reuse]) and, on the
// CPU, matmuls made GEMM nodes (Note [GEMM nodes]). Same inputs and
// outputs as plan.graph.
FusedGraph emit_kernel_graph(const KernelPlan& plan, const std::vector<LoweredKernel>& lowered,
                             const CompiledKernels& kernels);

// True when this build and machine can compile CPU kernels.
bool cpu_kernels_available();

// True when NVRTC and the CUDA driver can be loaded (checked once).
bool cuda_kernels_available();

}  // namespace kiln::inductor
