#include "inductor/state_updates.h"

#include <set>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "base/py_ref.h"
#include "inductor/node_rewrite.h"
#include "prims/extern_writes.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Batched state updates]
// A batch-norm layer in training updates its buffers in place: running
// mean and variance (`running_mean.copy_(new)`, the new values computed by
// the statistics kernel) and num_batches_tracked (`add_(1)`). Each stayed
// an extern, a Python method call of about 19 us of host time on the H100
// machines, 159 of them in a ResNet-50 forward (3.1 ms of a 27 ms training
// step bound by host time). The updates of a graph's input tensors commute
// with everything after them that reads none of those inputs, so those
// updates run together as torch._foreach_copy_(inputs, values) and
// torch._foreach_add_(inputs, n), one call each (one multi-tensor kernel on
// CUDA), where the last of them ran. An update qualifies when it writes a
// graph input (no view of one, each input once), nothing reads that input
// (nor a view of it, nor anything an extern may have made it share storage
// with) or the call's result after it, and for a copy the value copied has the
// input's sizes and dtype and no other reader (so nothing can change it
// before the batched copy runs). Its result, the input itself, may be a
// graph output (a training forward returns the results of calls with
// effects): the input stands for it.

struct Update {
  size_t node;
  int target;  // the graph input written
  int source;  // copy_: the value copied, else -1
};

bool plain_call(const PrimNode& node, const char* name, size_t args) {
  return node.prim == Prim::Extern && node.attrs.target_name == name && node.attrs.extern_kwargs.empty() &&
         node.attrs.extern_args.size() == args && node.attrs.extern_args[0].kind == graph::Arg::Kind::Node &&
         node.outputs.size() == 1;
}

// The number n of an `add_(input, n)`: an int or float constant.
PyObject* added_number(const PrimNode& node) {
  const graph::Arg& arg = node.attrs.extern_args[1];
  if (arg.kind != graph::Arg::Kind::Constant || arg.constant == nullptr) return nullptr;
  return PyLong_CheckExact(arg.constant) || PyFloat_CheckExact(arg.constant) ? arg.constant : nullptr;
}

base::PyRef torch_function(const char* name) {
  base::PyRef torch = base::PyRef::steal(PyImport_ImportModule("torch"));
  base::PyRef fn = torch ? base::PyRef::steal(PyObject_GetAttrString(torch.get(), name)) : base::PyRef();
  if (!fn) PyErr_Clear();
  return fn;
}

}  // namespace

bool batch_state_updates(const PrimGraph& graph, PrimGraph* out) {
  const int node_count = static_cast<int>(graph.nodes().size());
  // Reads through views count as reads of what they view: the last reader
  // of each alias class.
  const std::vector<int> alias = prims::alias_class_of(graph);
  std::vector<int> last_class_reader(graph.values().size(), -1);
  std::vector<int> readers(graph.values().size(), 0);
  for (int n = 0; n < node_count; ++n) {
    for (int value : prims::node_reads(graph.node(n))) {
      last_class_reader[alias[value]] = n;
      ++readers[value];
    }
  }
  std::vector<bool> output(graph.values().size(), false);
  for (int value : graph.outputs()) output[value] = true;
  const std::unordered_set<int> inputs(graph.inputs().begin(), graph.inputs().end());
  std::vector<Update> copies, adds;
  PyObject* number = nullptr;
  std::set<int> written;
  for (int n = 0; n < node_count; ++n) {
    const PrimNode& node = graph.node(n);
    const bool copy = plain_call(node, "Tensor.copy_", 2);
    const bool add = !copy && plain_call(node, "Tensor.add_", 2);
    if (!copy && !add) continue;
    const int target = node.attrs.extern_args[0].node;
    if (!inputs.count(target) || last_class_reader[alias[target]] != n || output[target] || written.count(target)) {
      continue;
    }
    // The call returns its input: only as a graph output (an effect's
    // result, returned so that it runs) may it be used.
    if (readers[node.outputs[0]] > 0) continue;
    if (copy) {
      const graph::Arg& from = node.attrs.extern_args[1];
      if (from.kind != graph::Arg::Kind::Node || readers[from.node] != 1) continue;
      const graph::TensorMeta& src = graph.value(from.node).meta;
      const graph::TensorMeta& dst = graph.value(target).meta;
      if (src.sizes != dst.sizes || src.dtype != dst.dtype || src.device_type != dst.device_type) continue;
      copies.push_back({static_cast<size_t>(n), target, from.node});
    } else {
      PyObject* n_added = added_number(node);
      if (n_added == nullptr) continue;
      if (number == nullptr) number = n_added;
      const int same = PyObject_RichCompareBool(number, n_added, Py_EQ);
      if (same < 0) PyErr_Clear();
      if (same != 1 || Py_TYPE(number) != Py_TYPE(n_added)) continue;
      adds.push_back({static_cast<size_t>(n), target, -1});
    }
    written.insert(target);
  }
  if (copies.size() < 2) copies.clear();
  if (adds.size() < 2) adds.clear();
  if (copies.empty() && adds.empty()) return false;
  base::PyRef foreach_copy = torch_function("_foreach_copy_");
  base::PyRef foreach_add = torch_function("_foreach_add_");
  if (!foreach_copy || !foreach_add) return false;
  std::vector<bool> batched(node_count, false);
  for (const Update& u : copies) batched[u.node] = true;
  for (const Update& u : adds) batched[u.node] = true;
  const size_t last_copy = copies.empty() ? 0 : copies.back().node;
  const size_t last_add = adds.empty() ? 0 : adds.back().node;
  // Every update is replaced by the input it returned; the last of each
  // kind also makes the batched call.
  auto action = [&](size_t n) { return batched[n] ? NodeAction::Replace : NodeAction::Copy; };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    const int returned = map[graph.node(n).attrs.extern_args[0].node];
    const bool copy = !copies.empty() && n == last_copy;
    if (!copy && (adds.empty() || n != last_add)) return returned;
    graph::Arg targets, values;
    targets.kind = values.kind = graph::Arg::Kind::List;
    for (const Update& u : copy ? copies : adds) {
      targets.items.push_back(graph::Arg::of_node(map[u.target]));
      if (copy) values.items.push_back(graph::Arg::of_node(map[u.source]));
    }
    if (copy) {
      b.extern_call(foreach_copy.get(), "torch._foreach_copy_", {targets, values}, {}, {});
    } else {
      b.extern_call(foreach_add.get(), "torch._foreach_add_", {targets, graph::Arg::of_constant(number)}, {}, {});
    }
    return returned;
  };
  return rewrite_nodes(graph, action, replace, out);
}

}  // namespace kiln::inductor
