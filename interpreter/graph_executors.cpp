#include "interpreter/backends.h"

#include <algorithm>

#include "autograd/derivatives.h"
#include "autograd/function_bridge.h"
#include "autograd/joint_graph.h"
#include "autograd/partitioner.h"
#include "inductor/cpu/kernel_cache.h"
#include "inductor/cuda/cuda_kernel.h"
#include "inductor/fuse_kernels.h"
#include "inductor/schedule.h"
#include "prims/prim_error.h"

#include "interpreter/compile_config.h"
#include "interpreter/data_parallel.h"
#include "prims/common_nodes.h"
#include "prims/decompose.h"
#include "prims/stages.h"
#include "runtime/aten_bridge.h"
#include "runtime/built_output_executor.h"
#include "runtime/callable_backend_executor.h"
#include "runtime/eager_executor.h"
#include "runtime/cuda_graph_executor.h"
#include "base/python_warning.h"
#include "base/log.h"
#include "runtime/prim_executor.h"
#include "base/py_text.h"
#include "runtime/staged_executor.h"
#include "base/stopwatch.h"

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

// True when some input of the graph is a CUDA tensor (its kernels would be
// CUDA kernels).
bool on_cuda(const graph::Graph& graph) {
  for (int id : graph.inputs()) {
    for (const graph::TensorMeta& meta : graph.node(id).metas) {
      if (meta.device_type == graph::DeviceType::CUDA) return true;
    }
  }
  return false;
}

std::unique_ptr<runtime::GraphExecutor> eager(const graph::Graph& graph, const std::string& name,
                                              const std::string& why, const char* backend = "aot_eager") {
  stats().prim_fallbacks++;
  KILN_LOG(backend, backend << ": " << name << " runs eagerly: " << why);
  return std::make_unique<runtime::EagerExecutor>(graph);
}

// A compile's settings, resolved when its graph is compiled: its mode and
// options=, the process-wide kiln.config for what options= left unset.
// Kept by value in graphs built later (a backward variant), so they are
// compiled as the first was.
struct Settings {
  bool cuda_graphs = false;  // mode="reduce-overhead"
  bool autotune = false;     // mode="max-autotune"
  bool cpu_kernels = true;
  bool cuda_kernels = true;
  bool parameter_kernel_cache = true;
  inductor::MatmulPolicy cpu_matmul = inductor::MatmulPolicy::Auto;
  // Compiled inside DistributedDataParallel's forward: its bucket size, by
  // which training graphs are cut (Note [Gradient buckets]); 0 otherwise.
  int64_t gradient_bucket_bytes = 0;
};

Settings resolve_settings(const CompileConfig& config) {
  Settings s;
  s.cuda_graphs = config.cuda_graphs;
  s.autotune = config.autotune;
  s.cpu_kernels = config.settings.cpu_kernels.value_or(cpu_kernels());
  s.cuda_kernels = config.settings.cuda_kernels.value_or(cuda_kernels());
  s.parameter_kernel_cache = config.settings.parameter_kernel_cache.value_or(parameter_kernel_cache());
  s.cpu_matmul = config.settings.cpu_matmul.value_or(cpu_matmul());
  s.gradient_bucket_bytes = active_ddp_bucket_bytes();
  return s;
}

