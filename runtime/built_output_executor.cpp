#include "runtime/built_output_executor.h"

#include <algorithm>

#include "runtime/graph_arg_values.h"
#include "base/py_ref.h"

namespace kiln::runtime {

using base::PyRef;
namespace {

using graph::Arg;
using graph::Node;
using graph::NodeKind;

void note_users(const Arg& arg, int user, std::vector<std::vector<int>>& users) {
  if (arg.kind == Arg::Kind::Node) users[arg.node].push_back(user);
  for (const Arg& item : arg.items) note_users(item, user, users);
}

void note_leaves(const Arg& arg, const std::vector<bool>& builders, std::vector<int>& leaves) {
  if (arg.kind == Arg::Kind::Node && !builders[arg.node] &&
      std::find(leaves.begin(), leaves.end(), arg.node) == leaves.end()) {
    leaves.push_back(arg.node);
  }
  for (const Arg& item : arg.items) note_leaves(item, builders, leaves);
}

}  // namespace

std::vector<bool> output_builders(const graph::Graph& graph) {
  const auto& nodes = graph.nodes();
  const int n = static_cast<int>(nodes.size());
  const int output_user = n;  // the output, as a user
  std::vector<std::vector<int>> users(n);
  for (const Node& node : nodes) {
    for (const Arg& arg : node.args) note_users(arg, node.id, users);
    for (const auto& kw : node.kwargs) note_users(kw.second, node.id, users);
  }
  note_users(graph.output(), output_user, users);
  std::vector<bool> builders(n, false);
  // Users come after what they use: deciding from the last node back sees
  // every user's verdict first.
  for (int id = n - 1; id >= 0; --id) {
    const Node& node = nodes[id];
    if (node.kind != NodeKind::Call || !node.metas.empty() || users[id].empty()) continue;
    // Grad-mode and autocast switches make no value either, but change how
    // later nodes run: they stay in the graph.
    if (node.target_name == "kiln.enter_autocast" || node.target_name == "kiln.exit_autocast" ||
        node.target_name == "torch._C._set_grad_enabled") {
      continue;
    }
    builders[id] = std::all_of(users[id].begin(), users[id].end(),
                               [&](int user) { return user == output_user || builders[user]; });
  }
  return builders;
}

std::vector<int> output_builder_leaves(const graph::Graph& graph, const std::vector<bool>& builders) {
  std::vector<int> leaves;
  for (const Node& node : graph.nodes()) {
    if (!builders[node.id]) continue;
    for (const Arg& arg : node.args) note_leaves(arg, builders, leaves);
    for (const auto& kw : node.kwargs) note_leaves(kw.second, builders, leaves);
  }
  note_leaves(graph.output(), builders, leaves);
  return leaves;
}

BuiltOutputExecutor::BuiltOutputExecutor(std::unique_ptr<GraphExecutor> inner, const graph::Graph& graph,
                                         std::vector<bool> builders, std::vector<int> leaves)
    : inner_(std::move(inner)), graph_(graph), leaves_(std::move(leaves)) {
  for (size_t id = 0; id < builders.size(); ++id) {
    if (builders[id]) builder_ids_.push_back(static_cast<int>(id));
  }
}

PyObject* BuiltOutputExecutor::run(PyObject* const* inputs) const {
  PyRef leaf_values = PyRef::steal(inner_->run(inputs));
  if (!leaf_values) return nullptr;
  if (!PyTuple_Check(leaf_values.get()) || PyTuple_GET_SIZE(leaf_values.get()) != static_cast<Py_ssize_t>(leaves_.size())) {
    PyErr_SetString(PyExc_RuntimeError, "kiln: a graph without its output builders returned the wrong values");
    return nullptr;
  }
  // Node id -> borrowed value: the leaves from the inner graph's tuple, the
  // builders' results from `made`, which owns them.
  std::vector<PyObject*> values(graph_.nodes().size(), nullptr);
  for (size_t i = 0; i < leaves_.size(); ++i) values[leaves_[i]] = PyTuple_GET_ITEM(leaf_values.get(), i);
  std::vector<PyRef> made;
  made.reserve(builder_ids_.size());
  for (int id : builder_ids_) {
    const Node& node = graph_.node(id);
    PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(node.args.size())));
    if (!args) return nullptr;
    for (size_t k = 0; k < node.args.size(); ++k) {
      PyObject* value = materialize_arg(node.args[k], values.data());
      if (!value) return nullptr;
      PyTuple_SET_ITEM(args.get(), static_cast<Py_ssize_t>(k), value);
    }
    PyRef kwargs;
    if (!node.kwargs.empty()) {
      kwargs = PyRef::steal(PyDict_New());
      if (!kwargs) return nullptr;
      for (const auto& [key, arg] : node.kwargs) {
        PyRef value = PyRef::steal(materialize_arg(arg, values.data()));
        if (!value || PyDict_SetItemString(kwargs.get(), key.c_str(), value.get()) < 0) return nullptr;
      }
    }
    PyRef result = PyRef::steal(PyObject_Call(node.target, args.get(), kwargs.get()));
    if (!result) return nullptr;
    values[id] = result.get();
    made.push_back(std::move(result));
  }
  return materialize_arg(graph_.output(), values.data());
}

}  // namespace kiln::runtime
