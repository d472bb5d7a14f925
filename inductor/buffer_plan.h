// Memory planning for fused graphs: which kernel outputs can be written
// into the buffer of a kernel output that is dead by then (Note [Buffer
// reuse] in buffer_plan.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "prims/prim_graph.h"

namespace kiln::inductor {

// One step of a fused graph in run order: a kernel group or a node.
struct PlanUnit {
  std::vector<int> reads;    // value ids the step reads
  std::vector<int> outputs;  // value ids it makes
  // The outputs are buffers the step allocates itself (a kernel's): they
  // may be handed on once dead, and may take a dead one.
  bool kernel = false;
  // The outputs may share storage with the reads (views, torch calls).
  bool may_alias_reads = false;
};

// Per unit, per output: the value (a kernel output dead before the unit
// runs) whose buffer the output is written into, or -1 for a new buffer.
// Sizes come from the values' metas in `graph`.
std::vector<std::vector<int>> plan_buffer_reuse(const prims::PrimGraph& graph, const std::vector<PlanUnit>& units);

// The bytes a tensor of `meta` spans from its first element (0 when empty).
int64_t tensor_span_bytes(const graph::TensorMeta& meta);

}  // namespace kiln::inductor
