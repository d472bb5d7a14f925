// The "eager" backend: replays a Graph by calling each node's torch callable,
// releasing every value right after its last use.
#pragma once

#include <Python.h>

#include <vector>

#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::runtime {

// A graph prepared for replay through torch. Immutable after construction,
// so one instance may serve concurrent calls (each holding the GIL).
class EagerExecutor final : public GraphExecutor {
 public:
  // Keeps a pointer to `graph`, which must outlive the executor.
  explicit EagerExecutor(const graph::Graph& graph);
  EagerExecutor(const EagerExecutor&) = delete;
  EagerExecutor& operator=(const EagerExecutor&) = delete;
  ~EagerExecutor() override;

  // Runs the graph; inputs[i] (borrowed) is the value of graph.inputs()[i].
  // Returns a new reference to the output, or null with a Python error set.
  PyObject* run(PyObject* const* inputs) const override;
  const char* name() const override { return "eager"; }

 private:
  struct Step {
    PyObject* kwnames = nullptr;  // owned tuple of keyword names, or null
    std::vector<int> release_after;  // node values dead after this step
  };
  const graph::Graph& graph_;
  std::vector<Step> steps_;  // one per node
};

}  // namespace kiln::runtime
