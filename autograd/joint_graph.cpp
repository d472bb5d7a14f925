#include "autograd/joint_graph.h"

#include <set>

#include "autograd/derivatives.h"
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
    // Extern nodes read their tensors through extern_args.
    for (const graph::Arg& arg : node.attrs.extern_args) {
      if (arg.kind == graph::Arg::Kind::Node) any = any || grad[arg.node];
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
  const std::vector<bool> needs_grad = values_requiring_grad(forward, requires_grad);
  // A write into a tensor on a gradient path changes that path after the
  // fact (w[0] = 0.5 zeroes w[0]'s gradient), and a write of a value that
  // carries gradients puts the destination on one (w[0] = x.sum()); kiln's
  // rules see only results, so such graphs are left to torch's autograd.
  // A write torch recorded without gradients (batch norm's running
  // statistics: its result does not require grad) into a tensor that needs
  // none is harmless.
  for (const prims::PrimNode& node : forward.nodes()) {
    if (node.prim != prims::Prim::Extern || !extern_writes(node.attrs)) continue;
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
    std::vector<int> in_grads = vjp(b, view, out_grads, wanted);
    for (size_t i = 0; i < in_grads.size() && i < view.inputs.size(); ++i) {
      if (wanted[i]) accumulate(view.inputs[i], in_grads[i]);
    }
    for (size_t i = 0; i < view.inputs.size(); ++i) {
      if (!wanted[i]) continue;
      for (int id : node.outputs) reach[view.inputs[i]].insert(reach[id].begin(), reach[id].end());
    }
  }
  std::vector<int> outputs = joint.forward_outputs;
  for (size_t i = 0; i < forward.inputs().size(); ++i) {
    const int id = forward.inputs()[i];
    const int input_grad = needs_grad[id] ? grad[id] : -1;
    joint.input_grads.push_back(input_grad);
    joint.input_grad_reach.emplace_back(reach[id].begin(), reach[id].end());
    if (input_grad >= 0) outputs.push_back(input_grad);
  }
  g.set_outputs(std::move(outputs));
  return joint;
}

}  // namespace kiln::autograd
