#include "prims/decompose.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "prims/decompositions.h"
#include "prims/prim_error.h"
#include "prims/view_writes.h"
#include "base/log.h"
#include "base/py_ref.h"
#include "graph/grad_leaves.h"

namespace kiln::prims {
namespace {

using graph::Arg;
using graph::Node;
using graph::NodeKind;
using base::PyRef;

DecomposeFn decomposition_table(prims::TorchOp op) {
  static const DecomposeFn table[] = {
#define KILN_DECOMPOSITION_ENTRY(name, ...) &decompose_##name,
      KILN_TORCH_OPS(KILN_DECOMPOSITION_ENTRY)
#undef KILN_DECOMPOSITION_ENTRY
  };
  return table[static_cast<int>(op)];
}

// torch.get_default_dtype() now (float32 if it cannot be read).
DType default_float_dtype() {
  PyObject* torch = PyImport_ImportModule("torch");
  PyObject* dtype = torch ? PyObject_CallMethod(torch, "get_default_dtype", nullptr) : nullptr;
  PyObject* text = dtype ? PyObject_Str(dtype) : nullptr;
  DType out = text ? graph::dtype_from_name(PyUnicode_AsUTF8(text)) : DType::Float32;
  Py_XDECREF(text);
  Py_XDECREF(dtype);
  Py_XDECREF(torch);
  PyErr_Clear();
  return out == DType::Other ? DType::Float32 : out;
}

void note_uses(const Arg& arg, std::vector<bool>& used) {
  if (arg.kind == Arg::Kind::Node) used[arg.node] = true;
  for (const Arg& item : arg.items) note_uses(item, used);
}

// Rewrites an Arg's node refs to prim values: a tensor node's value, the
// tuple of a tuple-returning node's values. False when a ref names a node
// without tensor values.
bool remap(const Arg& in, const std::vector<std::vector<int>>& values,
           const graph::Graph& traced, Arg* out) {
  switch (in.kind) {
    case Arg::Kind::Node: {
      const std::vector<int>& ids = values[in.node];
      if (ids.empty()) return false;
      if (!traced.node(in.node).returns_tuple) {
        *out = Arg::of_node(ids[0]);
        return true;
      }
      out->kind = Arg::Kind::Tuple;
      out->items.clear();
      for (int id : ids) out->items.push_back(Arg::of_node(id));
      return true;
    }
    case Arg::Kind::Constant:
      *out = in;
      return true;
    default:
      out->kind = in.kind;
      out->items.clear();
      out->items.resize(in.items.size());
      for (PyObject* key : in.keys) Py_INCREF(key);
      out->keys = in.keys;
      for (size_t i = 0; i < in.items.size(); ++i) {
        if (!remap(in.items[i], values, traced, &out->items[i])) return false;
      }
      return true;
  }
  return false;
}

void collect_values(const Arg& arg, std::vector<int>* out) {
  if (arg.kind == Arg::Kind::Node && std::find(out->begin(), out->end(), arg.node) == out->end()) {
    out->push_back(arg.node);
  }
  for (const Arg& item : arg.items) collect_values(item, out);
}

bool same_shape_and_type(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  return a.sizes == b.sizes && a.dtype == b.dtype && a.device_type == b.device_type;
}

// True when the layouts agree wherever a stride means something (dims of
// more than one element, in a tensor that has elements): later views,
// .stride() and is_contiguous() of the value read them.
bool same_layout(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  if (a.sizes != b.sizes || a.strides.size() != b.strides.size()) return false;
  for (int64_t size : a.sizes) {
    if (size == 0) return true;
  }
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    if (a.sizes[d] > 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

// Runs the decomposition of one call; returns its values, or an empty
// vector with *why set when the call stays an extern.
std::vector<int> try_decompose(PrimBuilder& b, const graph::Graph& traced, const Node& node,
                               const prims::OpSpelling& spelling,
                               const std::vector<std::vector<int>>& node_values, std::string* why,
                               bool check_layout = true) {
  prims::BoundArgs bound;
  if (!prims::bind_args(spelling, node.args, node.kwargs, &bound, why)) return {};
  const size_t checkpoint = b.graph().nodes().size();
  const int first_value = static_cast<int>(b.graph().values().size());
  std::vector<int> values;
  try {
    DecomposeCall call(b, traced, node, spelling, bound, node_values);
    values = decomposition_table(spelling.op)(call);
    if (values.size() != node.metas.size()) {
      *why = spelling.text + ": decomposition gave " + std::to_string(values.size()) +
             " results, torch " + std::to_string(node.metas.size());
      values.clear();
    }
    for (size_t i = 0; i < values.size(); ++i) {
      // Traced with grad mode off (torch.no_grad() inside the function):
      // the result carries no gradient. A value the decomposition did not
      // make (an input passed through) cannot be marked, so the call stays
      // an extern, whose traced result says so.
      if (!node.metas[i].requires_grad && b.meta(values[i]).requires_grad) {
        if (values[i] < first_value) {
          *why = spelling.text + ": passes a value through under no_grad";
          values.clear();
          break;
        }
        b.graph().stop_grad(values[i]);
      }
      // A safety net: a decomposition must reproduce torch's result type
      // and layout (Note [Meta layouts]: a number raised to a transposed
      // tensor is contiguous, and a later view(-1) relies on it).
      // A write through a view (Note [Writes through views]) checks no
      // layout: the view's traced strides are its base's, and the view is
      // made again from the new base.
      if (!same_shape_and_type(b.meta(values[i]), node.metas[i]) ||
          (check_layout && !same_layout(b.meta(values[i]), node.metas[i]))) {
        *why = spelling.text + ": decomposition gave " + graph::format_tensor_meta(b.meta(values[i])) +
               ", torch " + graph::format_tensor_meta(node.metas[i]);
        values.clear();
        break;
      }
      // Strides along size-1 dims address nothing, but Tensor.stride()
      // shows them (a clone of a [1] tensor with stride 2 keeps 2, and so
      // does an in-place op on it): a value this decomposition made takes
      // torch's.
      if (check_layout && values[i] >= first_value && b.meta(values[i]).strides != node.metas[i].strides &&
          !std::any_of(node.metas[i].sizes.begin(), node.metas[i].sizes.end(), [](int64_t s) { return s == 0; })) {
        b.graph().set_unit_dim_strides(values[i], node.metas[i].strides);
      }
    }
  } catch (const NotDecomposed& e) {
    *why = e.what();
  } catch (const PrimError& e) {
    *why = spelling.text + ": " + e.what();
  }
  if (values.empty()) b.graph().truncate(checkpoint);
  return values;
}

// The out-of-place twin of an in-place torch callable (Tensor.mul_ ->
// Tensor.mul, torch.relu_ -> torch.relu, F.relu_ -> F.relu; Tensor.zero_ ->
// torch.zeros_like, Tensor.fill_ -> torch.full_like) or augmented
// assignment (operator.iadd -> operator.add: `t += x`), or null.
PyRef out_of_place_twin(PyObject* target) {
  PyRef name = PyRef::steal(PyObject_GetAttrString(target, "__name__"));
  if (!name || !PyUnicode_Check(name.get())) {
    PyErr_Clear();
    return PyRef();
  }
  std::string text = PyUnicode_AsUTF8(name.get());
  PyRef module = PyRef::steal(PyObject_GetAttrString(target, "__module__"));
  if (!module) PyErr_Clear();
  if (module && PyUnicode_Check(module.get()) && std::string(PyUnicode_AsUTF8(module.get())) == "_operator") {
    static const char* const kAugmented[] = {"iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow",
                                             "iand", "ior", "ixor", "ilshift", "irshift", "imatmul"};
    if (std::find(std::begin(kAugmented), std::end(kAugmented), text) == std::end(kAugmented)) return PyRef();
    PyRef operator_module = PyRef::steal(PyImport_ImportModule("operator"));
    PyRef twin = operator_module ? PyRef::steal(PyObject_GetAttrString(operator_module.get(), text.c_str() + 1))
                                 : PyRef();
    if (!twin) PyErr_Clear();
    return twin;
  }
  if (text.size() < 2 || text.back() != '_' || text.starts_with("__")) return PyRef();
  // Fills whose out-of-place form is a factory of the tensor's kind.
  if (text == "zero_" || text == "fill_") {
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    PyRef twin = torch ? PyRef::steal(PyObject_GetAttrString(torch.get(), text == "zero_" ? "zeros_like" : "full_like"))
                       : PyRef();
    if (!twin) PyErr_Clear();
    return twin;
  }
  text.pop_back();
  PyRef owner = PyRef::steal(PyObject_GetAttrString(target, "__objclass__"));
  if (!owner) {
    PyErr_Clear();
    PyRef module = PyRef::steal(PyObject_GetAttrString(target, "__module__"));
    const char* module_name = module && PyUnicode_Check(module.get()) ? PyUnicode_AsUTF8(module.get()) : nullptr;
    // torch's C functions name torch._C._VariableFunctions or nothing.
    if (!module_name || std::string(module_name).starts_with("torch._C")) module_name = "torch";
    owner = PyRef::steal(PyImport_ImportModule(module_name));
  }
  PyRef twin = owner ? PyRef::steal(PyObject_GetAttrString(owner.get(), text.c_str())) : PyRef();
  if (!twin) PyErr_Clear();
  return twin;
}

// True when a node other than `except` may see `value`'s storage: a view
// of it, or an extern reading it (which may keep or return it); with
// `any_read`, any node reading it.
bool read_elsewhere(const PrimGraph& graph, int value, const PrimNode* except, bool any_read) {
  for (const PrimNode& node : graph.nodes()) {
    if (&node == except) continue;
    const bool view = any_read || prim_info(node.prim).family == Family::View;
    for (const PrimArg& arg : node.args) {
      if (view && arg.is_value() && arg.value == value) return true;
    }
    if (node.prim != Prim::Extern) continue;
    std::vector<int> reads;
    for (const Arg& arg : node.attrs.extern_args) collect_values(arg, &reads);
    for (const auto& kw : node.attrs.extern_kwargs) collect_values(kw.second, &reads);
    if (std::find(reads.begin(), reads.end(), value) != reads.end()) return true;
  }
  return false;
}

// A view whose base nothing else reads or names: the reshape back to 3-d
// that a linear on 3-d input makes of its matmul (Falcon's `mlp_output +=
// attention_output`). Writing through it changes nothing anyone else can
// see; `named` lists the values traced nodes stand for (later nodes may
// read those).
bool private_view(const PrimGraph& graph, int value, const std::vector<std::vector<int>>& named) {
  const PrimValue& v = graph.value(value);
  if (v.node < 0) return false;
  const PrimNode& view = graph.node(v.node);
  if (prim_info(view.prim).family != Family::View) return false;
  int base = -1;
  for (const PrimArg& arg : view.args) {
    if (arg.is_value()) {
      base = arg.value;
      break;
    }
  }
  if (base < 0 || read_elsewhere(graph, base, &view, /*any_read=*/true)) return false;
  for (const std::vector<int>& ids : named) {
    if (std::find(ids.begin(), ids.end(), base) != ids.end()) return false;
  }
  const PrimValue& b = graph.value(base);
  if (b.node < 0) return false;  // a graph input
  const PrimNode& maker = graph.node(b.node);
  if (prim_info(maker.prim).family == Family::View) return private_view(graph, base, named);
  return maker.prim != Prim::Extern || maker.attrs.extern_fresh;
}

// True when `value` may share storage with another value of `graph`: it is
// a view (but a private one) or an extern's result, a view was taken of it,
// or an extern call saw it (which may have kept a view).
bool may_alias(const PrimGraph& graph, int value, const std::vector<std::vector<int>>& named) {
  const PrimValue& v = graph.value(value);
  if (v.node < 0) return true;  // a graph input: the caller sees its changes
  if (prim_info(graph.node(v.node).prim).family == Family::View && !private_view(graph, value, named)) return true;
  // An extern's result may be one of its arguments (operator.iadd returns
  // the tensor it wrote into), unless the trace saw a new tensor.
  if (graph.node(v.node).prim == Prim::Extern && !graph.node(v.node).attrs.extern_fresh) return true;
  return read_elsewhere(graph, value, nullptr, /*any_read=*/false);
}

// Rewrites `call`'s arguments so that an `inplace` parameter of `spelling`
// given as True is False; false when the call has no such argument.
bool without_inplace_flag(const prims::OpSpelling& spelling, Node* call) {
  for (auto& [key, arg] : call->kwargs) {
    if (key == "inplace" && arg.kind == Arg::Kind::Constant && arg.constant == Py_True) {
      arg = Arg::of_constant(Py_False);
      return true;
    }
  }
  for (size_t i = 0; i < spelling.params.size() && i < call->args.size(); ++i) {
    const prims::Param& param = spelling.params[i];
    if (param.keyword_only || param.varargs) break;
    if (param.name == "inplace" && call->args[i].kind == Arg::Kind::Constant && call->args[i].constant == Py_True) {
      call->args[i] = Arg::of_constant(Py_False);
      return true;
    }
  }
  return false;
}

// A call node like `node` (same id, arguments and traced results) for its
// functional twin to be decomposed in its place.
Node functional_call(const Node& node) {
  Node functional;
  functional.id = node.id;
  functional.kind = NodeKind::Call;
  functional.args = node.args;
  functional.kwargs = node.kwargs;
  functional.metas = node.metas;
  return functional;
}

// Note [In-place ops on intermediates]
// `y.mul_(2)` on a tensor the graph made, which nothing else can see (no
// view of it, not an input), is the out-of-place `y.mul(2)` with every later
// use of y reading the new value: the same numbers, and a graph autograd can
// differentiate. Anything that may alias stays an extern running in place.
// The same holds for a call with inplace=True (F.relu(y, inplace=True), the
// nn.ReLU(inplace=True) of conv nets): it is the call with inplace=False.
std::vector<int> functionalize_inplace(PrimBuilder& b, const graph::Graph& traced, const Node& node,
                                       std::vector<std::vector<int>>& values, bool grad_mode) {
  if (node.args.empty()) return {};
  if (node.args[0].kind == Arg::Kind::Constant) {
    // `n += t` on a Python number (T5's relative_buckets = 0, then
    // relative_buckets += ...): numbers are immutable, so it is `n + t`.
    PyObject* number = node.args[0].constant;
    if (!PyLong_Check(number) && !PyFloat_Check(number) && !PyBool_Check(number)) return {};
    PyRef twin = out_of_place_twin(node.target);
    const prims::OpSpelling* spelling = twin ? prims::find_torch_op(twin.get()) : nullptr;
    if (!spelling) return {};
    Node functional = functional_call(node);
    functional.target = twin.release();
    functional.target_name = spelling->text;
    std::string why;
    return try_decompose(b, traced, functional, *spelling, values, &why);
  }
  if (node.args[0].kind != Arg::Kind::Node) return {};
  const int base = node.args[0].node;
  if (traced.node(base).returns_tuple || values[base].size() != 1) return {};
  const int mutated = values[base][0];
  const bool aliased = may_alias(b.graph(), mutated, values);
  Node functional = functional_call(node);
  const prims::OpSpelling* spelling = nullptr;
  if (PyRef twin = out_of_place_twin(node.target)) {
    spelling = prims::find_torch_op(twin.get());
    functional.target = twin.release();
  } else if (spelling = prims::find_torch_op(node.target); spelling && without_inplace_flag(*spelling, &functional)) {
    // F.relu(x, inplace=True): the same call with inplace=False
    Py_INCREF(node.target);
    functional.target = node.target;
  } else if (spelling && spelling->op == prims::TorchOp::SetItem && node.args.size() == 3 &&
             !traced.node(base).metas.empty()) {
    // y[index] = v: y with the block written (Note [Index writes on
    // intermediates]), a value of y's meta.
    Py_INCREF(node.target);
    functional.target = node.target;
    functional.metas = {traced.node(base).metas[0]};
    // Writing a value that carries gradients puts y on their path, as
    // torch's copy_ records it (the traced meta is y's before the write).
    const Arg& written = node.args[2];
    const bool carries = written.kind == Arg::Kind::Node && values[written.node].size() == 1 &&
                         b.meta(values[written.node][0]).requires_grad;
    functional.metas[0].requires_grad = b.meta(mutated).requires_grad || (grad_mode && carries);
  } else {
    return {};
  }
  if (!spelling) return {};
  // Note [Writes through views]: a write into a view of a tensor the graph
  // made carries back to that tensor and its other views.
  std::optional<ViewWrite> through;
  if (aliased) {
    std::string why;
    through = plan_view_write(b.graph(), mutated, &why);
    if (!through) {
      KILN_LOG(prims, node.target_name << " (node %" << node.id << ") stays in place: " << why);
      return {};
    }
  }
  // A fill through a view: the filled block carries no gradient (torch's
  // ZeroBackward gives it none), the base around it keeps its own.
  if (through && (spelling->op == prims::TorchOp::ZerosLike || spelling->op == prims::TorchOp::FullLike)) {
    functional.metas[0].requires_grad = false;
  }
  functional.target_name = spelling->text;
  std::string why;
  std::vector<int> result = try_decompose(b, traced, functional, *spelling, values, &why, !through);
  if (result.size() != 1) {
    if (through) KILN_LOG(prims, node.target_name << " (node %" << node.id << ") stays in place: " << why);
    return {};
  }
  std::map<int, int> carried;
  if (through) {
    std::set<int> named;
    for (int k = 0; k < node.id; ++k) named.insert(values[k].begin(), values[k].end());
    carried = carry_view_write(b, *through, result[0], named);
  }
  for (int k = 0; k < node.id; ++k) {
    for (int& id : values[k]) {
      if (auto it = carried.find(id); it != carried.end()) {
        id = it->second;
      } else if (id == mutated) {
        id = result[0];
      }
    }
  }
  if (auto it = carried.find(mutated); it != carried.end()) result[0] = it->second;
  KILN_LOG(prims, node.target_name << " (node %" << node.id << ") computed out of place"
                           << (through ? " (a write through a view)" : ""));
  return result;
}

}  // namespace

DecomposeFn decomposition_of(prims::TorchOp op) { return decomposition_table(op); }

std::optional<Decomposition> decompose_graph(const graph::Graph& traced, bool grad_enabled,
                                             std::string* why, const graph::Arg* output,
                                             const std::vector<bool>* skipped) {
  const auto& nodes = traced.nodes();
  const graph::Arg& traced_output = output ? *output : traced.output();
  auto is_skipped = [skipped](int id) { return skipped && (*skipped)[id]; };
  std::vector<bool> used(nodes.size(), false);
  for (const Node& node : nodes) {
    if (is_skipped(node.id)) continue;
    if (!node.symbolic_sizes.empty() || !node.int_symbol.empty()) {
      *why = "node %" + std::to_string(node.id) + " has symbolic sizes";
      return std::nullopt;
    }
    for (const Arg& arg : node.args) note_uses(arg, used);
    for (const auto& kw : node.kwargs) note_uses(kw.second, used);
  }
  const std::vector<bool> used_by_calls = used;
  note_uses(traced_output, used);
  // Object inputs pass through inference graphs only: an autograd
  // Function's outputs must be tensors.
  bool records_gradients = false;
  for (const Node& node : nodes) {
    for (const graph::TensorMeta& meta : node.metas) records_gradients = records_gradients || (grad_enabled && meta.requires_grad);
  }

  Decomposition out;
  out.graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*out.graph, default_float_dtype());
  std::vector<std::vector<int>> values(nodes.size());
  // Inputs first: a PrimGraph's inputs precede its other values.
  for (int id : traced.inputs()) {
    const Node& node = traced.node(id);
    if (node.metas.empty() && !used_by_calls[id] && (!records_gradients || !used[id])) {
      // An object the graph only returns (a KV cache object in a model's
      // output), or one nothing reads (a dynamic int a size instance
      // folded, Note [Dynamic ints]): passed through as a value no prim
      // reads.
      graph::TensorMeta passed;
      passed.dtype = graph::DType::Other;
      values[id] = {out.graph->add_input(passed)};
      continue;
    }
    if (node.metas.size() != 1) {
      *why = "input " + node.input_name + " is not a tensor";
      return std::nullopt;
    }
    graph::TensorMeta meta = node.metas[0];
    meta.requires_grad = meta.requires_grad && grad_enabled;
    values[id] = {out.graph->add_input(meta)};
  }
  bool grad_mode = grad_enabled;
  // Values a call makes inside a checkpointed region carry its id (Note
  // [Checkpointed regions] in autograd/partitioner.cpp), however the call
  // leaves the loop body.
  struct RegionMark {
    PrimGraph& graph;
    const int first;
    const int region;
    ~RegionMark() {
      if (region < 0) return;
      for (int v = first; v < static_cast<int>(graph.values().size()); ++v) graph.mark_checkpoint(v, region);
    }
  };
  for (const Node& node : nodes) {
    if (node.kind != NodeKind::Call || is_skipped(node.id)) continue;
    RegionMark mark{*out.graph, static_cast<int>(out.graph->values().size()), node.checkpoint};
    // Autocast's casts are nodes of their own (Note [Explicit autocast
    // casts]): entering and leaving it means nothing to prims.
    if (node.target_name == "kiln.enter_autocast" || node.target_name == "kiln.exit_autocast") continue;
    if (node.autocast_implicit) {
      *why = "node %" + std::to_string(node.id) + " (" + node.target_name +
             ") computes under autocast with casts kiln could not make explicit";
      return std::nullopt;
    }
    if (node.target_name == "torch._C._set_grad_enabled" && node.args.size() == 1 &&
        node.args[0].kind == Arg::Kind::Constant && PyBool_Check(node.args[0].constant)) {
      grad_mode = node.args[0].constant == Py_True;
    }
    // Only a view keeps requires_grad under torch.no_grad(); such a view
    // carries the flag but no history, which prim graphs cannot express.
    // A graph entered with grad mode off has no gradients in its prims:
    // a value made with grad turned on inside it (`with torch.enable_grad():`
    // under no_grad) would lose its history, so such a graph runs through
    // torch (fuzz seed 65699).
    for (const graph::TensorMeta& meta : node.metas) {
      if (!grad_mode && grad_enabled && meta.requires_grad) {
        *why = "node %" + std::to_string(node.id) + " (" + node.target_name +
               ") is a view taken under torch.no_grad() of a tensor that requires grad";
        return std::nullopt;
      }
      if (grad_mode && !grad_enabled && meta.requires_grad) {
        *why = "node %" + std::to_string(node.id) + " (" + node.target_name +
               ") needs a gradient in a block that turned grad mode on inside a graph entered without it";
        return std::nullopt;
      }
    }
    if (node.metas.empty() && used[node.id]) {
      *why = "node %" + std::to_string(node.id) + " (" + node.target_name +
             ") makes a non-tensor value that the graph uses";
      return std::nullopt;
    }
    // An item of a tuple-returning call is one of its values.
    if (node.target_name == "operator.getitem" && node.args.size() == 2 &&
        node.args[0].kind == Arg::Kind::Node && traced.node(node.args[0].node).returns_tuple &&
        node.args[1].kind == Arg::Kind::Constant && PyLong_Check(node.args[1].constant)) {
      const std::vector<int>& items = values[node.args[0].node];
      const long index = PyLong_AsLong(node.args[1].constant);
      if (index >= 0 && index < static_cast<long>(items.size())) {
        values[node.id] = {items[index]};
        continue;
      }
    }
    // Note [Grad leaves made in a graph]: differentiated as if not there.
    if (graph::is_unobservable_grad_leaf(traced, node)) {
      values[node.id] = values[node.args[0].node];
      continue;
    }
    if (std::vector<int> functional = functionalize_inplace(b, traced, node, values, grad_mode); !functional.empty()) {
      values[node.id] = std::move(functional);
      ++out.decomposed_calls;
      continue;
    }
    std::string reason = "no decomposition";
    const prims::OpSpelling* spelling = prims::find_torch_op(node.target);
    if (spelling && !node.metas.empty()) {
      values[node.id] = try_decompose(b, traced, node, *spelling, values, &reason);
      if (!values[node.id].empty()) {
        ++out.decomposed_calls;
        continue;
      }
    }
    // Kept as a call of the original callable.
    std::vector<Arg> args(node.args.size());
    std::vector<std::pair<std::string, Arg>> kwargs(node.kwargs.size());
    bool ok = true;
    for (size_t i = 0; i < node.args.size(); ++i) ok = ok && remap(node.args[i], values, traced, &args[i]);
    for (size_t i = 0; i < node.kwargs.size(); ++i) {
      kwargs[i].first = node.kwargs[i].first;
      ok = ok && remap(node.kwargs[i].second, values, traced, &kwargs[i].second);
    }
    if (!ok) {
      *why = "node %" + std::to_string(node.id) + " (" + node.target_name +
             ") takes a non-tensor value the graph computes";
      return std::nullopt;
    }
    std::vector<graph::TensorMeta> metas = node.metas;
    for (graph::TensorMeta& meta : metas) meta.requires_grad = meta.requires_grad && grad_enabled;
    values[node.id] = b.extern_call(node.target, node.target_name, std::move(args), std::move(kwargs), metas,
                                    /*pure=*/false, /*fresh=*/node.fresh_result);
    ++out.extern_calls;
    KILN_LOG(prims, "extern " << node.target_name << " (node %" << node.id << "): " << reason);
  }
  if (!remap(traced_output, values, traced, &out.output)) {
    *why = "the output holds a non-tensor value the graph computes";
    return std::nullopt;
  }
  std::vector<int> outputs;
  collect_values(out.output, &outputs);
  out.graph->set_outputs(std::move(outputs));
  if (std::string problem = out.graph->verify(); !problem.empty()) {
    *why = "invalid prim graph: " + problem;
    return std::nullopt;
  }
  return out;
}

}  // namespace kiln::prims
