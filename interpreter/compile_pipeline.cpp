#include "interpreter/compile_pipeline.h"

#include "base/check.h"
#include "base/log.h"
#include "base/python_warning.h"
#include "base/stopwatch.h"
#include "inductor/cpu/kernel_cache.h"
#include "inductor/cuda/cuda_kernel.h"
#include "inductor/fuse_kernels.h"
#include "interpreter/graph_executors.h"
#include "interpreter/size_instances.h"
#include "interpreter/static_regions.h"
#include "prims/common_nodes.h"
#include "prims/channels_last.h"
#include "prims/constant_subgraphs.h"
#include "prims/decompose.h"
#include "runtime/aten_bridge.h"
#include "runtime/constant_inputs_executor.h"
#include "runtime/cuda_graph_executor.h"
#include "runtime/eager_executor.h"

namespace kiln::interpreter {
namespace {

// Every pass's output is checked (cheap: linear in the graph): a pass that
// breaks the graph is a kiln bug, reported as one (compile_graph runs the
// graph eagerly with a RuntimeWarning) rather than left to crash a run.
void verify_pass(const prims::PrimGraph& graph, const char* pass, const std::string& name) {
  const std::string problem = graph.verify();
  KILN_CHECK(problem.empty(), pass << " left an invalid prim graph for " << name << ": " << problem);
}

// The kernel caches' counters, before and after a compile, make kiln.stats()'s.
struct CacheCounts {
  inductor::cpu::KernelCacheCounts cpu = inductor::cpu::kernel_cache_counts();
  inductor::cuda::CudaKernelCacheCounts cuda = inductor::cuda::cuda_kernel_cache_counts();
};

void count_kernels(const CacheCounts& before, const inductor::FusedGraph& fused) {
  const CacheCounts after;
  Stats& s = stats();
  s.kernels += fused.kernels;
  s.kernels_compiled += after.cpu.compiled - before.cpu.compiled + after.cuda.compiled - before.cuda.compiled;
  s.kernel_cache_hits_memory +=
      after.cpu.memory_hits - before.cpu.memory_hits + after.cuda.memory_hits - before.cuda.memory_hits;
  s.kernel_cache_hits_disk += after.cpu.disk_hits - before.cpu.disk_hits + after.cuda.disk_hits - before.cuda.disk_hits;
  s.kernel_cache_rejected +=
      after.cpu.disk_rejected - before.cpu.disk_rejected + after.cuda.disk_rejected - before.cuda.disk_rejected;
  s.cuda_kernels_compiled += after.cuda.compiled - before.cuda.compiled;
  s.cuda_kernel_cache_hits_disk += after.cuda.disk_hits - before.cuda.disk_hits;
  s.cuda_nvrtc_programs += after.cuda.programs - before.cuda.programs;
  s.kernel_buffers_reused += fused.reused_buffers;
  s.gemm_kernels += fused.gemms;
}

// Inductor's passes over one prim graph (a forward, a backward, an
// inference graph): pointwise and reduction groups become compiled kernels
// for the graph's device (inductor/fuse_kernels.h).
prims::PrimGraph kernel_passes(const prims::PrimGraph& graph, const std::string& name, const Settings& settings,
                               bool conv_bias_in_kernels, bool batch_input_casts) {
  const CacheCounts before;
  const base::Stopwatch clock;
  inductor::KernelTargets targets;
  targets.cpu = settings.cpu_kernels;
  targets.cuda = settings.cuda_kernels;
  targets.autotune = settings.autotune;
  targets.autotuned = [] { stats().kernels_autotuned++; };
  targets.cpu_matmul = settings.cpu_matmul;
  targets.gemm_rows_at_run_time = settings.size_instance;
  targets.cuda_runtime_layout = settings.size_instance;
  targets.conv_bias_in_kernels = conv_bias_in_kernels;
  targets.batch_input_casts = batch_input_casts && settings.batch_input_casts;
  // Rewrites for kernels to their fixed point, then the scheduler's groups.
  inductor::KernelPlan plan = inductor::plan_kernels(graph, std::move(targets));
  verify_pass(plan.graph, "plan_kernels", name);
  const double planned = clock.ms();
  // Each group as loop-level IR.
  const std::vector<inductor::LoweredKernel> lowered = inductor::lower_kernels(&plan);
  const double lowered_at = clock.ms();
  // LLVM (ORC JIT) or NVRTC, through the kernel caches.
  const inductor::CompiledKernels compiled = inductor::compile_kernels(plan, lowered);
  const double compiled_at = clock.ms();
  // The graph calling the kernels, ordered, with buffers reused.
  inductor::FusedGraph fused = inductor::emit_kernel_graph(plan, lowered, compiled);
  verify_pass(*fused.graph, "emit_kernel_graph", name);
  count_kernels(before, fused);
  KILN_LOG(perf, "inductor passes on " << name << ": " << clock.ms() << " ms, " << fused.kernels << " kernels ("
                                       << fused.compiled << " compiled): plan " << planned << " ms, lower "
                                       << lowered_at - planned << " ms, compile " << compiled_at - lowered_at
                                       << " ms, emit " << clock.ms() - compiled_at << " ms");
  KILN_LOG(prims, "inductor: " << name << ": " << fused.kernels << " kernels for " << fused.fused_prims
                               << " prims, " << fused.gemms << " GEMMs (" << fused.compiled
                               << " compiled, the rest cached)\n"
                               << prims::format_prim_graph(*fused.graph));
  return std::move(*fused.graph);
}

// The pipeline under `backend` with resolved settings (compile_graph's
// work after a callable backend is ruled out).
std::unique_ptr<runtime::GraphExecutor> compile_resolved(const graph::Graph& graph, const std::string& backend,
                                                         const Settings& settings, const std::string& name) {
  const base::Stopwatch clock;
  // Kernels for the graph's device, when the backend is "inductor" and that
  // target's kernels are on and available (kiln.compile warns once when
  // the CPU's are not).
  const bool kernels = backend == "inductor" && (on_cuda(graph)
                                                     ? settings.cuda_kernels && inductor::cuda_kernels_available()
                                                     : settings.cpu_kernels && inductor::cpu_kernels_available());
  // 0. Symbolic sizes: compiled per size (Note [Size instances]); each
  //    instance comes back through this pipeline with static sizes.
  if ((kernels || backend == "aot_eager") && has_symbolic_sizes(graph)) {
    const std::string refusal = size_instance_refusal(graph);
    // Most of the graph at static sizes (a decoding step): its static
    // regions compile once, the rest replays (Note [Static regions]).
    const StaticRegionCount regions = settings.static_regions ? count_static_regions(graph) : StaticRegionCount{};
    if (static_regions_pay(regions) && !needs_gradients(graph) && grad_leaf_maker(graph) < 0) {
      KILN_LOG(dynamic, name << ": symbolic sizes in " << regions.eager_calls << " of "
                             << regions.eager_calls + regions.static_calls << " calls; " << regions.regions
                             << " static regions compiled once, the rest replayed eagerly");
      stats().static_regions += regions.regions;
      return static_regions_executor(graph, name, [backend, settings](const graph::Graph& g, const std::string& what) {
        return compile_resolved(g, backend, settings, what);
      });
    }
    if (refusal.empty()) {
      KILN_LOG(dynamic, name << ": symbolic sizes, compiled per size");
      Settings instance = settings;
      instance.size_instance = true;
      return size_instance_executor(graph, name, [backend, instance](const graph::Graph& g, const std::string& what) {
        return compile_resolved(g, backend, instance, what);
      });
    }
    KILN_LOG(dynamic, name << ": symbolic sizes, not compiled per size: " << refusal);
  }
  // Grad mode at trace time is grad mode at run time: every graph guards it.
  // A call making a tensor require grad records history in any grad mode.
  const int maker = grad_leaf_maker(graph);
  const bool training = maker >= 0 || needs_gradients(graph);
  std::unique_ptr<runtime::GraphExecutor> executor;
  try {
    if (backend != "aot_eager" && !kernels) {
      executor = std::make_unique<runtime::EagerExecutor>(graph);
    } else if (maker >= 0) {
      // kiln's autograd differentiates with respect to the graph's inputs;
      // a tensor made to require grad inside the graph is none of them.
      executor = eager_fallback(graph, name,
                                "%" + std::to_string(maker) + " = " + graph.node(maker).target_name +
                                    " makes a tensor that requires grad inside the graph, which torch's autograd "
                                    "records (kiln's differentiates with respect to graph inputs only)",
                                backend.c_str());
    } else {
      // 1. Calls that only build the output run after the compiled graph
      //    (Note [Output builders]); the graph compiled returns their inputs.
      OutputSplit split = split_output_builders(graph);
      // 2. Decompose: torch calls -> prims (prims/decompose.h).
      std::string why;
      std::optional<prims::Decomposition> decomposition = prims::decompose_graph(
          graph, runtime::grad_mode_enabled(), &why, split.any ? &split.leaf_output : nullptr,
          split.any ? &split.builders : nullptr);
      if (decomposition) verify_pass(*decomposition->graph, "decompose_graph", name);
      // 3. Common nodes merged (Note [Common nodes]).
      if (prims::PrimGraph merged; decomposition && prims::merge_common_nodes(*decomposition->graph, &merged)) {
        KILN_LOG(prims, "common nodes merged in " << name << ": " << decomposition->graph->nodes().size() << " -> "
                                                  << merged.nodes().size() << " nodes");
        verify_pass(merged, "merge_common_nodes", name);
        remap_outputs(decomposition->output, decomposition->graph->outputs(), merged.outputs());
        decomposition->graph = std::make_shared<prims::PrimGraph>(std::move(merged));
      }
      // 3b. Nodes reading no input run once, at the first call (Note
      //     [Constant subgraphs]); the rest takes their kept values as
      //     inputs after the graph's own.
      std::shared_ptr<const prims::PrimGraph> constants;
      const size_t input_count = decomposition ? decomposition->graph->inputs().size() : 0;
      if (decomposition && settings.constant_subgraphs) {
        if (std::optional<prims::ConstantSplit> split = prims::split_constant_subgraphs(*decomposition->graph)) {
          verify_pass(split->constants, "split_constant_subgraphs (constants)", name);
          verify_pass(split->rest, "split_constant_subgraphs", name);
          KILN_LOG(prims, "constant subgraph of " << name << ": " << split->folded_nodes << " nodes run once, keeping "
                                                  << split->kept.size() << " tensors (" << split->kept_bytes
                                                  << " bytes)\n"
                                                  << prims::format_prim_graph(split->constants));
          remap_outputs(decomposition->output, decomposition->graph->outputs(), split->rest.outputs());
          stats().constant_nodes_folded += split->folded_nodes;
          constants = std::make_shared<const prims::PrimGraph>(std::move(split->constants));
          decomposition->graph = std::make_shared<prims::PrimGraph>(std::move(split->rest));
        }
      }
      // 3c. Convolutions channels-last, the kernels between them following
      //     (Note [Channels-last convolutions]); by default CUDA inference
      //     graphs, the case measured to gain.
      const bool channels_last =
          settings.conv_layout == prims::ConvLayout::ChannelsLast ||
          (settings.conv_layout == prims::ConvLayout::Auto && on_cuda(graph) && !training);
      if (decomposition && kernels && channels_last) {
        std::string refusal;
        if (std::optional<prims::ChannelsLastPlan> plan = prims::plan_channels_last(*decomposition->graph, &refusal)) {
          verify_pass(plan->graph, "plan_channels_last", name);
          stats().channels_last_convolutions += plan->convolutions;
          KILN_LOG(prims, "channels-last plan for " << name << ": " << plan->convolutions << " convolutions, "
                                                    << plan->copies << " layout copies");
          remap_outputs(decomposition->output, decomposition->graph->outputs(), plan->graph.outputs());
          decomposition->graph = std::make_shared<prims::PrimGraph>(std::move(plan->graph));
        } else {
          KILN_LOG(prims, "no channels-last plan for " << name << ": " << refusal);
        }
      }
      if (decomposition) {
        KILN_LOG(perf, "decomposition of " << name << " (common nodes, constant subgraphs): " << clock.ms()
                                           << " ms, " << decomposition->graph->nodes().size() << " nodes");
        KILN_LOG(prims, "prim graph for " << name << " (" << decomposition->decomposed_calls
                                          << " calls decomposed, " << decomposition->extern_calls << " externs)\n"
                                          << prims::format_prim_graph(*decomposition->graph));
      }
      if (!decomposition) {
        why = "not decomposed: " + why;
      } else if (training) {
        // 4. Training: joint forward+backward graph, partitioned, cut into
        //    gradient-bucket stages inside DistributedDataParallel; the
        //    kernel passes run on each forward and backward graph.
        autograd::GraphPass kernel_pass;
        if (kernels) {
          // Note [Convolution biases in kernels]: training graphs only when asked.
          const bool conv_bias = settings.conv_bias == inductor::ConvBiasPlacement::Kernels;
          kernel_pass = [settings, conv_bias](const prims::PrimGraph& g, const std::string& what) {
            return kernel_passes(g, what, settings, conv_bias, /*batch_input_casts=*/true);
          };
        }
        executor = autograd_executor(name, std::move(*decomposition), kernel_pass, settings, &why);
      } else {
        // 4. Inference: the kernel passes, then the prim executor; kernels
        //    reading only parameters keep their results between calls
        //    (Note [Kernels of parameters]), but not under CUDA graphs,
        //    whose replays would not see a kept result go stale.
        std::shared_ptr<prims::PrimGraph> fused;
        try {
          // Kept kernels cast the weights once (Note [Batched weight
          // casts]: a batch could not be kept).
          const bool keep = kernels && on_cuda(graph) && !settings.cuda_graphs && settings.parameter_kernel_cache;
          if (kernels) {
            const bool conv_bias = settings.conv_bias == inductor::ConvBiasPlacement::Kernels ||
                                   (settings.conv_bias == inductor::ConvBiasPlacement::Auto && on_cuda(graph));
            fused = std::make_shared<prims::PrimGraph>(
                kernel_passes(*decomposition->graph, name, settings, conv_bias, /*batch_input_casts=*/!keep));
          }
          executor = inference_executor(std::move(*decomposition), std::move(fused), keep, &why);
        } catch (const std::runtime_error& e) {
          why = e.what();
        }
      }
      if (executor && constants) {
        executor = std::make_unique<runtime::ConstantInputsExecutor>(std::move(constants), std::move(executor),
                                                                     input_count);
      }
      // 5. The output builders after the compiled graph (an eager
      //    fallback replays the whole graph, builders included).
      executor = executor ? with_output_builders(std::move(executor), graph, std::move(split))
                          : eager_fallback(graph, name, why);
    }
  } catch (const std::exception& e) {
    // A kiln bug (base::InternalError) or an exception no pass expected:
    // the graph runs eagerly, said out loud, and the host process lives.
    PyErr_Clear();
    const std::string message = "kiln: internal error compiling " + name + ", which runs eagerly: " + e.what();
    base::warn(PyExc_RuntimeWarning, message);
    executor = eager_fallback(graph, name, std::string("internal error: ") + e.what());
  }
  KILN_LOG(perf, "backend " << backend << " for " << name << ": " << clock.ms() << " ms");
  // 6. mode="reduce-overhead": CUDA graph capture and replay.
  if (!settings.cuda_graphs) return executor;
  const std::string refusal = runtime::cuda_graph_refusal(graph, training);
  if (!refusal.empty()) {
    KILN_LOG(backend, "reduce-overhead: " << name << " runs without CUDA graphs: " << refusal);
    return executor;
  }
  return runtime::make_cuda_graph_executor(std::move(executor), graph, name,
                                           [] { stats().cuda_graphs_captured++; });
}

}  // namespace

std::unique_ptr<runtime::GraphExecutor> compile_graph(const graph::Graph& graph, const CompileConfig& config,
                                                      const std::string& name) {
  // A callable backend (kiln._fx) owns the graph: none of kiln's passes run.
  if (config.backend_callable) return callable_executor(graph, name, config.backend_callable.get());
  return compile_resolved(graph, config.backend, resolve_settings(config), name);
}

}  // namespace kiln::interpreter