// The inductor's rewrite of a prim graph: pointwise groups become compiled
// kernels (inductor/fuse_kernels.h), CUDA ones autotuned at their first
// launch under mode="max-autotune"; logged and counted.
prims::PrimGraph with_kernels(const prims::PrimGraph& graph, const std::string& name, const Settings& settings) {
  const inductor::cpu::KernelCacheCounts before = inductor::cpu::kernel_cache_counts();
  const inductor::cuda::CudaKernelCacheCounts cuda_before = inductor::cuda::cuda_kernel_cache_counts();
  inductor::KernelTargets targets;
  targets.cpu = settings.cpu_kernels;
  targets.cuda = settings.cuda_kernels;
  targets.autotune = settings.autotune;
  targets.autotuned = [] { stats().kernels_autotuned++; };
  targets.cpu_matmul = settings.cpu_matmul;
  const base::Stopwatch clock;
  inductor::FusedGraph fused = inductor::fuse_pointwise_kernels(graph, targets);
  KILN_LOG(perf, "inductor pass on " << name << ": " << clock.ms() << " ms, " << fused.kernels << " kernels ("
                                     << fused.compiled << " compiled)");
  const inductor::cpu::KernelCacheCounts after = inductor::cpu::kernel_cache_counts();
  const inductor::cuda::CudaKernelCacheCounts cuda_after = inductor::cuda::cuda_kernel_cache_counts();
  stats().kernels += fused.kernels;
  stats().kernels_compiled += after.compiled - before.compiled + cuda_after.compiled - cuda_before.compiled;
  stats().kernel_cache_hits_memory +=
      after.memory_hits - before.memory_hits + cuda_after.memory_hits - cuda_before.memory_hits;
  stats().kernel_cache_hits_disk += after.disk_hits - before.disk_hits + cuda_after.disk_hits - cuda_before.disk_hits;
  stats().kernel_cache_rejected +=
      after.disk_rejected - before.disk_rejected + cuda_after.disk_rejected - cuda_before.disk_rejected;
  stats().cuda_kernels_compiled += cuda_after.compiled - cuda_before.compiled;
  stats().cuda_kernel_cache_hits_disk += cuda_after.disk_hits - cuda_before.disk_hits;
  stats().kernel_buffers_reused += fused.reused_buffers;
  stats().gemm_kernels += fused.gemms;
  KILN_LOG(prims, "inductor: " << name << ": " << fused.kernels << " kernels for " << fused.fused_prims
                               << " prims, " << fused.gemms << " GEMMs (" << fused.compiled
                               << " compiled, the rest cached)\n"
                               << prims::format_prim_graph(*fused.graph));
  return std::move(*fused.graph);
}

// Rewrites the Node refs of `arg` from `before`'s output ids to `after`'s
// (same positions).
void remap_outputs(graph::Arg& arg, const std::vector<int>& before, const std::vector<int>& after) {
  if (arg.kind == graph::Arg::Kind::Node) {
    for (size_t k = 0; k < before.size(); ++k) {
      if (before[k] == arg.node) {
        arg.node = after[k];
        break;
      }
    }
  }
  for (graph::Arg& item : arg.items) remap_outputs(item, before, after);
}

// The autograd executor of one forward graph: its joint forward+backward
// graph, partitioned, run as a torch.autograd.Function returning `output`.
// Throws where kiln's autograd cannot take the graph.
std::unique_ptr<runtime::GraphExecutor> function_executor(const std::string& name, const prims::PrimGraph& forward,
                                                          const std::vector<bool>& requires_grad, graph::Arg output,
                                                          bool kernels, const Settings& settings) {
  autograd::JointGraph joint = autograd::build_joint_graph(forward, requires_grad);
  autograd::Partition partition = autograd::partition_joint_graph(joint);
  KILN_LOG(prims, "forward graph for " << name << " (saves " << partition.saved_count << " values, "
                                       << partition.saved_bytes << " bytes)\n"
                                       << prims::format_prim_graph(partition.forward)
                                       << "backward graph for " << name << "\n"
                                       << prims::format_prim_graph(partition.backward));
  autograd::GraphPass finish;
  if (kernels) {
    finish = [name, settings](const prims::PrimGraph& graph, const std::string& what) {
      return with_kernels(graph, name + " (" + what + ")", settings);
    };
  }
  auto executor = autograd::make_autograd_executor(std::move(partition), std::move(output), joint.forward_outputs,
                                                   static_cast<int>(forward.values().size()), finish);
  stats().prim_graphs++;
  stats().autograd_graphs++;
  return executor;
}

