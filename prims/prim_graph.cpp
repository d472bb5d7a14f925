#include "prims/prim_graph.h"

#include "base/check.h"

#include <algorithm>
#include <stdexcept>
#include <sstream>

#include "graph/graph_printer.h"
#include "base/py_text.h"

namespace kiln::prims {

double Scalar::as_double() const {
  switch (kind) {
    case ScalarKind::Bool:
    case ScalarKind::Int: return static_cast<double>(integer);
    case ScalarKind::Float:
    case ScalarKind::Complex: return real;
  }
  return real;
}

PrimAttrs::PrimAttrs(const PrimAttrs& other)
    : dims(other.dims), sizes(other.sizes), strides(other.strides), dim(other.dim),
      start(other.start), end(other.end), step(other.step), offset(other.offset),
      keepdim(other.keepdim), correction(other.correction), dtype(other.dtype),
      value(other.value), value2(other.value2), accumulate(other.accumulate),
      device_type(other.device_type), device_index(other.device_index), target(other.target),
      target_name(other.target_name), extern_args(other.extern_args),
      extern_kwargs(other.extern_kwargs), extern_pure(other.extern_pure), extern_fresh(other.extern_fresh) {
  Py_XINCREF(target);
}

PrimAttrs& PrimAttrs::operator=(const PrimAttrs& other) {
  if (this != &other) {
    PrimAttrs copy(other);
    *this = std::move(copy);
  }
  return *this;
}

PrimAttrs::PrimAttrs(PrimAttrs&& other) noexcept
    : dims(std::move(other.dims)), sizes(std::move(other.sizes)),
      strides(std::move(other.strides)), dim(other.dim), start(other.start), end(other.end),
      step(other.step), offset(other.offset), keepdim(other.keepdim),
      correction(other.correction), dtype(other.dtype), value(other.value),
      value2(other.value2), accumulate(other.accumulate), device_type(other.device_type),
      device_index(other.device_index), target(other.target),
      target_name(std::move(other.target_name)), extern_args(std::move(other.extern_args)),
      extern_kwargs(std::move(other.extern_kwargs)), extern_pure(other.extern_pure),
      extern_fresh(other.extern_fresh) {
  other.target = nullptr;
}

PrimAttrs& PrimAttrs::operator=(PrimAttrs&& other) noexcept {
  if (this == &other) return *this;
  Py_XDECREF(target);
  dims = std::move(other.dims);
  sizes = std::move(other.sizes);
  strides = std::move(other.strides);
  dim = other.dim;
  start = other.start;
  end = other.end;
  step = other.step;
  offset = other.offset;
  keepdim = other.keepdim;
  correction = other.correction;
  dtype = other.dtype;
  value = other.value;
  value2 = other.value2;
  accumulate = other.accumulate;
  device_type = other.device_type;
  device_index = other.device_index;
  target = other.target;
  other.target = nullptr;
  target_name = std::move(other.target_name);
  extern_args = std::move(other.extern_args);
  extern_kwargs = std::move(other.extern_kwargs);
  extern_pure = other.extern_pure;
  extern_fresh = other.extern_fresh;
  return *this;
}

PrimAttrs::~PrimAttrs() { Py_XDECREF(target); }

int PrimGraph::add_input(const graph::TensorMeta& meta) {
  const int id = static_cast<int>(values_.size());
  values_.push_back(PrimValue{meta, -1, 0});
  inputs_.push_back(id);
  return id;
}

std::vector<int> PrimGraph::add_node(Prim prim, std::vector<PrimArg> args, PrimAttrs attrs,
                                     const std::vector<graph::TensorMeta>& metas) {
  const int node_id = static_cast<int>(nodes_.size());
  PrimNode node;
  node.prim = prim;
  node.args = std::move(args);
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < metas.size(); ++i) {
    node.outputs.push_back(static_cast<int>(values_.size()));
    values_.push_back(PrimValue{metas[i], node_id, static_cast<int>(i)});
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

int PrimGraph::add_node1(Prim prim, std::vector<PrimArg> args, PrimAttrs attrs,
                         const graph::TensorMeta& meta) {
  return add_node(prim, std::move(args), std::move(attrs), {meta})[0];
}

void PrimGraph::set_unit_dim_strides(int id, const std::vector<int64_t>& strides) {
  graph::TensorMeta& meta = values_.at(id).meta;
  KILN_CHECK(strides.size() == meta.sizes.size(), "set_unit_dim_strides: rank differs");
  for (size_t d = 0; d < strides.size(); ++d) {
    if (meta.sizes[d] == 1) {
      meta.strides[d] = strides[d];
    } else {
      KILN_CHECK(meta.sizes[d] == 0 || meta.strides[d] == strides[d],
                 "set_unit_dim_strides: the stride of dim " << d << " (size " << meta.sizes[d] << ") differs");
    }
  }
}

void PrimGraph::truncate(size_t node_count) {
  if (node_count >= nodes_.size()) return;
  size_t first_value = values_.size();
  for (size_t n = node_count; n < nodes_.size(); ++n) {
    for (int id : nodes_[n].outputs) first_value = std::min(first_value, static_cast<size_t>(id));
  }
  nodes_.resize(node_count);
  values_.resize(first_value);
}

namespace {

// Value ids an extern argument refers to.
void collect_arg_values(const graph::Arg& arg, std::vector<int>* out) {
  if (arg.kind == graph::Arg::Kind::Node) out->push_back(arg.node);
  for (const graph::Arg& item : arg.items) collect_arg_values(item, out);
}

}  // namespace

std::string PrimGraph::verify() const {
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const PrimNode& node = nodes_[n];
    const int first_output = node.outputs.empty() ? static_cast<int>(values_.size()) : node.outputs[0];
    std::vector<int> used;
    for (const PrimArg& arg : node.args) {
      if (arg.is_value()) used.push_back(arg.value);
    }
    for (const graph::Arg& arg : node.attrs.extern_args) collect_arg_values(arg, &used);
    for (const auto& kw : node.attrs.extern_kwargs) collect_arg_values(kw.second, &used);
    for (int id : used) {
      if (id < 0 || id >= first_output) {
        return "node " + std::to_string(n) + " (" + prim_name(node.prim) + ") uses %" +
               std::to_string(id) + ", which is not made before it";
      }
    }
    for (int id : node.outputs) {
      if (id < 0 || id >= static_cast<int>(values_.size()) || values_[id].node != static_cast<int>(n)) {
        return "node " + std::to_string(n) + " lists output %" + std::to_string(id) + " it does not make";
      }
    }
  }
  for (int id : outputs_) {
    if (id < 0 || id >= static_cast<int>(values_.size())) return "output %" + std::to_string(id) + " does not exist";
  }
  return "";
}

std::string format_scalar(const Scalar& scalar) {
  std::ostringstream out;
  switch (scalar.kind) {
    case ScalarKind::Bool: out << (scalar.integer ? "True" : "False"); break;
    case ScalarKind::Int: out << scalar.integer; break;
    case ScalarKind::Float: {
      // As Python writes it (shortest round trip, "1.0", "inf").
      PyObject* number = PyFloat_FromDouble(scalar.real);
      std::string text = base::py_repr(number);
      Py_XDECREF(number);
      return text;
    }
    case ScalarKind::Complex: out << "complex(" << scalar.real << ", " << scalar.imag << ")"; break;
  }
  return out.str();
}

namespace {

void print_list(std::ostringstream& out, const std::vector<int64_t>& values) {
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
}

// The attributes a prim's family reads, as "name=value" items.
void print_attrs(std::ostringstream& out, const PrimNode& node, bool* first) {
  const PrimAttrs& a = node.attrs;
  auto item = [&](const char* name) -> std::ostringstream& {
    out << (*first ? "" : ", ") << name << "=";
    *first = false;
    return out;
  };
  auto dtype = [&] {
    if (a.dtype) item("dtype") << graph::dtype_name(*a.dtype);
  };
  const Prim p = node.prim;
  switch (prim_info(p).family) {
    case Family::Unary:
    case Family::Binary:
    case Family::Ternary:
    case Family::Matmul:
      break;
    case Family::Convert:
      dtype();
      break;
    case Family::Reduction:
      print_list(item("dims"), a.dims);
      item("keepdim") << (a.keepdim ? "True" : "False");
      if (p == Prim::VarMean) item("correction") << a.correction;
      dtype();
      break;
    case Family::View:
      if (p == Prim::Permute || p == Prim::Squeeze) {
        print_list(item("dims"), a.dims);
      } else if (p == Prim::Unsqueeze) {
        item("dim") << a.dim;
      } else if (p == Prim::Slice) {
        item("dim") << a.dim;
        if (a.start) item("start") << *a.start;
        if (a.end) item("end") << *a.end;
        item("step") << a.step;
      } else {
        print_list(item("sizes"), a.sizes);
        if (p == Prim::AsStrided) {
          print_list(item("strides"), a.strides);
          item("offset") << a.offset;
        }
      }
      break;
    case Family::Cat:
      item("dim") << a.dim;
      break;
    case Family::Index:
      if (p == Prim::IndexPut) {
        print_list(item("dims"), a.dims);
        item("accumulate") << (a.accumulate ? "True" : "False");
      } else {
        item("dim") << a.dim;
        if (p == Prim::Scatter && a.accumulate) item("add") << "True";
      }
      break;
    case Family::Factory:
      print_list(item("sizes"), a.sizes);
      if (p == Prim::Full) item("value") << format_scalar(a.value);
      if (p == Prim::Iota) {
        item("start") << a.start.value_or(0);
        item("step") << a.step;
      }
      dtype();
      break;
    case Family::Random:
      if (p != Prim::Bernoulli) {
        print_list(item("sizes"), a.sizes);
        item(p == Prim::Uniform ? "low" : "mean") << format_scalar(a.value);
        item(p == Prim::Uniform ? "high" : "std") << format_scalar(a.value2);
        dtype();
      }
      break;
    case Family::Extern:
      break;
  }
}

}  // namespace

std::string format_prim_graph(const PrimGraph& graph) {
  std::ostringstream out;
  for (int id : graph.inputs()) {
    out << "%" << id << " = input : " << graph::format_tensor_meta(graph.value(id).meta) << "\n";
  }
  for (const PrimNode& node : graph.nodes()) {
    for (size_t i = 0; i < node.outputs.size(); ++i) out << (i ? ", " : "") << "%" << node.outputs[i];
    out << " = ";
    bool first = true;
    if (node.prim == Prim::Extern) {
      out << "extern " << node.attrs.target_name << "(";
      for (const graph::Arg& arg : node.attrs.extern_args) {
        out << (first ? "" : ", ");
        first = false;
        out << graph::format_arg(arg);
      }
      for (const auto& [name, arg] : node.attrs.extern_kwargs) {
        out << (first ? "" : ", ") << name << "=";
        first = false;
        out << graph::format_arg(arg);
      }
    } else {
      out << prim_name(node.prim) << "(";
      for (const PrimArg& arg : node.args) {
        out << (first ? "" : ", ");
        first = false;
        if (arg.is_value()) {
          out << "%" << arg.value;
        } else {
          out << format_scalar(arg.scalar);
        }
      }
      print_attrs(out, node, &first);
    }
    out << ") : ";
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      out << (i ? ", " : "") << graph::format_tensor_meta(graph.value(node.outputs[i]).meta);
    }
    out << "\n";
  }
  out << "return (";
  for (size_t i = 0; i < graph.outputs().size(); ++i) out << (i ? ", " : "") << "%" << graph.outputs()[i];
  out << ")\n";
  return out.str();
}

}  // namespace kiln::prims
