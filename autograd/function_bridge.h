// Running a partitioned graph as a torch.autograd.Function
// (python/kiln/_autograd.py), so that loss.backward() in user code runs
// kiln's backward graph and fills .grad of parameters and inputs.
#pragma once

#include <memory>
#include <vector>

#include "autograd/partitioner.h"
#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::autograd {

// An executor that calls CompiledFunction.apply with the partition's
// forward and backward graphs (each run by a PrimExecutor) and builds
// `output` (Node refs: value ids among `forward_outputs`, the joint's
// forward outputs in order) from the function's outputs. `value_count` is
// the number of values of the graph those ids belong to. Throws
// runtime::PrimExecutorError or std::runtime_error (with the Python error's
// text) when a graph cannot be prepared.
std::unique_ptr<runtime::GraphExecutor> make_autograd_executor(Partition partition, graph::Arg output,
                                                               std::vector<int> forward_outputs,
                                                               int value_count);

}  // namespace kiln::autograd
