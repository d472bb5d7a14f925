// A graph with symbolic sizes run as stages: the runs of nodes whose
// tensors have static sizes compiled once as static graphs, the nodes that
// read or make a symbolic size replayed eagerly between them (Note [Static
// regions] in static_regions.cpp).
#pragma once

#include <memory>
#include <string>

#include "graph/graph.h"
#include "interpreter/size_instances.h"
#include "runtime/graph_executor.h"

namespace kiln::interpreter {

// What cutting `graph` into static regions and eager nodes gives.
struct StaticRegionCount {
  int static_calls = 0;  // calls in regions big enough to compile
  int eager_calls = 0;   // calls replayed eagerly
  int regions = 0;       // static regions compiled
};

// How `graph`'s calls divide between static regions and eager nodes.
StaticRegionCount count_static_regions(const graph::Graph& graph);

// True when the static regions hold enough of `graph` to run it so rather
// than compile it per size.
bool static_regions_pay(const StaticRegionCount& count);

// The staged executor of `graph` (which must outlive it): each static
// region compiled by `compile` (a static graph's pipeline), each run of
// other nodes an eager replay. A region whose inputs arrive with other
// sizes or strides than traced runs eagerly for that call.
std::unique_ptr<runtime::GraphExecutor> static_regions_executor(const graph::Graph& graph, const std::string& name,
                                                                const InstanceCompiler& compile);

}  // namespace kiln::interpreter
