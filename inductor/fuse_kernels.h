// The inductor's graph pass: every group the scheduler fuses
// (schedule_kernels: pointwise chains, reductions with their pointwise
// inputs and epilogues) becomes one extern node calling a compiled LLVM
// kernel (CPU graphs) or NVRTC kernel (graphs on one CUDA device); the rest
// of the graph is left to the prim executor. See Note [Kernel nodes] in
// fuse_kernels.cpp.
#pragma once

#include <functional>
#include <memory>

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
};

// Rewrites `graph` with compiled kernels where it can (reductions too,
// despite the name, which the backend calls it by), for the target of its
// tensors when `targets` allows it; on CPU graphs, matmul nodes become
// GEMM nodes unless targets.cpu_matmul is Aten. A group that cannot be lowered or
// compiled stays as it was (logged under `prims`). Never throws for a graph
// the prim executor can run.
FusedGraph fuse_pointwise_kernels(const prims::PrimGraph& graph, KernelTargets targets = {});

// True when this build and machine can compile CPU kernels.
bool cpu_kernels_available();

// True when NVRTC and the CUDA driver can be loaded (checked once).
bool cuda_kernels_available();

}  // namespace kiln::inductor
