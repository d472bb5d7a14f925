#include "graph/graph.h"

namespace kiln::graph {

Arg::Arg(const Arg& other)
    : kind(other.kind), node(other.node), constant(other.constant), items(other.items),
      keys(other.keys) {
  Py_XINCREF(constant);
  for (PyObject* key : keys) Py_INCREF(key);
}

Arg& Arg::operator=(const Arg& other) {
  if (this != &other) {
    Arg copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Arg::Arg(Arg&& other) noexcept
    : kind(other.kind), node(other.node), constant(other.constant),
      items(std::move(other.items)), keys(std::move(other.keys)) {
  other.constant = nullptr;
  other.keys.clear();
}

Arg& Arg::operator=(Arg&& other) noexcept {
  if (this != &other) {
    Py_XDECREF(constant);
    for (PyObject* key : keys) Py_DECREF(key);
    kind = other.kind;
    node = other.node;
    constant = other.constant;
    items = std::move(other.items);
    keys = std::move(other.keys);
    other.constant = nullptr;
    other.keys.clear();
  }
  return *this;
}

Arg::~Arg() {
  Py_XDECREF(constant);
  for (PyObject* key : keys) Py_DECREF(key);
}

Arg Arg::of_node(int node) {
  Arg arg;
  arg.kind = Kind::Node;
  arg.node = node;
  return arg;
}

Arg Arg::of_constant(PyObject* value) {
  Arg arg;
  arg.kind = Kind::Constant;
  Py_INCREF(value);
  arg.constant = value;
  return arg;
}

Node::Node(Node&& other) noexcept
    : id(other.id), kind(other.kind), target_name(std::move(other.target_name)),
      target(other.target), args(std::move(other.args)), kwargs(std::move(other.kwargs)),
      input_name(std::move(other.input_name)), input_source(other.input_source),
      metas(std::move(other.metas)), symbolic_sizes(std::move(other.symbolic_sizes)),
      int_symbol(std::move(other.int_symbol)), returns_tuple(other.returns_tuple), autocast_implicit(other.autocast_implicit),
      fresh_result(other.fresh_result), checkpoint(other.checkpoint) {
  other.target = nullptr;
}

Node::~Node() { Py_XDECREF(target); }

int Graph::add_input(int source_id, const std::string& name, const TensorMeta& meta) {
  Node node;
  node.id = static_cast<int>(nodes_.size());
  node.kind = NodeKind::Input;
  node.input_source = source_id;
  node.input_name = name;
  node.metas.push_back(meta);
  inputs_.push_back(node.id);
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

int Graph::add_object_input(int source_id, const std::string& name) {
  Node node;
  node.id = static_cast<int>(nodes_.size());
  node.kind = NodeKind::Input;
  node.input_source = source_id;
  node.input_name = name;
  inputs_.push_back(node.id);
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

int Graph::add_call(std::string target_name, PyObject* target, std::vector<Arg> args,
                    std::vector<std::pair<std::string, Arg>> kwargs) {
  Node node;
  node.id = static_cast<int>(nodes_.size());
  node.kind = NodeKind::Call;
  node.target_name = std::move(target_name);
  Py_INCREF(target);
  node.target = target;
  node.args = std::move(args);
  node.kwargs = std::move(kwargs);
  node.checkpoint = open_checkpoint_;
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

int Graph::begin_checkpoint() {
  const int previous = open_checkpoint_;
  if (previous < 0) open_checkpoint_ = checkpoint_count_++;
  return previous;
}

void Graph::truncate(int size) {
  while (static_cast<int>(nodes_.size()) > size) nodes_.pop_back();
  while (!inputs_.empty() && inputs_.back() >= size) inputs_.pop_back();
}

int Graph::call_count() const {
  int count = 0;
  for (const Node& node : nodes_) count += node.kind == NodeKind::Call;
  return count;
}

}  // namespace kiln::graph
