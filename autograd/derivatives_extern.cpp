// Derivative of extern nodes: torch differentiates them (Note [Extern
// gradients]).
#include <Python.h>

#include <string>

#include "autograd/derivatives_family.h"
#include "prims/extern_writes.h"
#include "prims/layout.h"
#include "base/py_ref.h"

namespace kiln::autograd {

// Note [Extern gradients]
// An extern is an op kiln keeps as a torch call (conv2d, max_pool2d, ...):
// kiln has no rule for it, torch has. Its vjp is one backward extern node
// calling kiln._extern_vjp.extern_vjp(fn, args, kwargs, slots, grads, strides), which
// re-runs fn(*args, **kwargs) under enable_grad with the tensors at `slots`
// replaced by detached leaves that require grad, and returns
// torch.autograd.grad of the outputs for `grads` (in empty_like's layout of
// each input, whose strides it is given; zeros where torch has none). Cost: the op runs a second time in the backward, because
// the forward's autograd graph is not kept (a later step may save it
// instead). A call that mutates its arguments or draws random numbers would
// recompute something else, so those throw NoDerivative.
// A slot is a path: (0, i, ...) into the positional arguments or
// (1, name, ...) into the keywords, then tuple/list indices or dict keys;
// slots follow extern_inputs() order.
//
// A callable with its own gradient carries it as the attribute `kiln_vjp`:
// kiln_vjp(args, kwargs, outputs, slots, grads) gets the forward's outputs
// too (saved, not recomputed) and returns the gradients in the layout of
// empty_like of each input (kiln._attention.attention: Note [Fused
// attention kernels]). Only kiln's own calls are marked pure, and a pure
// call's kiln_vjp must be pure too (write no argument, return fresh
// tensors): its call is marked so, and passes may move copies across it
// (Note [Copies undone by permutes]). torch.autograd.grad may return a
// gradient it was given, so extern_vjp's calls are not.

namespace {

using base::PyRef;

// Appends the value ids `arg` refers to, depth-first.
void collect_values(const graph::Arg& arg, std::vector<int>& ids) {
  if (arg.kind == graph::Arg::Kind::Node) ids.push_back(arg.node);
  for (const graph::Arg& item : arg.items) collect_values(item, ids);
}

// Appends, per value `arg` refers to, the path to it (as collect_values).
void collect_paths(const graph::Arg& arg, std::vector<PyRef>& path, std::vector<std::vector<PyRef>>& paths) {
  if (arg.kind == graph::Arg::Kind::Node) paths.push_back(path);
  for (size_t i = 0; i < arg.items.size(); ++i) {
    path.push_back(arg.kind == graph::Arg::Kind::Dict ? PyRef::borrow(arg.keys[i])
                                                      : PyRef::steal(PyLong_FromSize_t(i)));
    collect_paths(arg.items[i], path, paths);
    path.pop_back();
  }
}

// Every path of the node's arguments, in extern_inputs() order.
std::vector<std::vector<PyRef>> extern_paths(const prims::PrimAttrs& attrs) {
  std::vector<std::vector<PyRef>> paths;
  std::vector<PyRef> path = {PyRef::steal(PyLong_FromLong(0)), PyRef()};
  for (size_t i = 0; i < attrs.extern_args.size(); ++i) {
    path[1] = PyRef::steal(PyLong_FromSize_t(i));
    collect_paths(attrs.extern_args[i], path, paths);
  }
  path[0] = PyRef::steal(PyLong_FromLong(1));
  for (const auto& [name, arg] : attrs.extern_kwargs) {
    path[1] = PyRef::steal(PyUnicode_FromString(name.c_str()));
    collect_paths(arg, path, paths);
  }
  return paths;
}

}  // namespace

namespace {

// kiln._extern_vjp.extern_vjp, imported on first use and kept for the
// process (a new reference never released). Throws NoDerivative when the
// module cannot be imported (then a later call tries again).
PyObject* extern_vjp_helper() {
  static PyObject* helper = nullptr;
  if (helper != nullptr) return helper;
  PyRef module = PyRef::steal(PyImport_ImportModule("kiln._extern_vjp"));
  helper = module ? PyObject_GetAttrString(module.get(), "extern_vjp") : nullptr;
  if (helper == nullptr) {
    PyErr_Clear();
    throw NoDerivative("extern: cannot import kiln._extern_vjp.extern_vjp");
  }
  return helper;
}

}  // namespace

std::vector<int> extern_inputs(const prims::PrimNode& node) {
  std::vector<int> ids;
  for (const graph::Arg& arg : node.attrs.extern_args) collect_values(arg, ids);
  for (const auto& kw : node.attrs.extern_kwargs) collect_values(kw.second, ids);
  return ids;
}

std::vector<int> vjp_extern(prims::PrimBuilder& b, const NodeView& view,
                            const std::vector<int>& grads, const std::vector<bool>& needs) {
  if (std::optional<std::vector<int>> traced = vjp_traced_function(b, view, grads)) return *traced;
  const prims::PrimAttrs& attrs = view.node.attrs;
  std::vector<int> out(view.inputs.size(), -1);
  // Only Python functions are asked: a torch op's attribute lookup may build things.
  PyRef own_vjp = PyFunction_Check(attrs.target) ? PyRef::steal(PyObject_GetAttrString(attrs.target, "kiln_vjp"))
                                                 : PyRef();
  PyErr_Clear();
  const std::string why = prims::extern_effect(attrs);
  if (!own_vjp && !why.empty()) throw NoDerivative("extern " + attrs.target_name + ": no gradient, " + why);
  PyObject* helper = own_vjp ? own_vjp.get() : extern_vjp_helper();
  const std::vector<std::vector<PyRef>> paths = extern_paths(attrs);
  PyRef slots = PyRef::steal(PyList_New(0));
  std::vector<size_t> wanted;
  std::vector<graph::TensorMeta> metas;
  for (size_t i = 0; i < view.inputs.size(); ++i) {
    if (!needs[i]) continue;
    PyRef path = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(paths[i].size())));
    for (size_t k = 0; k < paths[i].size(); ++k) {
      PyTuple_SET_ITEM(path.get(), k, PyRef(paths[i][k]).release());
    }
    PyList_Append(slots.get(), path.get());
    graph::TensorMeta meta = b.meta(view.inputs[i]);
    // Both return gradients in empty_like's layout of their input (a
    // channels-last convolution's gradients stay channels-last, Note
    // [Channels-last convolutions]); extern_vjp is told the strides.
    meta.strides = prims::preserved_strides(meta.sizes, meta.strides);
    meta.requires_grad = false;
    metas.push_back(meta);
    wanted.push_back(i);
  }
  if (wanted.empty()) return out;
  PyRef strides = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(metas.size())));
  for (size_t k = 0; k < metas.size(); ++k) {
    PyObject* item = PyTuple_New(static_cast<Py_ssize_t>(metas[k].strides.size()));
    for (size_t d = 0; d < metas[k].strides.size(); ++d) {
      PyTuple_SET_ITEM(item, static_cast<Py_ssize_t>(d), PyLong_FromLongLong(metas[k].strides[d]));
    }
    PyTuple_SET_ITEM(strides.get(), static_cast<Py_ssize_t>(k), item);
  }
  graph::Arg positional;
  positional.kind = graph::Arg::Kind::Tuple;
  positional.items = attrs.extern_args;
  graph::Arg keywords;
  keywords.kind = graph::Arg::Kind::Dict;
  for (const auto& [name, arg] : attrs.extern_kwargs) {
    keywords.keys.push_back(PyUnicode_FromString(name.c_str()));  // owned by keywords
    keywords.items.push_back(arg);
  }
  graph::Arg grad_args;
  grad_args.kind = graph::Arg::Kind::Tuple;
  for (int g : grads) grad_args.items.push_back(g >= 0 ? graph::Arg::of_node(g) : graph::Arg::of_constant(Py_None));
  PyRef slot_tuple = PyRef::steal(PyList_AsTuple(slots.get()));
  std::vector<graph::Arg> args;
  std::string name;
  if (own_vjp) {
    graph::Arg outputs;
    outputs.kind = graph::Arg::Kind::Tuple;
    for (int id : view.outputs) outputs.items.push_back(graph::Arg::of_node(id));
    args = {std::move(positional), std::move(keywords), std::move(outputs), graph::Arg::of_constant(slot_tuple.get()),
            std::move(grad_args)};
    name = attrs.target_name + ".kiln_vjp";
  } else {
    args = {graph::Arg::of_constant(attrs.target), std::move(positional), std::move(keywords),
            graph::Arg::of_constant(slot_tuple.get()), std::move(grad_args), graph::Arg::of_constant(strides.get())};
    name = "extern_vjp(" + attrs.target_name + ")";
  }
  const bool pure = own_vjp && attrs.extern_pure;
  const std::vector<int> ids = b.extern_call(helper, name, std::move(args), {}, metas, pure);
  for (size_t k = 0; k < wanted.size(); ++k) out[wanted[k]] = ids[k];
  return out;
}

}  // namespace kiln::autograd