// `forward` cut at `cuts` into stages, each its own autograd Function
// (Note [Gradient buckets] in prims/stages.cpp), run one after another.
std::unique_ptr<runtime::GraphExecutor> staged_executor(const std::string& name, const prims::PrimGraph& forward,
                                                        const std::vector<bool>& requires_grad,
                                                        const std::vector<int>& cuts, graph::Arg output,
                                                        bool kernels, const Settings& settings) {
  std::vector<prims::Stage> stages = prims::split_stages(forward, cuts);
  const std::vector<bool> carries = autograd::values_requiring_grad(forward, requires_grad);
  std::vector<runtime::ExecutorStage> pieces;
  for (size_t k = 0; k < stages.size(); ++k) {
    const prims::Stage& stage = stages[k];
    std::vector<bool> wants;
    for (int id : stage.inputs) wants.push_back(carries[id]);
    graph::Arg returned;
    returned.kind = graph::Arg::Kind::Tuple;
    for (int id : stage.graph.outputs()) returned.items.push_back(graph::Arg::of_node(id));
    const std::string piece = name + " (stage " + std::to_string(k + 1) + " of " + std::to_string(stages.size()) + ")";
    pieces.push_back({function_executor(piece, stage.graph, wants, std::move(returned), kernels, settings),
                      stage.inputs, stage.outputs});
  }
  KILN_LOG(backend, name << ": cut into " << stages.size() << " autograd stages, about "
                         << settings.gradient_bucket_bytes << " bytes of gradients each (DistributedDataParallel)");
  return std::make_unique<runtime::StagedExecutor>(std::move(pieces), forward.inputs(), std::move(output),
                                                   static_cast<int>(forward.values().size()));
}

// A graph that records gradients: one autograd Function, or one per
// gradient bucket inside DistributedDataParallel's forward. Null, with
// *why set, where kiln's autograd cannot take the graph.
std::unique_ptr<runtime::GraphExecutor> autograd_executor(const std::string& name,
                                                          prims::Decomposition decomposition,
                                                          bool kernels, const Settings& settings, std::string* why) {
  const prims::PrimGraph& forward = *decomposition.graph;
  std::vector<bool> requires_grad;
  for (int id : forward.inputs()) requires_grad.push_back(forward.value(id).meta.requires_grad);
  try {
    const std::vector<int> cuts =
        settings.gradient_bucket_bytes > 0
            ? prims::gradient_bucket_cuts(forward, requires_grad, settings.gradient_bucket_bytes)
            : std::vector<int>{};
    if (!cuts.empty()) {
      return staged_executor(name, forward, requires_grad, cuts, std::move(decomposition.output), kernels, settings);
    }
    return function_executor(name, forward, requires_grad, std::move(decomposition.output), kernels, settings);
  } catch (const autograd::NoDerivative& e) {
    *why = std::string("no derivative: ") + e.what();
  } catch (const prims::PrimError& e) {
    *why = std::string("autograd: ") + e.what();
  } catch (const runtime::PrimExecutorError& e) {
    *why = e.what();
  } catch (const std::runtime_error& e) {
    *why = e.what();
  }
  return nullptr;
}

// Per node of a fused inference graph, whether its result may be kept
// between calls (Note [Kernels of parameters] in runtime/prim_executor.cpp):
// a kiln kernel reading graph inputs only, whose results are no graph
// output, in a graph where no extern writes into a tensor. Whether those
// inputs are parameters is the executor's check at each call.
std::vector<bool> parameter_kernel_nodes(const prims::PrimGraph& graph) {
  const size_t count = graph.nodes().size();
  std::vector<bool> keep(count, false);
  for (const prims::PrimNode& node : graph.nodes()) {
    if (node.prim == prims::Prim::Extern && autograd::extern_writes(node.attrs)) return keep;
  }
  std::vector<bool> output(graph.values().size(), false);
  for (int id : graph.outputs()) output[id] = true;
  for (size_t n = 0; n < count; ++n) {
    const prims::PrimNode& node = graph.node(n);
    if (node.prim != prims::Prim::Extern || node.attrs.target_name.rfind("kernel ", 0) != 0) continue;
    const std::vector<int> reads = prims::node_reads(node);
    bool eligible = !reads.empty();
    for (int id : reads) eligible = eligible && graph.value(id).node < 0;
    for (int id : node.outputs) eligible = eligible && !output[id];
    keep[n] = eligible;
  }
  return keep;
}

