#include "runtime/callable_backend_executor.h"

#include <vector>

#include "runtime/graph_arg_values.h"

namespace kiln::runtime {

using base::PyRef;
namespace {

// A tuple of Python objects from new references; null when one is null.
PyObject* tuple_of(std::vector<PyObject*> items) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
  bool failed = tuple == nullptr;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i]) failed = true;
    if (tuple) {
      PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), items[i]);
    } else {
      Py_XDECREF(items[i]);
    }
  }
  if (failed) Py_CLEAR(tuple);
  return tuple;
}

}  // namespace

CallableBackendExecutor::CallableBackendExecutor(const graph::Graph& graph, PyObject* backend,
                                                 const std::vector<bool>* skipped, const graph::Arg* output_arg) {
  PyRef fx = PyRef::steal(PyImport_ImportModule("kiln._fx"));
  PyRef ref_type = fx ? PyRef::steal(PyObject_GetAttrString(fx.get(), "Ref")) : PyRef();
  PyRef compile_with = fx ? PyRef::steal(PyObject_GetAttrString(fx.get(), "compile_with")) : PyRef();
  if (!ref_type || !compile_with) return;
  const auto& nodes = graph.nodes();
  // Each node's value is a kiln._fx.Ref in the arguments described.
  std::vector<PyRef> owned_refs;
  std::vector<PyObject*> refs(nodes.size(), nullptr);
  for (const graph::Node& node : nodes) {
    owned_refs.push_back(PyRef::steal(PyObject_CallFunction(ref_type.get(), "i", node.id)));
    if (!(refs[node.id] = owned_refs.back().get())) return;
  }
  PyRef inputs = PyRef::steal(PyList_New(0));
  PyRef calls = PyRef::steal(PyList_New(0));
  for (const graph::Node& node : nodes) {
    PyRef item;
    if (node.kind == graph::NodeKind::Input) {
      item = PyRef::steal(Py_BuildValue("(is)", node.id, node.input_name.c_str()));
      if (!item || PyList_Append(inputs.get(), item.get()) < 0) return;
      ++input_count_;
      continue;
    }
    if (skipped && (*skipped)[node.id]) continue;
    std::vector<PyObject*> args;
    for (const graph::Arg& arg : node.args) args.push_back(materialize_arg(arg, refs.data()));
    PyRef positional = PyRef::steal(tuple_of(std::move(args)));
    PyRef keywords = PyRef::steal(PyDict_New());
    if (!positional || !keywords) return;
    for (const auto& [key, arg] : node.kwargs) {
      PyRef value = PyRef::steal(materialize_arg(arg, refs.data()));
      if (!value || PyDict_SetItemString(keywords.get(), key.c_str(), value.get()) < 0) return;
    }
    item = PyRef::steal(Py_BuildValue("(iOOO)", node.id, node.target, positional.get(), keywords.get()));
    if (!item || PyList_Append(calls.get(), item.get()) < 0) return;
  }
  PyRef output = PyRef::steal(materialize_arg(output_arg ? *output_arg : graph.output(), refs.data()));
  if (!output) return;
  runner_ = PyRef::steal(PyObject_CallFunctionObjArgs(compile_with.get(), backend, inputs.get(), calls.get(),
                                                      output.get(), nullptr));
}

PyObject* CallableBackendExecutor::run(PyObject* const* inputs) const {
  return PyObject_Vectorcall(runner_.get(), inputs, input_count_, nullptr);
}

}  // namespace kiln::runtime
