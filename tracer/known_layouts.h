// Which traced values have the layout their real kernels will give them,
// so that Tensor.stride() can be answered (Note [Layouts the trace can
// answer] in known_layouts.cpp).
#pragma once

#include <string>

#include "graph/graph.h"

namespace kiln::tracer {

// Whether the fake of node `id`'s result has the strides its real kernels
// give it: a graph input, or made from such values by views, reshapes,
// copies, elementwise ops, matmuls or constant padding. Otherwise
// `unknown`, where given, names the op the layout passed through.
bool layout_is_known(const graph::Graph& graph, int id, std::string* unknown = nullptr);

}  // namespace kiln::tracer
