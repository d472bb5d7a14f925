#include "prims/extern_writes.h"

#include <algorithm>
#include <functional>
#include <set>

namespace kiln::prims {

std::vector<int> node_reads(const PrimNode& node) {
  std::vector<int> out;
  for (const PrimArg& arg : node.args) {
    if (arg.is_value()) out.push_back(arg.value);
  }
  std::function<void(const graph::Arg&)> collect = [&](const graph::Arg& arg) {
    if (arg.kind == graph::Arg::Kind::Node) out.push_back(arg.node);
    for (const graph::Arg& item : arg.items) collect(item);
  };
  for (const graph::Arg& arg : node.attrs.extern_args) collect(arg);
  for (const auto& kw : node.attrs.extern_kwargs) collect(kw.second);
  return out;
}

// Note [Extern writes]
// Prim nodes compute fresh tensors, but an extern call (a torch op kept as
// is: `x[0] = -1`, `y *= 2`, batch_norm's running statistics) may write any
// tensor its arguments share storage with, and may return one of them. The
// prim executor runs nodes in graph order, so a node reading such a tensor
// sees it as it is at that point. A kernel reads its inputs from memory but
// computes its members' values in registers: fusing `w = a + b` with a
// reader of w after `w[0] = -1` would read the value before the write. So
// every extern call is taken to write every tensor that may alias one of its
// arguments (a view family prim's output aliases its input, an extern's
// outputs alias its arguments), and nodes reading such a tensor are ordered
// with the call: those before it run before it, those after it after it.
// The scheduler treats these pairs as edges when it keeps groups acyclic
// (no group can hold nodes on both sides of a write), and the kernel-node
// graph keeps them when it orders kernels (Note [Kernel nodes]). An extern
// marked pure (PrimAttrs::extern_pure: kiln's own calls of functional torch
// ops, Note [Bias epilogues]) writes nothing and aliases nothing.
namespace {

// The alias classes of a graph's values (a view's output and its input, an
// extern's outputs and its arguments share one), and the extern calls not
// marked pure.
struct AliasClasses {
  std::vector<int> parent;
  std::vector<int> externs;

  int find(int v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  }
};

AliasClasses alias_classes(const PrimGraph& graph) {
  AliasClasses classes;
  const int values = static_cast<int>(graph.values().size());
  classes.parent.resize(values);
  for (int v = 0; v < values; ++v) classes.parent[v] = v;
  for (int n = 0; n < static_cast<int>(graph.nodes().size()); ++n) {
    const PrimNode& node = graph.node(n);
    const bool aliases = (node.prim == Prim::Extern && !node.attrs.extern_pure) ||
                         prim_info(node.prim).family == Family::View;
    if (!aliases) continue;
    if (node.prim == Prim::Extern) classes.externs.push_back(n);
    for (int read : node_reads(node)) {
      for (int made : node.outputs) classes.parent[classes.find(read)] = classes.find(made);
    }
  }
  return classes;
}

}  // namespace

std::vector<bool> writable_values(const PrimGraph& graph) {
  AliasClasses classes = alias_classes(graph);
  std::vector<bool> written_class(graph.values().size(), false);
  for (int e : classes.externs) {
    for (int v : node_reads(graph.node(e))) written_class[classes.find(v)] = true;
  }
  std::vector<bool> writable(graph.values().size(), false);
  for (size_t v = 0; v < writable.size(); ++v) writable[v] = written_class[classes.find(static_cast<int>(v))];
  return writable;
}

namespace {

constexpr const char* kWritesArguments = "it writes into its arguments";

// The callable's own name: past the last dot, dunders unwrapped.
std::string bare_name(const PrimAttrs& attrs, bool* dunder) {
  std::string name = attrs.target_name.substr(attrs.target_name.rfind('.') + 1);
  *dunder = name.size() > 4 && name.starts_with("__") && name.ends_with("__");
  if (*dunder) name = name.substr(2, name.size() - 4);
  return name;
}

bool random_name(std::string name) {
  if (name.ends_with("_")) name.pop_back();
  static const std::set<std::string> draws = {"bernoulli", "multinomial", "normal",    "poisson",   "gumbel_softmax",
                                              "rrelu",     "exponential", "geometric", "cauchy",    "log_normal",
                                              "random"};
  return draws.count(name) || name.starts_with("rand") || name.find("dropout") != std::string::npos;
}

}  // namespace

std::string extern_effect(const PrimAttrs& attrs) {
  bool dunder = false;
  const std::string name = bare_name(attrs, &dunder);
  if (!dunder && name.ends_with("_")) return kWritesArguments;
  static const std::set<std::string> writes = {
      "setitem", "delitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow",
      "iand", "ior", "ixor", "ilshift", "irshift", "imatmul", "iconcat"};
  if (writes.count(name)) return kWritesArguments;
  for (const auto& [key, arg] : attrs.extern_kwargs) {
    if (key == "out" || (key == "inplace" && arg.constant == Py_True)) return kWritesArguments;
  }
  if (!dunder && random_name(name)) return "it draws random numbers";
  return "";
}

bool extern_writes_arguments(const PrimAttrs& attrs) { return extern_effect(attrs) == kWritesArguments; }

bool extern_draws_random(const PrimAttrs& attrs) {
  bool dunder = false;
  const std::string name = bare_name(attrs, &dunder);
  return !dunder && random_name(name);
}

std::vector<int> alias_class_of(const PrimGraph& graph) {
  AliasClasses classes = alias_classes(graph);
  std::vector<int> out(graph.values().size());
  for (size_t v = 0; v < out.size(); ++v) out[v] = classes.find(static_cast<int>(v));
  return out;
}

std::vector<std::pair<int, int>> extern_order_edges(const PrimGraph& graph) {
  AliasClasses classes = alias_classes(graph);
  const std::vector<int>& externs = classes.externs;
  auto find = [&](int v) { return classes.find(v); };
  const int count = static_cast<int>(graph.nodes().size());
  std::vector<std::pair<int, int>> edges;
  if (externs.empty()) return edges;
  std::vector<std::vector<int>> reads(count);
  for (int n = 0; n < count; ++n) {
    for (int value : node_reads(graph.node(n))) reads[n].push_back(find(value));
  }
  for (int e : externs) {
    const std::set<int> written(reads[e].begin(), reads[e].end());
    for (int n = 0; n < count; ++n) {
      if (n == e) continue;
      const bool touches = std::any_of(reads[n].begin(), reads[n].end(), [&](int c) { return written.count(c) > 0; });
      if (touches) edges.push_back(n < e ? std::make_pair(n, e) : std::make_pair(e, n));
    }
  }
  return edges;
}

}  // namespace kiln::prims
