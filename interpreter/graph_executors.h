// Picks and builds the executor a compiled graph runs through, per the
// compile's backend: "eager" replays the traced graph; "aot_eager"
// decomposes it into prims (training graphs through kiln's autograd) and
// runs them through torch; "inductor" does too, with fused kernels where it
// can compile them. mode="reduce-overhead" wraps CUDA graphs in CUDA graph
// capture and replay; mode="max-autotune" times the launch configurations
// of each CUDA kernel at its first launch (Note [CUDA autotuning]). A
// callable backend gets the graph as a torch.fx.GraphModule.
#pragma once

#include <memory>
#include <string>

#include "graph/graph.h"
#include "interpreter/compile_config.h"
#include "runtime/graph_executor.h"

namespace kiln::interpreter {

// Returns the executor for `graph` (which must outlive it) under
// `config`'s backend, captured as a CUDA graph under mode="reduce-overhead"
// where the graph allows it, its CUDA kernels autotuned under
// "max-autotune", with the kiln.config settings its options= set and the
// process-wide ones now for the rest (also for graphs it builds later, such
// as a backward without some gradients). `name` labels log lines. Never
// fails: a graph aot_eager cannot take runs eagerly, with a `backend` log
// line saying why.
std::unique_ptr<runtime::GraphExecutor> make_executor(const graph::Graph& graph, const CompileConfig& config,
                                                      const std::string& name);

}  // namespace kiln::interpreter
