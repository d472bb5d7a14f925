// Cutting the tail off a traced graph into a graph of its own: what a
// traced custom autograd.Function backward becomes (Note [Traced Function
// backwards] in tracer/trace_function_vjp.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph {

// A graph cut from another's tail.
struct GraphTail {
  std::unique_ptr<Graph> graph;
  // Per input of `graph` after the placeholders: the source graph's node
  // it stands for (a value made before the tail that the tail reads).
  std::vector<int> outer;
};

// The nodes of `source` from `first` on as a graph of their own whose
// inputs are `placeholders` (nodes of the tail, each standing for a value
// the caller supplies, with its metadata), then every earlier node the
// tail or `output` reads; `output` (node refs of `source`) becomes its
// output. Returns null graph with *why set where the tail reads an
// earlier value that is not one tensor, or holds nodes only a traced
// frame can run (symbolic sizes, implicit autocast).
GraphTail cut_tail(const Graph& source, int first, const std::vector<int>& placeholders, const Arg& output,
                   std::string* why);

}  // namespace kiln::graph