// Null, with *why set, where the prim executor cannot take the graph.
std::unique_ptr<runtime::GraphExecutor> inference_executor(const std::string& name,
                                                           prims::Decomposition decomposition, bool kernels,
                                                           bool keep_parameter_kernels, const Settings& settings,
                                                           std::string* why) {
  try {
    std::shared_ptr<prims::PrimGraph> prim_graph = decomposition.graph;
    graph::Arg output = std::move(decomposition.output);
    if (kernels) {
      auto fused = std::make_shared<prims::PrimGraph>(with_kernels(*prim_graph, name, settings));
      remap_outputs(output, prim_graph->outputs(), fused->outputs());
      prim_graph = std::move(fused);
    }
    auto executor = std::make_unique<runtime::PrimExecutor>(prim_graph, std::move(output));
    if (kernels && keep_parameter_kernels && settings.parameter_kernel_cache) {
      executor->memoize_nodes(parameter_kernel_nodes(*prim_graph));
    }
    stats().prim_graphs++;
    return executor;
  } catch (const runtime::PrimExecutorError& e) {
    *why = e.what();
  } catch (const std::runtime_error& e) {
    *why = e.what();
  }
  return nullptr;
}

// Note [Output builders] for a backend: the nodes that only build the
// output, and what the graph compiled without them returns instead.
struct OutputSplit {
  std::vector<bool> builders;
  std::vector<int> leaves;
  graph::Arg leaf_output;  // the tuple of the leaves
  bool any = false;
};

OutputSplit split_output_builders(const graph::Graph& graph) {
  OutputSplit split;
  split.builders = runtime::output_builders(graph);
  split.any = std::find(split.builders.begin(), split.builders.end(), true) != split.builders.end();
  if (!split.any) return split;
  split.leaves = runtime::output_builder_leaves(graph, split.builders);
  split.leaf_output.kind = graph::Arg::Kind::Tuple;
  for (int leaf : split.leaves) split.leaf_output.items.push_back(graph::Arg::of_node(leaf));
  return split;
}

// The executor of a callable backend (kiln._fx). The user's backend owns
// the graph: no decomposition and no CUDA graphs of kiln's. It gets tensors
// out, as Dynamo's graphs give them; the output is built after it.
std::unique_ptr<runtime::GraphExecutor> callable_executor(const graph::Graph& graph, const std::string& name,
                                                          PyObject* backend_callable) {
  OutputSplit split = split_output_builders(graph);
  auto executor = split.any ? std::make_unique<runtime::CallableBackendExecutor>(
                                  graph, backend_callable, &split.builders, &split.leaf_output)
                            : std::make_unique<runtime::CallableBackendExecutor>(graph, backend_callable);
  if (executor->ok() && !split.any) return executor;
  if (executor->ok()) {
    return std::make_unique<runtime::BuiltOutputExecutor>(std::move(executor), graph, std::move(split.builders),
                                                          std::move(split.leaves));
  }
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  const std::string why = value ? base::py_repr(value) : "no error given";
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return eager(graph, name, "kiln._fx could not build the GraphModule: " + why, "callable backend");
}

}  // namespace

