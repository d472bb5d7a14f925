#include "runtime/eager_executor.h"

#include <algorithm>

#include "runtime/aten_bridge.h"
#include "runtime/graph_arg_values.h"
#include "base/small_buffer.h"

namespace kiln::runtime {

using base::SmallBuffer;
namespace {

using graph::Arg;
using graph::Node;
using graph::NodeKind;

void note_uses(const Arg& arg, int user, std::vector<int>& last_use) {
  if (arg.kind == Arg::Kind::Node) {
    last_use[arg.node] = user;
  }
  for (const Arg& item : arg.items) note_uses(item, user, last_use);
}

// Leaves the autocast blocks a failed run entered but did not leave: an
// enter node's value (the entered object) stays alive until its exit node
// has run (Note [Autocast blocks] in tracer/trace_autocast.cpp). Keeps the
// pending error.
void leave_open_scopes(const std::vector<Node>& nodes, PyObject* const* values, int failed_node) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  for (int id = failed_node - 1; id >= 0; --id) {
    if (!values[id] || nodes[id].target_name != "kiln.enter_autocast") continue;
    PyObject* done = PyObject_CallMethod(values[id], "__exit__", "OOO", Py_None, Py_None, Py_None);
    if (!done) PyErr_Clear();
    Py_XDECREF(done);
  }
  PyErr_Restore(type, value, traceback);
}

}  // namespace

EagerExecutor::EagerExecutor(const graph::Graph& graph) : graph_(graph) {
  const int n = static_cast<int>(graph.nodes().size());
  steps_.resize(n);
  std::vector<int> last_use(n, -1);
  for (const Node& node : graph.nodes()) {
    for (const Arg& arg : node.args) note_uses(arg, node.id, last_use);
    for (const auto& kw : node.kwargs) note_uses(kw.second, node.id, last_use);
  }
  // Values the output needs live to the end.
  note_uses(graph.output(), n, last_use);
  for (int id = 0; id < n; ++id) {
    // An unused value dies right after it is made.
    const int dies_after = last_use[id] < 0 ? id : last_use[id];
    if (dies_after < n) steps_[dies_after].release_after.push_back(id);
  }
  for (const Node& node : graph.nodes()) {
    if (node.kwargs.empty()) continue;
    PyObject* names = PyTuple_New(static_cast<Py_ssize_t>(node.kwargs.size()));
    for (size_t i = 0; i < node.kwargs.size(); ++i) {
      PyTuple_SET_ITEM(names, i, PyUnicode_InternFromString(node.kwargs[i].first.c_str()));
    }
    steps_[node.id].kwnames = names;
  }
}

EagerExecutor::~EagerExecutor() {
  for (Step& step : steps_) Py_XDECREF(step.kwnames);
}

PyObject* EagerExecutor::run(PyObject* const* inputs) const {
  const auto& nodes = graph_.nodes();
  // Small graphs keep their values on the stack: no allocation per call.
  SmallBuffer<64> value_buffer(nodes.size());
  PyObject** values = value_buffer.data();
  const size_t node_count = nodes.size();
  // A graph may switch grad mode (a traced `with torch.no_grad():`); if an
  // op raises in between, the mode must not leak out of the call.
  const bool grad_mode = grad_mode_enabled();
  auto release_all = [values, node_count] {
    for (size_t i = 0; i < node_count; ++i) Py_CLEAR(values[i]);
  };
  int next_input = 0;

  for (const Node& node : nodes) {
    if (node.kind == NodeKind::Input) {
      PyObject* value = inputs[next_input++];
      Py_INCREF(value);
      values[node.id] = value;
    } else {
      // No PY_VECTORCALL_ARGUMENTS_OFFSET: torch 2.11's callables misread
      // keyword arguments passed with it (alpha= was ignored).
      const size_t arg_count = node.args.size() + node.kwargs.size();
      SmallBuffer<16> arg_buffer(arg_count);
      PyObject** call_args = arg_buffer.data();
      size_t slot = 0;
      bool failed = false;
      for (const Arg& arg : node.args) {
        if (!(call_args[slot++] = materialize_arg(arg, values))) failed = true;
      }
      for (const auto& kw : node.kwargs) {
        if (!(call_args[slot++] = materialize_arg(kw.second, values))) failed = true;
      }
      PyObject* result = nullptr;
      if (!failed) {
        result = PyObject_Vectorcall(node.target, call_args, node.args.size(), steps_[node.id].kwnames);
      }
      for (size_t i = 0; i < arg_count; ++i) Py_XDECREF(call_args[i]);
      if (!result) {
        leave_open_scopes(nodes, values, node.id);
        release_all();
        set_grad_mode(grad_mode);
        return nullptr;
      }
      values[node.id] = result;
    }
    for (int dead : steps_[node.id].release_after) Py_CLEAR(values[dead]);
  }
  PyObject* output = materialize_arg(graph_.output(), values);
  release_all();
  return output;
}

}  // namespace kiln::runtime
