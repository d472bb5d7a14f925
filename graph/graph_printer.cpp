#include "graph/graph_printer.h"

#include <sstream>

#include "base/py_text.h"

namespace kiln::graph {
namespace {

std::string repr(PyObject* obj) {
  std::string out = base::py_repr(obj);
  // Objects without a useful repr print their address; keep text stable.
  for (size_t at = out.find(" at 0x"); at != std::string::npos; at = out.find(" at 0x", at)) {
    size_t end = out.find('>', at);
    out.erase(at, end == std::string::npos ? std::string::npos : end - at);
  }
  return out;
}

void print_arg(std::ostringstream& out, const Arg& arg) {
  switch (arg.kind) {
    case Arg::Kind::Node: out << "%" << arg.node; break;
    case Arg::Kind::Constant: out << repr(arg.constant); break;
    case Arg::Kind::Tuple:
    case Arg::Kind::List: {
      const bool tuple = arg.kind == Arg::Kind::Tuple;
      out << (tuple ? "(" : "[");
      for (size_t i = 0; i < arg.items.size(); ++i) {
        if (i) out << ", ";
        print_arg(out, arg.items[i]);
      }
      if (tuple && arg.items.size() == 1) out << ",";
      out << (tuple ? ")" : "]");
      break;
    }
    case Arg::Kind::Dict: {
      out << "{";
      for (size_t i = 0; i < arg.items.size(); ++i) {
        if (i) out << ", ";
        out << repr(arg.keys[i]) << ": ";
        print_arg(out, arg.items[i]);
      }
      out << "}";
      break;
    }
  }
}

void print_metas(std::ostringstream& out, const Node& node) {
  if (node.metas.empty()) {
    if (node.kind == NodeKind::Input) out << (node.int_symbol.empty() ? " : object" : " : int " + node.int_symbol);
    return;
  }
  out << " : ";
  if (node.returns_tuple) out << "(";
  for (size_t i = 0; i < node.metas.size(); ++i) {
    if (i) out << ", ";
    out << format_tensor_meta(node.metas[i], i < node.symbolic_sizes.size() ? &node.symbolic_sizes[i] : nullptr);
  }
  if (node.returns_tuple) out << ")";
}

}  // namespace

std::string format_arg(const Arg& arg) {
  std::ostringstream out;
  print_arg(out, arg);
  return out.str();
}

std::string format_graph(const Graph& graph) {
  std::ostringstream out;
  for (const Node& node : graph.nodes()) {
    out << "%" << node.id << " = ";
    if (node.kind == NodeKind::Input) {
      out << "input " << node.input_name;
    } else {
      out << node.target_name << "(";
      bool first = true;
      for (const Arg& arg : node.args) {
        if (!first) out << ", ";
        first = false;
        print_arg(out, arg);
      }
      for (const auto& [name, arg] : node.kwargs) {
        if (!first) out << ", ";
        first = false;
        out << name << "=";
        print_arg(out, arg);
      }
      out << ")";
    }
    print_metas(out, node);
    if (node.checkpoint >= 0) out << " checkpoint " << node.checkpoint;
    out << "\n";
  }
  out << "return ";
  print_arg(out, graph.output());
  out << "\n";
  return out.str();
}

}  // namespace kiln::graph