// The executor for `graph` under `backend`, before CUDA graphs.
// `settings.cuda_graphs`: the executor will be captured into CUDA graphs,
// whose replays would not see a kept parameter kernel go stale.
std::unique_ptr<runtime::GraphExecutor> backend_executor(const graph::Graph& graph, const std::string& backend,
                                                         const std::string& name, const Settings& settings) {
  // "inductor": aot_eager's pipeline with pointwise and reduction groups
  // compiled to kernels, CPU or CUDA by where the graph's inputs live; with
  // that target's kernels off or unavailable it replays the graph eagerly
  // (kiln.compile warns once for the CPU).
  const bool kernels =
      backend == "inductor" && (on_cuda(graph) ? settings.cuda_kernels && inductor::cuda_kernels_available()
                                               : settings.cpu_kernels && inductor::cpu_kernels_available());
  if (backend != "aot_eager" && !kernels) return std::make_unique<runtime::EagerExecutor>(graph);
  // Grad mode at trace time is grad mode at run time: every graph guards it.
  const bool training = needs_gradients(graph);
  // Calls that only build the output run after the compiled graph (Note
  // [Output builders]); the graph compiled returns their inputs.
  OutputSplit split = split_output_builders(graph);
  std::string why;
  std::optional<prims::Decomposition> decomposition = prims::decompose_graph(
      graph, runtime::grad_mode_enabled(), &why, split.any ? &split.leaf_output : nullptr,
      split.any ? &split.builders : nullptr);
  if (!decomposition) return eager(graph, name, "not decomposed: " + why);
  if (prims::PrimGraph merged; prims::merge_common_nodes(*decomposition->graph, &merged)) {
    KILN_LOG(prims, "common nodes merged in " << name << ": " << decomposition->graph->nodes().size() << " -> "
                                              << merged.nodes().size() << " nodes");
    remap_outputs(decomposition->output, decomposition->graph->outputs(), merged.outputs());
    decomposition->graph = std::make_shared<prims::PrimGraph>(std::move(merged));
  }
  KILN_LOG(prims, "prim graph for " << name << " (" << decomposition->decomposed_calls
                                    << " calls decomposed, " << decomposition->extern_calls
                                    << " externs)\n" << prims::format_prim_graph(*decomposition->graph));
  std::unique_ptr<runtime::GraphExecutor> executor =
      training ? autograd_executor(name, std::move(*decomposition), kernels, settings, &why)
               : inference_executor(name, std::move(*decomposition), kernels,
                                    on_cuda(graph) && !settings.cuda_graphs, settings, &why);
  if (!executor) return eager(graph, name, why);
  if (!split.any) return executor;
  return std::make_unique<runtime::BuiltOutputExecutor>(std::move(executor), graph, std::move(split.builders),
                                                        std::move(split.leaves));
}

std::unique_ptr<runtime::GraphExecutor> make_executor(const graph::Graph& graph, const CompileConfig& config,
                                                      const std::string& name) {
  if (config.backend_callable) return callable_executor(graph, name, config.backend_callable.get());
  const Settings settings = resolve_settings(config);
  const base::Stopwatch clock;
  std::unique_ptr<runtime::GraphExecutor> executor;
  try {
    executor = backend_executor(graph, config.backend, name, settings);
  } catch (const std::exception& e) {
    // A kiln bug (base::InternalError) or an exception no pass expected:
    // the graph runs eagerly, said out loud, and the host process lives.
    PyErr_Clear();
    const std::string message = "kiln: internal error compiling " + name + ", which runs eagerly: " + e.what();
    base::warn(PyExc_RuntimeWarning, message);
    executor = eager(graph, name, std::string("internal error: ") + e.what());
  }
  KILN_LOG(perf, "backend " << config.backend << " for " << name << ": " << clock.ms() << " ms");
  if (!settings.cuda_graphs) return executor;
  const std::string refusal = runtime::cuda_graph_refusal(graph, needs_gradients(graph));
  if (!refusal.empty()) {
    KILN_LOG(backend, "reduce-overhead: " << name << " runs without CUDA graphs: " << refusal);
    return executor;
  }
  return runtime::make_cuda_graph_executor(std::move(executor), graph, name,
                                           [] { stats().cuda_graphs_captured++; });
}

}  // namespace kiln::interpreter
