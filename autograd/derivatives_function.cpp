// Derivative of a custom autograd.Function call whose backward the tracer
// traced (Note [Traced Function backwards] in tracer/trace_function_vjp.cpp):
// that graph, decomposed into the backward.
#include <Python.h>

#include "autograd/derivatives_family.h"
#include "base/log.h"
#include "base/module_attr.h"
#include "base/py_ref.h"
#include "graph/graph.h"
#include "prims/decompose.h"
#include "prims/extern_writes.h"
#include "prims/layout.h"
#include "prims/subgraph.h"

namespace kiln::autograd {
namespace {

using base::PyRef;

// kiln._autograd.TracedFunctionCall (kept for the process), or null.
PyObject* traced_call_class() {
  static PyObject* cls = [] {
    PyObject* found = base::import_attr("kiln._autograd", "TracedFunctionCall");
    if (!found) PyErr_Clear();
    return found;
  }();
  return cls;
}

bool same_layout(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  return a.sizes == b.sizes && a.dtype == b.dtype && a.device_type == b.device_type &&
         a.device_index == b.device_index &&
         prims::preserved_strides(a.sizes, a.strides) == prims::preserved_strides(b.sizes, b.strides);
}

}  // namespace

std::optional<std::vector<int>> vjp_traced_function(prims::PrimBuilder& b, const NodeView& view,
                                                    const std::vector<int>& grads) {
  const prims::PrimAttrs& attrs = view.node.attrs;
  PyObject* cls = traced_call_class();
  if (!cls || !PyObject_TypeCheck(attrs.target, reinterpret_cast<PyTypeObject*>(cls))) return std::nullopt;
  auto fallback = [&](const std::string& why) {
    KILN_LOG(prims, attrs.target_name << ": traced backward not used (" << why
                                      << "); its gradient reruns the Function through torch");
    return std::nullopt;
  };
  if (attrs.extern_args.size() != 3 || view.outputs.size() != 1 || grads.empty() || grads[0] < 0) {
    return fallback("an unexpected call form");
  }
  PyRef capsule = PyRef::steal(PyObject_GetAttrString(attrs.target, "backward"));
  auto* backward = capsule ? static_cast<const graph::Graph*>(PyCapsule_GetPointer(capsule.get(), "kiln.graph.Graph"))
                           : nullptr;
  if (!backward) {
    PyErr_Clear();
    return fallback("no backward graph");
  }
  std::string why;
  std::optional<prims::Decomposition> decomposed = prims::decompose_graph(*backward, /*grad_enabled=*/false, &why);
  if (!decomposed) return fallback(why);
  const prims::PrimGraph& bwd = *decomposed->graph;
  // A write torch makes in place into a backward value (an in-place op
  // kiln could not compute out of place) is not ordered with kiln's reads
  // of it once spliced in.
  for (const prims::PrimNode& node : bwd.nodes()) {
    if (node.prim == prims::Prim::Extern && prims::extern_writes_arguments(node.attrs)) {
      return fallback("its backward writes in place through " + node.attrs.target_name);
    }
  }
  const size_t tensors = attrs.extern_args[1].items.size();
  const size_t saved = attrs.extern_args[2].items.size();
  if (bwd.inputs().size() != 1 + saved || view.inputs.size() != 1 + tensors + saved) {
    return fallback("inputs do not match");
  }
  std::vector<int> map(bwd.values().size(), -1);
  // The output's gradient in the layout the backward was traced for.
  const graph::TensorMeta want = bwd.value(bwd.inputs()[0]).meta;
  int g = grads[0];
  if (!same_layout(b.meta(g), want)) {
    if (b.meta(g).sizes != want.sizes || b.meta(g).dtype != want.dtype ||
        !prims::is_contiguous(want.sizes, want.strides)) {
      return fallback("the gradient's layout differs from the traced one");
    }
    g = b.clone(g, prims::MemoryFormat::Contiguous);
  }
  map[bwd.inputs()[0]] = g;
  for (size_t j = 0; j < saved; ++j) {
    const int value = view.inputs[1 + tensors + j];
    if (!same_layout(b.meta(value), bwd.value(bwd.inputs()[1 + j]).meta)) return fallback("a saved value's layout changed");
    map[bwd.inputs()[1 + j]] = value;
  }
  for (const prims::PrimNode& node : bwd.nodes()) {
    const std::vector<int> made = prims::copy_node(b.graph(), bwd, node, map);
    for (size_t i = 0; i < made.size(); ++i) map[node.outputs[i]] = made[i];
  }
  const graph::Arg& out = decomposed->output;
  if (out.kind != graph::Arg::Kind::Tuple || out.items.size() != tensors) return fallback("an unexpected output");
  std::vector<int> result(view.inputs.size(), -1);
  for (size_t i = 0; i < tensors; ++i) {
    const graph::Arg& item = out.items[i];
    if (item.kind != graph::Arg::Kind::Node) continue;  // None: no gradient
    int grad = map[item.node];
    const graph::TensorMeta input = b.meta(view.inputs[1 + i]);
    if (b.meta(grad).sizes != input.sizes) return fallback("a gradient's sizes differ from its input's");
    if (b.meta(grad).dtype != input.dtype) grad = b.convert(grad, input.dtype);
    result[1 + i] = grad;
  }
  return result;
}

}  // namespace kiln::autograd
