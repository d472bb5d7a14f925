#include "interpreter/backends.h"

#include "interpreter/compile_config.h"
#include "prims/decompose.h"
#include "runtime/aten_bridge.h"
#include "runtime/eager_executor.h"
#include "runtime/log.h"
#include "runtime/prim_executor.h"

namespace kiln::interpreter {
namespace {

// True when running the graph would record autograd history: some call's
// result requires grad, or grad mode is on and an input requires grad.
bool needs_gradients(const graph::Graph& graph) {
  const bool grad_mode = runtime::grad_mode_enabled();
  for (const graph::Node& node : graph.nodes()) {
    for (const graph::TensorMeta& meta : node.metas) {
      if (meta.requires_grad && (node.kind == graph::NodeKind::Call || grad_mode)) return true;
    }
  }
  return false;
}

std::unique_ptr<runtime::GraphExecutor> eager(const graph::Graph& graph, const std::string& name,
                                              const std::string& why) {
  stats().prim_fallbacks++;
  KILN_LOG(backend, "aot_eager: " << name << " runs eagerly: " << why);
  return std::make_unique<runtime::EagerExecutor>(graph);
}

}  // namespace

std::unique_ptr<runtime::GraphExecutor> make_executor(const graph::Graph& graph,
                                                      const std::string& backend,
                                                      const std::string& name) {
  if (backend != "aot_eager") return std::make_unique<runtime::EagerExecutor>(graph);
  // Grad mode at trace time is grad mode at run time: every graph guards it.
  if (needs_gradients(graph)) return eager(graph, name, "it needs gradients (AOT autograd is not built yet)");
  std::string why;
  std::optional<prims::Decomposition> decomposition =
      prims::decompose_graph(graph, runtime::grad_mode_enabled(), &why);
  if (!decomposition) return eager(graph, name, "not decomposed: " + why);
  KILN_LOG(prims, "prim graph for " << name << " (" << decomposition->decomposed_calls
                                    << " calls decomposed, " << decomposition->extern_calls
                                    << " externs)\n" << prims::format_prim_graph(*decomposition->graph));
  try {
    auto executor = std::make_unique<runtime::PrimExecutor>(decomposition->graph,
                                                            std::move(decomposition->output));
    stats().prim_graphs++;
    return executor;
  } catch (const runtime::PrimExecutorError& e) {
    return eager(graph, name, e.what());
  }
}

}  // namespace kiln::interpreter
