// mode="reduce-overhead": a compiled CUDA graph replayed as one CUDA graph
// (torch.cuda.CUDAGraph) instead of one launch per kernel. See Note [CUDA
// graphs] in cuda_graph_executor.cpp.
#pragma once

#include <Python.h>

#include <functional>
#include <memory>
#include <string>

#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::runtime {

// Why `graph` cannot run as a CUDA graph ("" when it can): an input that
// is no CUDA tensor, dynamic sizes, a graph that records gradients.
std::string cuda_graph_refusal(const graph::Graph& graph, bool records_gradients);

// Wraps `inner` (which runs `graph`) so that, from its second call on, the
// graph is captured once and then replayed. `name` is for logs;
// `on_capture` runs after each capture (kiln's counters).
std::unique_ptr<GraphExecutor> make_cuda_graph_executor(std::unique_ptr<GraphExecutor> inner,
                                                        const graph::Graph& graph, std::string name,
                                                        std::function<void()> on_capture);

}  // namespace kiln::runtime
