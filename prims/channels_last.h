// The layout plan for convolution nets: 2-d convolutions read and write
// channels-last tensors, and the kernels between them follow (Note
// [Channels-last convolutions] in channels_last.cpp).
#pragma once

#include <optional>
#include <string>

#include "prims/conv_layout.h"
#include "prims/prim_graph.h"

namespace kiln::prims {

// A graph whose convolutions run channels-last.
struct ChannelsLastPlan {
  PrimGraph graph;
  int convolutions = 0;  // 2-d convolutions now reading channels-last operands
  int copies = 0;        // clones the plan added (layout changes; most fuse into kernels)
};

// `graph` with its 2-d convolutions' inputs and weights made channels-last
// and every other value's layout re-derived from them; graph outputs and
// the inputs of other torch calls keep their traced layouts. Nullopt, with
// *why set, when the graph has no convolution to change or the plan is
// refused (a view the new strides do not allow, a grouped convolution,
// a call that writes into a value whose layout would change).
std::optional<ChannelsLastPlan> plan_channels_last(const PrimGraph& graph, std::string* why);

}  // namespace kiln::prims
