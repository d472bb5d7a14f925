// Graph IR: SSA nodes, each a call of a torch-level callable over graph
// values and constants. Node ids are positions; a stable text form is the
// contract for logs and regression tests (graph_printer.h).
#pragma once

#include <Python.h>

#include <string>
#include <utility>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::graph {

// An argument of a node or the graph's output: a node's value, a Python
// constant, or a tuple/list/dict of arguments.
struct Arg {
  enum class Kind : uint8_t { Node, Constant, Tuple, List, Dict };
  Kind kind = Kind::Constant;
  int node = -1;                 // Kind::Node
  PyObject* constant = nullptr;  // owned; Kind::Constant
  std::vector<Arg> items;        // Tuple/List items, Dict values
  std::vector<PyObject*> keys;   // owned; Dict keys (constants)

  Arg() = default;
  Arg(const Arg& other);
  Arg& operator=(const Arg& other);
  Arg(Arg&& other) noexcept;
  Arg& operator=(Arg&& other) noexcept;
  ~Arg();

  // A node's value.
  static Arg of_node(int node);
  // A constant; takes a new reference to `value`.
  static Arg of_constant(PyObject* value);
};

enum class NodeKind : uint8_t {
  Input,  // a graph input, fetched from a source at call time
  Call,   // target(*args, **kwargs)
};

struct Node {
  int id = -1;
  NodeKind kind = NodeKind::Call;
  std::string target_name;      // e.g. "torch.relu", "Tensor.view", "operator.add"
  PyObject* target = nullptr;   // owned callable (Call)
  std::vector<Arg> args;
  std::vector<std::pair<std::string, Arg>> kwargs;
  // Input: the source's readable text and its id in the guard set's table.
  std::string input_name;
  int input_source = -1;
  // What the node produces: one tensor, or a tuple of tensors (none for
  // object inputs and for calls kept only to build an output).
  std::vector<TensorMeta> metas;
  // Per meta, per dim: the symbolic size ("s0", "2*s0") of a dim that
  // changes with a dynamic input size, "" for static dims; empty when the
  // node has no dynamic dims (Note [Dynamic shapes] in tracer/).
  std::vector<std::vector<std::string>> symbolic_sizes;
  // Object input that is a dynamic Python int (Note [Dynamic ints] in
  // tracer/dynamic_shapes.cpp): the symbol it binds ("s2"); "" otherwise.
  std::string int_symbol;
  bool returns_tuple = false;
  // A call traced under autocast whose casts kiln could not make graph
  // nodes (Note [Explicit autocast casts]): it means its traced dtypes only
  // under autocast, so the graph is not decomposed to prims.
  bool autocast_implicit = false;
  // A torch call whose tensor result shares storage with none of the
  // tensors it was passed (Note [Fresh results] in tracer/trace_state.cpp).
  bool fresh_result = false;
  // The torch.utils.checkpoint call whose function made this node (an id
  // per call in the graph), or -1: the backward recomputes such values
  // rather than saving them (Note [Checkpointed regions] in
  // autograd/partitioner.cpp).
  int checkpoint = -1;

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  Node(Node&& other) noexcept;
  Node& operator=(Node&&) = delete;
  ~Node();
};

// A traced graph. Nodes are in execution order; inputs come first.
class Graph {
 public:
  // Appends an input fetched from `source_id`; returns its node id.
  int add_input(int source_id, const std::string& name, const TensorMeta& meta);
  // Appends an input that is a Python object passed through as it is (an
  // argument the graph returns by identity). Returns its node id.
  int add_object_input(int source_id, const std::string& name);
  // Appends a call; takes a new reference to `target`. Returns its node id.
  int add_call(std::string target_name, PyObject* target, std::vector<Arg> args,
               std::vector<std::pair<std::string, Arg>> kwargs);

  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int id) const { return nodes_[id]; }
  Node& node(int id) { return nodes_[id]; }
  const std::vector<int>& inputs() const { return inputs_; }

  void set_output(Arg output) { output_ = std::move(output); }
  const Arg& output() const { return output_; }

  // Number of Call nodes.
  int call_count() const;

  // Drops every node with id >= size (a trace backing out of an instruction).
  void truncate(int size);

  // Calls added from now until end_checkpoint are the function of one
  // torch.utils.checkpoint call (Node::checkpoint); a call nested in an
  // open one joins it. Returns what end_checkpoint restores.
  int begin_checkpoint();
  // Closes the region begin_checkpoint opened; `previous` is its result.
  void end_checkpoint(int previous) { open_checkpoint_ = previous; }

 private:
  int open_checkpoint_ = -1;
  int checkpoint_count_ = 0;
  std::vector<Node> nodes_;
  std::vector<int> inputs_;
  Arg output_;
};

}  // namespace kiln::graph
