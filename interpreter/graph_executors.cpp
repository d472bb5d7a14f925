#include "interpreter/graph_executors.h"

#include <algorithm>

#include "autograd/derivatives.h"
#include "autograd/joint_graph.h"
#include "autograd/partitioner.h"
#include "base/log.h"
#include "base/module_attr.h"
#include "base/py_ref.h"
#include "base/stopwatch.h"
#include "base/py_text.h"
#include "graph/grad_leaves.h"
#include "interpreter/data_parallel.h"
#include "prims/extern_writes.h"
#include "prims/prim_error.h"
#include "prims/stages.h"
#include "runtime/aten_bridge.h"
#include "runtime/built_output_executor.h"
#include "runtime/callable_backend_executor.h"
#include "runtime/eager_executor.h"
#include "runtime/prim_executor.h"
#include "runtime/staged_executor.h"

namespace kiln::interpreter {

namespace {

// True when some tensor `arg` names (through tuples, lists, dicts) requires
// grad: a node's, or a tensor the trace kept as a constant.
bool reads_grad_tensor(const graph::Graph& graph, const graph::Arg& arg) {
  if (arg.kind == graph::Arg::Kind::Node) {
    for (const graph::TensorMeta& meta : graph.node(arg.node).metas) {
      if (meta.requires_grad) return true;
    }
    return false;
  }
  if (arg.kind == graph::Arg::Kind::Constant) {
    if (arg.constant == nullptr || !runtime::is_tensor(arg.constant)) return false;
    const base::PyRef flag = base::PyRef::steal(PyObject_GetAttrString(arg.constant, "requires_grad"));
    const int grad = flag ? PyObject_IsTrue(flag.get()) : -1;
    if (grad < 0) PyErr_Clear();
    return grad == 1;
  }
  for (const graph::Arg& item : arg.items) {
    if (reads_grad_tensor(graph, item)) return true;
  }
  return false;
}

// Whether `node` is one of torch's ways to make a tensor require grad: a
// factory's requires_grad=True, Tensor.requires_grad_(), nn.Parameter(t).
bool makes_grad_leaf_explicitly(const graph::Node& node) {
  for (const auto& [name, arg] : node.kwargs) {
    if (name == "requires_grad" && arg.kind == graph::Arg::Kind::Constant && arg.constant == Py_True) return true;
  }
  if (node.target_name == "Tensor.requires_grad_") return true;
  static PyObject* parameter = base::import_attr("torch.nn", "Parameter");
  if (parameter == nullptr) PyErr_Clear();
  if (parameter == nullptr || node.target == nullptr || !PyType_Check(node.target)) return false;
  const int subclass = PyObject_IsSubclass(node.target, parameter);
  if (subclass < 0) PyErr_Clear();
  return subclass == 1;
}

}  // namespace

// Without grad mode any call whose result requires grad from no argument
// that does made it so (the only way a result records history there: a
// view keeps its base's requires_grad under no_grad, as timm's ConvNeXt's
// gamma.reshape(1, -1, 1, 1) in every block, and records nothing). With
// grad mode on only torch's explicit ways count: an in-place write of a
// value requiring grad into a tensor that did not (x[0] = y) makes later
// reads of it require grad, which the metas of the graph's arguments,
// taken before the write, do not show (fuzz seeds of session 26).
int grad_leaf_maker(const graph::Graph& graph) {
  const bool grad_mode = runtime::grad_mode_enabled();
  for (const graph::Node& node : graph.nodes()) {
    if (node.kind != graph::NodeKind::Call) continue;
    bool requires_grad = false;
    for (const graph::TensorMeta& meta : node.metas) requires_grad = requires_grad || meta.requires_grad;
    if (!requires_grad || graph::is_unobservable_grad_leaf(graph, node)) continue;
    if (makes_grad_leaf_explicitly(node)) return node.id;
    if (grad_mode) continue;
    bool carried = false;
    for (const graph::Arg& arg : node.args) carried = carried || reads_grad_tensor(graph, arg);
    for (const auto& [name, arg] : node.kwargs) carried = carried || reads_grad_tensor(graph, arg);
    if (!carried) return node.id;
  }
  return -1;
}

bool needs_gradients(const graph::Graph& graph) {
  if (!runtime::grad_mode_enabled()) return false;
  for (const graph::Node& node : graph.nodes()) {
    for (const graph::TensorMeta& meta : node.metas) {
      if (meta.requires_grad) return true;
    }
  }
  return false;
}

bool on_cuda(const graph::Graph& graph) {
  for (int id : graph.inputs()) {
    for (const graph::TensorMeta& meta : graph.node(id).metas) {
      if (meta.device_type == graph::DeviceType::CUDA) return true;
    }
  }
  return false;
}

std::unique_ptr<runtime::GraphExecutor> eager_fallback(const graph::Graph& graph, const std::string& name,
                                                       const std::string& why, const char* backend) {
  stats().prim_fallbacks++;
  KILN_LOG(backend, backend << ": " << name << " runs eagerly: " << why);
  return std::make_unique<runtime::EagerExecutor>(graph);
}

Settings resolve_settings(const CompileConfig& config) {
  Settings s;
  s.cuda_graphs = config.cuda_graphs;
  s.autotune = config.autotune;
  s.cpu_kernels = config.settings.cpu_kernels.value_or(cpu_kernels());
  s.cuda_kernels = config.settings.cuda_kernels.value_or(cuda_kernels());
  s.parameter_kernel_cache = config.settings.parameter_kernel_cache.value_or(parameter_kernel_cache());
  s.constant_subgraphs = config.settings.constant_subgraphs.value_or(constant_subgraphs());
  s.batch_input_casts = config.settings.batch_input_casts.value_or(batch_input_casts());
  s.static_regions = config.settings.static_regions.value_or(static_regions());
  s.cpu_matmul = config.settings.cpu_matmul.value_or(cpu_matmul());
  s.conv_layout = config.settings.conv_layout.value_or(conv_layout());
  s.conv_bias = config.settings.conv_bias.value_or(conv_bias());
  s.gradient_bucket_bytes = active_ddp_bucket_bytes();
  return s;
}

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

namespace {

// The autograd executor of one forward graph: its joint forward+backward
// graph, partitioned, run as a torch.autograd.Function returning `output`.
// Throws where kiln's autograd cannot take the graph.
std::unique_ptr<runtime::GraphExecutor> function_executor(const std::string& name, const prims::PrimGraph& forward,
                                                          const std::vector<bool>& requires_grad, graph::Arg output,
                                                          const autograd::GraphPass& kernels) {
  const base::Stopwatch clock;
  autograd::JointGraph joint = autograd::build_joint_graph(forward, requires_grad);
  autograd::Partition partition = autograd::partition_joint_graph(joint);
  KILN_LOG(perf, "joint graph and partition of " << name << ": " << clock.ms() << " ms");
  KILN_LOG(prims, "forward graph for " << name << " (saves " << partition.saved_count << " values, "
                                       << partition.saved_bytes << " bytes)\n"
                                       << prims::format_prim_graph(partition.forward)
                                       << "backward graph for " << name << "\n"
                                       << prims::format_prim_graph(partition.backward));
  autograd::GraphPass finish;
  if (kernels) {
    finish = [name, kernels](const prims::PrimGraph& graph, const std::string& what) {
      return kernels(graph, name + " (" + what + ")");
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
                                                        const autograd::GraphPass& kernels, int64_t bucket_bytes) {
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
    pieces.push_back({function_executor(piece, stage.graph, wants, std::move(returned), kernels),
                      stage.inputs, stage.outputs});
  }
  KILN_LOG(backend, name << ": cut into " << stages.size() << " autograd stages, about "
                         << bucket_bytes << " bytes of gradients each (DistributedDataParallel)");
  return std::make_unique<runtime::StagedExecutor>(std::move(pieces), forward.inputs(), std::move(output),
                                                   static_cast<int>(forward.values().size()));
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
    if (node.prim == prims::Prim::Extern && prims::extern_writes_arguments(node.attrs)) {
      KILN_LOG(prims, "kernels of parameters: none kept, extern " << node.attrs.target_name << " writes its arguments");
      return keep;
    }
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
  KILN_LOG(prims, "kernels of parameters: " << std::count(keep.begin(), keep.end(), true)
                                            << " kernels keep their results between calls");
  return keep;
}

}  // namespace

std::unique_ptr<runtime::GraphExecutor> autograd_executor(const std::string& name, prims::Decomposition decomposition,
                                                          const autograd::GraphPass& kernels,
                                                          const Settings& settings, std::string* why) {
  const prims::PrimGraph& forward = *decomposition.graph;
  std::vector<bool> requires_grad;
  for (int id : forward.inputs()) requires_grad.push_back(forward.value(id).meta.requires_grad);
  try {
    const std::vector<int> cuts =
        settings.gradient_bucket_bytes > 0
            ? prims::gradient_bucket_cuts(forward, requires_grad, settings.gradient_bucket_bytes)
            : std::vector<int>{};
    if (!cuts.empty()) {
      return staged_executor(name, forward, requires_grad, cuts, std::move(decomposition.output), kernels,
                             settings.gradient_bucket_bytes);
    }
    return function_executor(name, forward, requires_grad, std::move(decomposition.output), kernels);
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

std::unique_ptr<runtime::GraphExecutor> inference_executor(prims::Decomposition decomposition,
                                                           std::shared_ptr<prims::PrimGraph> fused,
                                                           bool keep_parameter_kernels, std::string* why) {
  try {
    std::shared_ptr<prims::PrimGraph> prim_graph = decomposition.graph;
    graph::Arg output = std::move(decomposition.output);
    if (fused) {
      remap_outputs(output, prim_graph->outputs(), fused->outputs());
      prim_graph = std::move(fused);
    }
    auto executor = std::make_unique<runtime::PrimExecutor>(prim_graph, std::move(output));
    if (keep_parameter_kernels) executor->memoize_nodes(parameter_kernel_nodes(*prim_graph));
    stats().prim_graphs++;
    return executor;
  } catch (const runtime::PrimExecutorError& e) {
    *why = e.what();
  } catch (const std::runtime_error& e) {
    *why = e.what();
  }
  return nullptr;
}

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

std::unique_ptr<runtime::GraphExecutor> with_output_builders(std::unique_ptr<runtime::GraphExecutor> executor,
                                                             const graph::Graph& graph, OutputSplit split) {
  if (!split.any) return executor;
  return std::make_unique<runtime::BuiltOutputExecutor>(std::move(executor), graph, std::move(split.builders),
                                                        std::move(split.leaves));
}

// The user's backend gets tensors out, as Dynamo's graphs give them; the
// output is built after it.
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
  return eager_fallback(graph, name, "kiln._fx could not build the GraphModule: " + why, "callable backend");
}

}  // namespace kiln::interpreter
