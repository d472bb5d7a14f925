// The stable text form of a Graph, for logs, explain() and golden files.
#pragma once

#include <string>

#include "graph/graph.h"

namespace kiln::graph {

// Prints one line per node, e.g.
//   %0 = input L['x'] : f32[2, 3]
//   %2 = torch.add(%0, %1, alpha=2) : f32[2, 3]
//   return (%2, 3)
// Constants print as Python repr; no addresses appear.
std::string format_graph(const Graph& graph);

// The text of one argument as format_graph writes it ("%3", "(1, %2)",
// constants as their repr without addresses).
std::string format_arg(const Arg& arg);

}  // namespace kiln::graph
