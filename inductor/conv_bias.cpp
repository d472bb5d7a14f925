#include "inductor/conv_bias.h"

#include <vector>

#include "inductor/conv_bias_placement.h"
#include "inductor/node_rewrite.h"
#include "prims/extern_writes.h"
#include "prims/prim_builder.h"
#include "prims/prim_error.h"
#include "prims/subgraph.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Convolution biases in kernels]
// torch's CUDA convolution adds its bias after cuDNN returns, as a kernel of
// its own (at::_convolution: output.add_(bias.reshape(...))): one more read
// and write of the whole output per convolution. In timm's ConvNeXt that is
// 22 elementwise kernels a step, ~8% of the H100's inference time, where
// torch.compile calls the convolution without its bias and adds it inside
// the kernel that reads the output (its layer norm). So on the GPU a
// convolution with a bias, whose output some prim (a kernel-to-be) reads,
// becomes the call without bias plus an add of the bias viewed as
// [1, C, 1, ...]; the scheduler fuses that add into the readers' kernels.
// Numerics: torch rounds the convolution to its dtype, then adds and rounds
// again; here the first rounding is the same and the add happens in the
// reader's float arithmetic (one rounding fewer where it fuses).
// Convolutions only externs read keep their bias: the add would be a kernel
// of its own, as in torch. By default CUDA inference graphs only
// (kiln.config.conv_bias "auto", KernelTargets::conv_bias_in_kernels):
// measured on the H100's ConvNeXt inference rows (0.99x -> 1.09x and
// 1.00x -> 1.18x torch.compile); a training forward would gain alike in
// principle but was not measured side by side ("kernels" applies it to
// every graph, CPU ones too, which is how the tests run it).

bool is_convolution(const PrimNode& node) {
  if (node.prim != Prim::Extern || node.outputs.size() != 1) return false;
  const std::string& name = node.attrs.target_name;
  return name == "F.conv1d" || name == "F.conv2d" || name == "F.conv3d";
}

// Where a convolution's bias is: its third argument or its `bias` keyword
// (`Attrs`: PrimAttrs, const or not).
template <typename Attrs>
auto* bias_arg(Attrs& attrs) {
  if (attrs.extern_args.size() > 2) return &attrs.extern_args[2];
  for (auto& [name, arg] : attrs.extern_kwargs) {
    if (name == "bias") return &arg;
  }
  return static_cast<decltype(&attrs.extern_args[0])>(nullptr);
}

// Per value: a prim node other than an extern reads it.
std::vector<bool> read_by_kernels(const PrimGraph& graph) {
  std::vector<bool> read(graph.values().size(), false);
  for (const PrimNode& node : graph.nodes()) {
    if (node.prim == Prim::Extern) continue;
    for (int id : prims::node_reads(node)) read[id] = true;
  }
  return read;
}

// The bias value of a convolution that qualifies, or -1.
int movable_bias(const PrimGraph& graph, const PrimNode& node, const std::vector<bool>& kernel_read) {
  if (!is_convolution(node)) return -1;
  const graph::Arg* bias = bias_arg(node.attrs);
  if (bias == nullptr || bias->kind != graph::Arg::Kind::Node) return -1;
  const graph::TensorMeta& out = graph.value(node.outputs[0]).meta;
  const graph::TensorMeta& b = graph.value(bias->node).meta;
  if (out.sizes.size() < 3) return -1;
  if (b.sizes.size() != 1 || b.sizes[0] != out.sizes[1] || b.dtype != out.dtype) return -1;
  if (!kernel_read[node.outputs[0]]) return -1;
  return bias->node;
}

}  // namespace

const char* conv_bias_name(ConvBiasPlacement placement) {
  switch (placement) {
    case ConvBiasPlacement::Auto: return "auto";
    case ConvBiasPlacement::Kernels: return "kernels";
    case ConvBiasPlacement::Convolution: return "convolution";
  }
  return "auto";
}

std::optional<ConvBiasPlacement> conv_bias_from_name(const std::string& name) {
  for (ConvBiasPlacement placement :
       {ConvBiasPlacement::Auto, ConvBiasPlacement::Kernels, ConvBiasPlacement::Convolution}) {
    if (name == conv_bias_name(placement)) return placement;
  }
  return std::nullopt;
}

bool move_conv_biases_into_kernels(const PrimGraph& graph, PrimGraph* out) {
  const std::vector<bool> kernel_read = read_by_kernels(graph);
  std::vector<int> bias_of(graph.nodes().size(), -1);
  bool any = false;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    bias_of[n] = movable_bias(graph, graph.node(n), kernel_read);
    any = any || bias_of[n] >= 0;
  }
  if (!any) return false;
  auto action = [&](size_t n) { return bias_of[n] < 0 ? NodeAction::Copy : NodeAction::Replace; };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    const PrimNode& node = graph.node(n);
    PrimNode unbiased = node;
    *bias_arg(unbiased.attrs) = graph::Arg::of_constant(Py_None);
    const int conv = prims::copy_node(b.graph(), graph, unbiased, map).at(0);
    const prims::PrimValue& traced = graph.value(node.outputs[0]);
    std::vector<int64_t> channels(traced.meta.sizes.size(), 1);
    channels[1] = traced.meta.sizes[1];
    const int along = b.expand(b.view(map[bias_of[n]], channels), traced.meta.sizes);
    const int sum = b.binary(Prim::Add, PrimArg::of_value(conv), PrimArg::of_value(along));
    // Readers were derived from the convolution's layout: the sum must have it.
    if (b.meta(sum).strides != traced.meta.strides) return -1;
    if (traced.grad_stopped) b.graph().stop_grad(sum);
    b.graph().mark_checkpoint(sum, traced.checkpoint);
    return sum;
  };
  return rewrite_nodes(graph, action, replace, out);
}

}  // namespace kiln::inductor
