// A graph with symbolic sizes (Note [Dynamic shapes] in tracer/) run
// through kiln's backends one size at a time: each new set of input sizes
// gets the graph with its sizes made concrete, compiled as a static graph
// would be (Note [Size instances] in size_instances.cpp).
#pragma once

#include <Python.h>

#include <functional>
#include <memory>
#include <string>

#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::interpreter {

// True when some node of `graph` has a symbolic size.
bool has_symbolic_sizes(const graph::Graph& graph);

// Why `graph` (with symbolic sizes) cannot be compiled per size, or "".
std::string size_instance_refusal(const graph::Graph& graph);

// `graph` at the sizes of `inputs` (what its executor receives): every
// node replayed on meta tensors, sizes read from the results, the graph's
// size computations folded to constants. Null, with *why set, where a node
// cannot run on meta tensors or its results change shape.
std::unique_ptr<graph::Graph> instantiate_sizes(const graph::Graph& graph, PyObject* const* inputs,
                                                std::string* why);

// Compiles one concrete graph (a size instance, named `name`).
using InstanceCompiler =
    std::function<std::unique_ptr<runtime::GraphExecutor>(const graph::Graph& graph, const std::string& name)>;

// The executor of `graph` (which must outlive it): it keys each call by
// the sizes of its inputs' symbolic dims and runs that size's instance,
// instantiating and compiling it at the first call of a size.
std::unique_ptr<runtime::GraphExecutor> size_instance_executor(const graph::Graph& graph, const std::string& name,
                                                               InstanceCompiler compile);

}  // namespace kiln::interpreter
