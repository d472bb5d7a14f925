// Picks and builds the executor a compiled graph runs through, per the
// compile's backend: "eager" (and "inductor", until code generation lands)
// replay the traced graph; "aot_eager" decomposes it into prims and runs
// them (forward-only for now: graphs that need gradients stay eager).
#pragma once

#include <memory>
#include <string>

#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::interpreter {

// Returns the executor for `graph` (which must outlive it) under `backend`.
// `name` labels log lines. Never fails: a graph aot_eager cannot take runs
// eagerly, with a `backend` log line saying why.
std::unique_ptr<runtime::GraphExecutor> make_executor(const graph::Graph& graph,
                                                      const std::string& backend,
                                                      const std::string& name);

}  // namespace kiln::interpreter
