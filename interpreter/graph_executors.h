// The executors a compiled graph runs through, built from the products of
// the compile pipeline's passes (interpreter/compile_pipeline.cpp): eager
// replay, a callable backend's GraphModule, the prim executor of an
// inference graph, and kiln's autograd Function (one per gradient bucket
// inside DistributedDataParallel) of a training graph.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/function_bridge.h"
#include "graph/graph.h"
#include "inductor/conv_bias_placement.h"
#include "inductor/matmul_policy.h"
#include "interpreter/compile_config.h"
#include "prims/decompose.h"
#include "runtime/graph_executor.h"

namespace kiln::interpreter {

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
  bool constant_subgraphs = true;
  bool batch_input_casts = true;  // Note [Batched weight casts]
  bool static_regions = true;
  inductor::MatmulPolicy cpu_matmul = inductor::MatmulPolicy::Auto;
  prims::ConvLayout conv_layout = prims::ConvLayout::Auto;
  inductor::ConvBiasPlacement conv_bias = inductor::ConvBiasPlacement::Auto;
  // Compiled inside DistributedDataParallel's forward: its bucket size, by
  // which training graphs are cut (Note [Gradient buckets]); 0 otherwise.
  int64_t gradient_bucket_bytes = 0;
  // One size of a graph with symbolic sizes (Note [Size instances]): its
  // GEMMs read m at run time (Note [GEMM rows at run time]), a slower
  // compile that every later size reuses.
  bool size_instance = false;
};

// `config`'s settings, with the process-wide kiln.config now for the rest.
Settings resolve_settings(const CompileConfig& config);

// True when grad mode is on and some value of the graph requires grad
// (with grad_leaf_maker, whether running it records autograd history).
bool needs_gradients(const graph::Graph& graph);

// The id of a call node that makes a tensor require grad from none that
// does (torch.ones(requires_grad=True), requires_grad_()), or -1. kiln's
// autograd differentiates with respect to graph inputs only, so such a
// graph runs on the eager executor, where torch records it.
int grad_leaf_maker(const graph::Graph& graph);

// True when some input of the graph is a CUDA tensor (its kernels would be
// CUDA kernels).
bool on_cuda(const graph::Graph& graph);

// The eager replay of `graph`, with a `backend` log line saying why and the
// prim_fallbacks counter bumped.
std::unique_ptr<runtime::GraphExecutor> eager_fallback(const graph::Graph& graph, const std::string& name,
                                                       const std::string& why, const char* backend = "aot_eager");

// The executor of a callable backend (kiln._fx). The user's backend owns
// the graph: no decomposition and no CUDA graphs of kiln's.
std::unique_ptr<runtime::GraphExecutor> callable_executor(const graph::Graph& graph, const std::string& name,
                                                          PyObject* backend_callable);

// Note [Output builders] for a backend: the nodes that only build the
// output, and what the graph compiled without them returns instead.
struct OutputSplit {
  std::vector<bool> builders;
  std::vector<int> leaves;
  graph::Arg leaf_output;  // the tuple of the leaves
  bool any = false;
};
OutputSplit split_output_builders(const graph::Graph& graph);

// `executor` (of the graph without its output builders) followed by the
// builders, when `split` has any.
std::unique_ptr<runtime::GraphExecutor> with_output_builders(std::unique_ptr<runtime::GraphExecutor> executor,
                                                             const graph::Graph& graph, OutputSplit split);

// A graph that records gradients: its joint forward+backward graph,
// partitioned, run as one torch.autograd.Function, or one per gradient
// bucket inside DistributedDataParallel's forward (Note [Gradient
// buckets]); `kernels` (when set) rewrites each forward and backward graph
// before it runs. Null, with *why set, where kiln's autograd cannot take it.
std::unique_ptr<runtime::GraphExecutor> autograd_executor(const std::string& name, prims::Decomposition decomposition,
                                                          const autograd::GraphPass& kernels,
                                                          const Settings& settings, std::string* why);

// An inference graph run by the prim executor; `fused` (the decomposition's
// graph after the kernel passes, or null) replaces the decomposition's
// graph. Kernels reading only parameters keep their results between calls
// where `keep_parameter_kernels`. Null, with *why set, where the prim
// executor cannot take the graph.
std::unique_ptr<runtime::GraphExecutor> inference_executor(prims::Decomposition decomposition,
                                                           std::shared_ptr<prims::PrimGraph> fused,
                                                           bool keep_parameter_kernels, std::string* why);

// Rewrites the Node refs of `arg` from `before`'s output ids to `after`'s
// (same positions).
void remap_outputs(graph::Arg& arg, const std::vector<int>& before, const std::vector<int>& after);

}  // namespace kiln::interpreter
