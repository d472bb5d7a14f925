// Running a partitioned graph as a torch.autograd.Function
// (python/kiln/_autograd.py), so that loss.backward() in user code runs
// kiln's backward graph and fills .grad of parameters and inputs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/partitioner.h"
#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::autograd {

// A rewrite of a graph before it runs (the inductor's kernels); `what`
// names the graph for logs ("forward", "backward").
using GraphPass = std::function<prims::PrimGraph(const prims::PrimGraph& graph, const std::string& what)>;

// An executor that calls CompiledFunction.apply with the partition's
// forward and backward graphs (each run by a PrimExecutor, after `finish`
// when given) and builds `output` (Node refs: value ids among
// `forward_outputs`, the joint's forward outputs in order) from the
// function's outputs. `value_count` is the number of values of the graph
// those ids belong to. Calls where some output gradients never arrive run
// a backward variant without them, built on first need (Note [Absent
// gradients]). Throws runtime::PrimExecutorError or std::runtime_error
// (with the Python error's text) when a graph cannot be prepared.
std::unique_ptr<runtime::GraphExecutor> make_autograd_executor(Partition partition, graph::Arg output,
                                                               std::vector<int> forward_outputs,
                                                               int value_count, GraphPass finish = nullptr);

}  // namespace kiln::autograd
