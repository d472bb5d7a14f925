#include "autograd/joint_graph.h"

#include <algorithm>
#include <set>
#include <vector>

#include "autograd/derivatives.h"
#include "prims/extern_writes.h"
#include "prims/layout.h"
#include "prims/prim_builder.h"
#include "prims/type_promotion.h"

namespace kiln::autograd {
namespace {

bool can_carry_grad(const graph::TensorMeta& meta) {
  return prims::is_floating(meta.dtype) || prims::is_complex(meta.dtype);
}

// The same metadata, laid out contiguously (how gradients arrive).
graph::TensorMeta contiguous(graph::TensorMeta meta) {
  meta.strides = graph::contiguous_strides(meta.sizes);
  meta.requires_grad = false;
  return meta;
}

// Note [Input gradients in their inputs' layouts]
// A gradient handed back for a graph input has the input's layout where the
// input is dense and that layout is contiguous or channels-last: torch's
// AccumulateGrad would otherwise copy a parameter's gradient into the
// parameter's layout after the backward, where here the copy fuses into
// the kernel making the gradient (a channels-last convolution's weight
// gradient and its cast back to float32, Note [Channels-last convolutions]).
int in_input_layout(prims::PrimBuilder& b, int g, const graph::TensorMeta& input) {
  if (g < 0) return g;
  const graph::TensorMeta& gm = b.meta(g);
  if (gm.sizes != input.sizes) return g;
  const std::vector<int64_t> want = prims::is_non_overlapping_and_dense(input.sizes, input.strides)
                                        ? input.strides
                                        : graph::contiguous_strides(input.sizes);
  if (prims::strides_agree(input.sizes, gm.strides, want)) return g;
  for (prims::MemoryFormat format : {prims::MemoryFormat::Contiguous, prims::MemoryFormat::ChannelsLast}) {
    if (format == prims::MemoryFormat::ChannelsLast && want.size() != 4) continue;
    if (prims::strides_agree(input.sizes, prims::strides_for(input.sizes, format), want)) return b.clone(g, format);
  }
  return g;
}

// Note [Slice gradients joined by cat]
// x.split(n) (attention's q, k, v out of one projection) reads x through
// slices. Each slice's own gradient is zeros with the slice's gradient
// written in (slice_grad in derivatives_view.cpp): three full-size tensors
// filled, scattered into and summed. Gradients of step-1 slices are instead
// collected per sliced value and, once all have arrived (when the value's
// gradient is first read), joined in order along their dim with zeros for
// the gaps by one cat. Slices that overlap go to separate cats, summed.
struct SlicePiece {
  int64_t dim = 0;
  int64_t start = 0;
  int64_t count = 0;
  int grad = -1;
};

// The piece a step-1 slice node's gradient `g` is, or count 0 when the
// node is no such slice.
SlicePiece slice_piece(const prims::PrimGraph& forward, const prims::PrimNode& node, int g) {
  SlicePiece piece;
  if (node.prim != prims::Prim::Slice || node.attrs.step != 1 || g < 0) return piece;
  const graph::TensorMeta& in = forward.value(node.args[0].value).meta;
  const int64_t d = node.attrs.dim;
  const int64_t size = in.sizes[d];
  int64_t start = node.attrs.start.value_or(0);
  if (start < 0) start += size;
  piece.dim = d;
  piece.start = std::clamp<int64_t>(start, 0, size);
  piece.count = forward.value(node.outputs[0]).meta.sizes[d];
  piece.grad = g;
  return piece;
}

// Joins `pieces` (gradients of slices of a value of meta `xm`) into
// gradients of the whole value: one per set of non-overlapping pieces.
std::vector<int> join_slice_pieces(prims::PrimBuilder& b, std::vector<SlicePiece> pieces,
                                   const graph::TensorMeta& xm) {
  std::sort(pieces.begin(), pieces.end(), [](const SlicePiece& a, const SlicePiece& c) {
    return a.dim != c.dim ? a.dim < c.dim : a.start < c.start;
  });
  std::vector<std::vector<SlicePiece>> chains;
  for (const SlicePiece& piece : pieces) {
    auto fits = [&](const std::vector<SlicePiece>& chain) {
      return chain.back().dim == piece.dim && chain.back().start + chain.back().count <= piece.start;
    };
    auto chain = std::find_if(chains.begin(), chains.end(), fits);
    if (chain == chains.end()) {
      chains.push_back({piece});
    } else {
      chain->push_back(piece);
    }
  }
  std::vector<int> grads;
  for (const std::vector<SlicePiece>& chain : chains) {
    const int64_t d = chain.front().dim;
    const graph::TensorMeta gm = b.meta(chain.front().grad);  // a copy: appending nodes moves the values
    auto zeros = [&](int64_t count) {
      std::vector<int64_t> sizes = gm.sizes;
      sizes[d] = count;
      return b.full(sizes, prims::Scalar::of_float(0.0), gm.dtype, {xm.device_type, xm.device_index, false});
    };
    std::vector<int> parts;
    int64_t at = 0;
    for (const SlicePiece& piece : chain) {
      if (piece.start > at) parts.push_back(zeros(piece.start - at));
      parts.push_back(piece.grad);
      at = piece.start + piece.count;
    }
    if (at < xm.sizes[d]) parts.push_back(zeros(xm.sizes[d] - at));
    grads.push_back(parts.size() == 1 ? parts[0] : b.cat(parts, d));
  }
  return grads;
}

}  // namespace

std::vector<bool> values_requiring_grad(const prims::PrimGraph& forward,
                                        const std::vector<bool>& requires_grad) {
  std::vector<bool> grad(forward.values().size(), false);
  for (size_t i = 0; i < forward.inputs().size(); ++i) {
    const int id = forward.inputs()[i];
    grad[id] = i < requires_grad.size() && requires_grad[i] && can_carry_grad(forward.value(id).meta);
  }
  for (const prims::PrimNode& node : forward.nodes()) {
    if (is_non_differentiable(node.prim)) continue;
    bool any = false;
    for (const prims::PrimArg& arg : node.args) any = any || (arg.is_value() && grad[arg.value]);
    // Extern nodes read their tensors through extern_args, tuples and
    // lists of them included.
    if (node.prim == prims::Prim::Extern) {
      for (int id : extern_inputs(node)) any = any || (id >= 0 && grad[id]);
    }
    if (!any) continue;
    for (int id : node.outputs) {
      // An extern's traced result says whether torch's op keeps the graph
      // (Tensor.detach, torch.no_grad code inside it do not).
      const graph::TensorMeta& meta = forward.value(id).meta;
      grad[id] = can_carry_grad(meta) && (node.prim != prims::Prim::Extern || meta.requires_grad) &&
                 !forward.value(id).grad_stopped;
    }
  }
  return grad;
}

JointGraph build_joint_graph(const prims::PrimGraph& forward, const std::vector<bool>& requires_grad) {
  JointGraph joint;
  joint.graph = forward;
  joint.forward_input_count = static_cast<int>(forward.inputs().size());
  joint.forward_outputs = forward.outputs();
  joint.forward_node_count = static_cast<int>(forward.nodes().size());
  const std::vector<bool> needs_grad = values_requiring_grad(forward, requires_grad);
  // A write into a tensor on a gradient path changes that path after the
  // fact (w[0] = 0.5 zeroes w[0]'s gradient), and a write of a value that
  // carries gradients puts the destination on one (w[0] = x.sum()); kiln's
  // rules see only results, so such graphs are left to torch's autograd.
  // A write torch recorded without gradients (batch norm's running
  // statistics: its result does not require grad) into a tensor that needs
  // none is harmless.
  for (const prims::PrimNode& node : forward.nodes()) {
    if (node.prim != prims::Prim::Extern || !prims::extern_writes_arguments(node.attrs)) continue;
    const std::vector<int> inputs = extern_inputs(node);
    bool recorded = node.outputs.empty();
    for (int id : node.outputs) recorded = recorded || forward.value(id).meta.requires_grad;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i] >= 0 && needs_grad[inputs[i]] && (i == 0 || recorded)) {
        throw NoDerivative("extern " + node.attrs.target_name + " writes into a tensor on a gradient path");
      }
    }
  }
  prims::PrimGraph& g = joint.graph;
  prims::PrimBuilder b(g);
  // Gradients per value, summed as contributions arrive.
  std::vector<int> grad(forward.values().size(), -1);
  auto accumulate = [&](int value, int contribution) {
    if (contribution < 0) return;
    grad[value] = grad[value] < 0 ? contribution
                                  : b.binary(prims::Prim::Add, prims::PrimArg::of_value(grad[value]),
                                             prims::PrimArg::of_value(contribution));
  };
  // Note [Slice gradients joined by cat]: pieces waiting per sliced value.
  std::vector<std::vector<SlicePiece>> pieces(forward.values().size());
  auto join_pieces = [&](int value) {
    if (pieces[value].empty()) return;
    for (int joined : join_slice_pieces(b, std::move(pieces[value]), forward.value(value).meta)) {
      accumulate(value, joined);
    }
    pieces[value].clear();
  };
  std::vector<std::set<int>> reach(forward.values().size());
  int with_grad = 0;
  for (int out : forward.outputs()) {
    if (!needs_grad[out]) {
      joint.grad_inputs.push_back(-1);
      continue;
    }
    const int incoming = g.add_input(contiguous(forward.value(out).meta));
    joint.grad_inputs.push_back(incoming);
    accumulate(out, incoming);
    reach[out].insert(with_grad++);
  }
  for (size_t n = forward.nodes().size(); n-- > 0;) {
    const prims::PrimNode& node = forward.node(static_cast<int>(n));
    std::vector<int> out_grads;
    bool any = false;
    for (int id : node.outputs) {
      join_pieces(id);
      out_grads.push_back(grad[id]);
      any = any || grad[id] >= 0;
    }
    if (!any) continue;
    NodeView view{node, {}, node.outputs};
    std::vector<bool> wanted;
    if (node.prim == prims::Prim::Extern) {
      view.inputs = extern_inputs(node);  // externs read their tensors through extern_args
    } else {
      for (const prims::PrimArg& arg : node.args) view.inputs.push_back(arg.is_value() ? arg.value : -1);
    }
    for (int id : view.inputs) wanted.push_back(id >= 0 && needs_grad[id]);
    bool any_wanted = false;
    for (bool w : wanted) any_wanted = any_wanted || w;
    if (!any_wanted) continue;
    if (const SlicePiece piece = slice_piece(forward, node, out_grads[0]); piece.count > 0) {
      pieces[view.inputs[0]].push_back(piece);
      reach[view.inputs[0]].insert(reach[node.outputs[0]].begin(), reach[node.outputs[0]].end());
      continue;
    }
    std::vector<int> in_grads = vjp(b, view, out_grads, wanted);
    for (size_t i = 0; i < in_grads.size() && i < view.inputs.size(); ++i) {
      if (wanted[i]) accumulate(view.inputs[i], in_grads[i]);
    }
    // A rule that gives an input no contribution (an extern whose torch
    // autograd does not reach it: reshape_as's shape argument) is no path.
    for (size_t i = 0; i < view.inputs.size() && i < in_grads.size(); ++i) {
      if (!wanted[i] || in_grads[i] < 0) continue;
      for (int id : node.outputs) reach[view.inputs[i]].insert(reach[id].begin(), reach[id].end());
    }
  }
  std::vector<int> outputs = joint.forward_outputs;
  for (size_t i = 0; i < forward.inputs().size(); ++i) {
    const int id = forward.inputs()[i];
    join_pieces(id);
    const int input_grad = needs_grad[id] ? in_input_layout(b, grad[id], forward.value(id).meta) : -1;
    joint.input_grads.push_back(input_grad);
    joint.input_grad_reach.emplace_back(reach[id].begin(), reach[id].end());
    if (input_grad >= 0) outputs.push_back(input_grad);
  }
  g.set_outputs(std::move(outputs));
  return joint;
}

}  // namespace kiln::autograd
