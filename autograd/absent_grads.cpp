#include "autograd/absent_grads.h"

#include <stdexcept>

#include "autograd/grad_helpers.h"
#include "prims/prim_builder.h"
#include "prims/subgraph.h"

namespace kiln::autograd {

// Note [Absent gradients]
// An output of a compiled function whose gradient never arrives (the loss
// does not use it) is skipped by eager autograd: nothing upstream of it
// runs for it. Filling its gradient with zeros instead computes the same
// numbers except where a zero meets an infinity or a NaN on the way (atan2
// at (0, 0), 0 * inf), which makes NaN where eager has numbers, and it
// computes paths nobody needs. So a call whose gradients are partly absent
// runs a variant of the backward graph without them, built once per set of
// absent gradients: a value is absent when every gradient-carrying value it
// is computed from is absent (derivative rules are linear in the incoming
// gradients, so such a value is a sum of absent contributions). Where an
// absent contribution meets a present one, an add keeps the present one
// (a - absent = a, absent - b = -b) when the result has its metadata, and
// otherwise the absent side is zeros (cat of two gradients, broadcasts).
// The caller names the backward outputs to produce: those some present
// gradient reaches through a differentiable path (JointGraph::
// input_grad_reach); one of them that only absent values made is zeros
// (eager's gradient through sign), the others are not computed and their
// inputs get None, as in eager. Nodes only absent paths needed are
// dropped (prims::extract_subgraph).

namespace {

bool same_layout(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  return a.sizes == b.sizes && a.strides == b.strides && a.dtype == b.dtype && a.device_type == b.device_type &&
         a.device_index == b.device_index;
}

void collect_nodes(const graph::Arg& arg, std::vector<int>* out) {
  if (arg.kind == graph::Arg::Kind::Node) out->push_back(arg.node);
  for (const graph::Arg& item : arg.items) collect_nodes(item, out);
}

}  // namespace

prims::PrimGraph without_absent_grads(const prims::PrimGraph& backward, size_t first_grad,
                                      const std::vector<bool>& absent, const std::vector<bool>& keep) {
  const auto& inputs = backward.inputs();
  if (absent.size() != inputs.size()) throw std::invalid_argument("without_absent_grads: one flag per input");
  if (keep.size() != backward.outputs().size()) throw std::invalid_argument("without_absent_grads: one flag per output");
  prims::PrimGraph out;
  prims::PrimBuilder b(out);
  const size_t count = backward.values().size();
  std::vector<int> map(count, -1);
  std::vector<bool> made_zeros(count, false);
  std::vector<bool> is_absent(count, false), carries_grad(count, false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    map[inputs[i]] = out.add_input(backward.value(inputs[i]).meta);
    is_absent[inputs[i]] = absent[i];
    carries_grad[inputs[i]] = i >= first_grad;
  }
  // A node mixing absent gradients with saved values alone is absent
  // (linear in the gradient); with a present gradient it is mixed.
  for (const prims::PrimNode& node : backward.nodes()) {
    std::vector<int> reads;
    for (const prims::PrimArg& arg : node.args) {
      if (arg.is_value()) reads.push_back(arg.value);
    }
    for (const graph::Arg& arg : node.attrs.extern_args) collect_nodes(arg, &reads);
    for (const auto& kw : node.attrs.extern_kwargs) collect_nodes(kw.second, &reads);
    bool any_absent = false, present_grad = false;
    for (int r : reads) {
      any_absent = any_absent || is_absent[r];
      present_grad = present_grad || (carries_grad[r] && !is_absent[r]);
    }
    for (int o : node.outputs) carries_grad[o] = any_absent || present_grad;
    if (any_absent && !present_grad) {
      for (int o : node.outputs) is_absent[o] = true;
      continue;
    }
    if (any_absent && node.outputs.size() == 1 && node.args.size() == 2 && node.args[0].is_value() &&
        node.args[1].is_value() && (node.prim == prims::Prim::Add || node.prim == prims::Prim::Sub)) {
      const int lhs = node.args[0].value, rhs = node.args[1].value;
      const int kept = is_absent[lhs] ? rhs : lhs;
      const graph::TensorMeta result = backward.value(node.outputs[0]).meta;
      if (same_layout(backward.value(kept).meta, result)) {
        map[node.outputs[0]] = (node.prim == prims::Prim::Sub && kept == rhs) ? b.unary(prims::Prim::Neg, map[rhs])
                                                                             : map[kept];
        continue;
      }
    }
    // Mixed: absent contributions become zeros (an absent input is never
    // read: the caller passes None for it).
    // Only here is an absent value read, so it maps to its zeros for good.
    for (int r : reads) {
      if (is_absent[r] && !made_zeros[r]) {
        map[r] = zeros_like(b, backward.value(r).meta);
        made_zeros[r] = true;
      }
    }
    const std::vector<int> made = prims::copy_node(out, backward, node, map);
    for (size_t k = 0; k < made.size(); ++k) map[node.outputs[k]] = made[k];
  }
  std::vector<int> outputs;
  for (size_t k = 0; k < backward.outputs().size(); ++k) {
    const int id = backward.outputs()[k];
    if (!keep[k]) continue;
    outputs.push_back(is_absent[id] ? zeros_like(b, backward.value(id).meta) : map[id]);
  }
  out.set_outputs(outputs);
  std::string error;
  prims::PrimGraph pruned = prims::extract_subgraph(out, out.inputs(), outputs, &error);
  if (!error.empty()) throw std::runtime_error("backward without absent gradients: " + error);
  return pruned;
}

}  // namespace kiln::autograd
