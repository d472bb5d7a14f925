// The compiler pipeline for one traced graph, pass by pass, in one function
// (compile_graph; docs/architecture.md, "The pipeline"): decompose into
// prims, merge common nodes, autograd (joint graph, partition, gradient
// bucket stages) for training graphs, inductor's kernel passes (plan,
// lower, codegen, emit), the executor, CUDA graphs. The frame hook calls it
// for each graph the tracer makes.
#pragma once

#include <memory>
#include <string>

#include "graph/graph.h"
#include "interpreter/compile_config.h"
#include "runtime/graph_executor.h"

namespace kiln::interpreter {

// Returns the executor for `graph` (which must outlive it) under
// `config`'s backend: "eager" replays the traced graph; "aot_eager"
// decomposes it into prims (training graphs through kiln's autograd) and
// runs them through torch; "inductor" does too, with fused kernels where
// it can compile them; a callable backend gets the graph as a
// torch.fx.GraphModule. mode="reduce-overhead" captures CUDA graphs where
// the graph allows it; "max-autotune" times each CUDA kernel's launch
// configurations at its first launch. The kiln.config settings options=
// left unset are read now, also for graphs built later (a backward without
// some gradients). `name` labels log lines. Never fails: a graph a pass
// cannot take runs eagerly, with a `backend` log line saying why (and a
// RuntimeWarning when a pass failed in a way it did not expect).
std::unique_ptr<runtime::GraphExecutor> compile_graph(const graph::Graph& graph, const CompileConfig& config,
                                                      const std::string& name);

}  // namespace kiln::interpreter
