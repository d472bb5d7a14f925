#include "prims/common_nodes.h"

#include <cstring>
#include <string>
#include <unordered_map>

#include "prims/extern_writes.h"
#include "prims/subgraph.h"

namespace kiln::prims {

// Note [Common nodes]
// Decomposed library code repeats work that depends on nothing per layer:
// each of GPT-2's attention layers converts the same boolean mask into the
// same additive one, Llama's layers cast the same position tensors. Two
// nodes compute the same tensor when their prim, their arguments (after
// merging what came before), their parameters and their results' metadata
// agree, so the later one is dropped and its readers read the earlier one.
// Not merged: externs and random draws (calls with effects, draws that
// must differ), nodes an impure extern may see written (Note [Extern
// writes]: the two reads could see different contents, and a write into
// one would change the other), and a node whose result is a graph output
// when the earlier one's is one too (the caller would get one tensor
// twice, where eager gives two).
//
// A view that changes nothing (its result's sizes, strides, dtype, device
// and grad are its input's, as for the full slices `x[:, :, None, :, :]`
// and `hidden[:, -0:, :]` of transformers' code) repeats its input the
// same way: its readers read the input (Llama's prim graph: 33 such nodes
// of 190, each a step of host time a call). Kept where its result is a
// graph output (eager returns a new view, not the input) or an impure
// extern may see it written.

namespace {

void put(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); }

void put(std::string& key, double v) {
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);  // exact: -0.0 and 0.0 differ
  put(key, bits);
}

void put(std::string& key, const Scalar& s) {
  put(key, static_cast<int64_t>(s.kind));
  put(key, s.real);
  put(key, s.imag);
  put(key, s.integer);
}

void put(std::string& key, const std::vector<int64_t>& v) {
  put(key, static_cast<int64_t>(v.size()));
  for (int64_t x : v) put(key, x);
}

// What makes a node's results what they are, its value arguments read
// through `map`.
std::string node_key(const PrimGraph& graph, const PrimNode& node, const std::vector<int>& map) {
  std::string key;
  put(key, static_cast<int64_t>(node.prim));
  put(key, static_cast<int64_t>(node.args.size()));
  for (const PrimArg& arg : node.args) {
    put(key, static_cast<int64_t>(arg.is_value() ? map[arg.value] : -1));
    if (!arg.is_value()) put(key, arg.scalar);
  }
  const PrimAttrs& a = node.attrs;
  put(key, a.dims);
  put(key, a.sizes);
  put(key, a.strides);
  put(key, a.dim);
  put(key, static_cast<int64_t>(a.start.has_value()));
  put(key, a.start.value_or(0));
  put(key, static_cast<int64_t>(a.end.has_value()));
  put(key, a.end.value_or(0));
  put(key, a.step);
  put(key, a.offset);
  put(key, static_cast<int64_t>(a.keepdim));
  put(key, a.correction);
  put(key, static_cast<int64_t>(a.dtype.has_value() ? static_cast<int>(*a.dtype) : -1));
  put(key, a.value);
  put(key, a.value2);
  put(key, static_cast<int64_t>(a.accumulate));
  put(key, static_cast<int64_t>(a.device_type));
  put(key, static_cast<int64_t>(a.device_index));
  for (int id : node.outputs) {
    const PrimValue& v = graph.value(id);
    put(key, v.meta.sizes);
    put(key, v.meta.strides);
    put(key, static_cast<int64_t>(v.meta.dtype));
    put(key, static_cast<int64_t>(v.meta.device_type));
    put(key, static_cast<int64_t>(v.meta.device_index));
    put(key, static_cast<int64_t>(v.meta.requires_grad));
    put(key, static_cast<int64_t>(v.grad_stopped));
  }
  return key;
}

// True when `node` is a view whose result is its input unchanged (As
// strided views are left: their offset is not in the metadata).
bool is_identity_view(const PrimGraph& graph, const PrimNode& node) {
  if (prim_info(node.prim).family != Family::View || node.prim == Prim::AsStrided) return false;
  if (node.outputs.size() != 1 || node.args.empty() || !node.args[0].is_value()) return false;
  const PrimValue& in = graph.value(node.args[0].value);
  const PrimValue& out = graph.value(node.outputs[0]);
  return in.meta == out.meta && in.grad_stopped == out.grad_stopped;
}

}  // namespace

bool merge_common_nodes(const PrimGraph& graph, PrimGraph* out) {
  const std::vector<bool> writable = writable_values(graph);
  std::vector<bool> is_output(graph.values().size(), false);
  for (int id : graph.outputs()) is_output[id] = true;
  PrimGraph merged;
  std::vector<int> map = copy_inputs(merged, graph);
  std::vector<bool> output_image;  // per value of `merged`: some graph output maps to it
  output_image.resize(merged.values().size(), false);
  for (int id : graph.inputs()) output_image[map[id]] = is_output[id];
  std::unordered_map<std::string, int> first;  // node key -> node of `graph` kept
  bool any = false;
  for (const PrimNode& node : graph.nodes()) {
    bool candidate = node.prim != Prim::Extern && prim_info(node.prim).family != Family::Random &&
                     !node.outputs.empty();
    for (int id : node.outputs) candidate = candidate && !writable[id];
    for (int id : node_reads(node)) candidate = candidate && !writable[id];
    if (candidate && is_identity_view(graph, node) && !is_output[node.outputs[0]]) {
      map[node.outputs[0]] = map[node.args[0].value];
      any = true;
      continue;
    }
    std::string key;
    if (candidate) {
      key = node_key(graph, node, map);
      auto found = first.find(key);
      if (found != first.end()) {
        const PrimNode& earlier = graph.node(found->second);
        bool twice_an_output = false;
        for (size_t i = 0; i < node.outputs.size(); ++i) {
          twice_an_output = twice_an_output || (is_output[node.outputs[i]] && output_image[map[earlier.outputs[i]]]);
        }
        if (!twice_an_output) {
          for (size_t i = 0; i < node.outputs.size(); ++i) {
            map[node.outputs[i]] = map[earlier.outputs[i]];
            output_image[map[node.outputs[i]]] = output_image[map[node.outputs[i]]] || is_output[node.outputs[i]];
          }
          any = true;
          continue;
        }
      }
    }
    copy_node_mapped(merged, graph, node, map);
    output_image.resize(merged.values().size(), false);
    for (int id : node.outputs) output_image[map[id]] = is_output[id];
    if (candidate) first.emplace(std::move(key), graph.value(node.outputs[0]).node);
  }
  if (!any) return false;
  copy_outputs(merged, graph, map);
  *out = std::move(merged);
  return true;
}

}  // namespace kiln::prims
