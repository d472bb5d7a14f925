// Splitting a joint graph into the forward graph (which also returns the
// values the backward needs: "saved") and the backward graph, choosing the
// saved set by a minimum cut that prefers recomputing cheap elementwise and
// view ops in the backward over saving their results. See Note
// [Partitioning] in partitioner.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/joint_graph.h"

namespace kiln::autograd {

struct Partition {
  // Inputs: the forward's inputs. Outputs: the forward's outputs, then the
  // saved values.
  prims::PrimGraph forward;
  // Inputs: the saved values, then the gradients of the forward outputs
  // that carry one (JointGraph::grad_inputs order). Outputs: the gradients
  // of the forward inputs that get one (JointGraph::input_grads order).
  prims::PrimGraph backward;
  int forward_output_count = 0;
  int saved_count = 0;
  // After the saved values the forward also returns the results of extern
  // calls with effects (running statistics written by batch norm), so that
  // they run once, in the forward, and are never dropped as dead code.
  int effect_count = 0;
  int64_t saved_bytes = 0;
  // Per forward output: whether a gradient flows back into it.
  std::vector<bool> output_has_grad;
  // Per forward input: its position among the backward's outputs, or -1.
  std::vector<int> input_grad_slot;
  // Per backward output: the output gradients whose paths reach its input
  // (positions among the backward's gradient inputs; JointGraph::
  // input_grad_reach). When none of them flows back in a call the input's
  // gradient is None, as in eager, and otherwise a tensor.
  std::vector<std::vector<int>> input_grad_deps;
};

// How to choose what to save.
enum class SavePolicy : uint8_t {
  MinCut,      // fewest saved bytes, recomputing cheap ops in the backward
  SaveNeeded,  // every forward value the backward reads (no recomputation)
};

// Splits `joint`. Throws std::runtime_error (naming the problem) if the
// graphs cannot be separated, which is a kiln bug.
Partition partition_joint_graph(const JointGraph& joint, SavePolicy policy = SavePolicy::MinCut);

}  // namespace kiln::autograd
