// Running a graph cut into stages (prims/stages.h): each stage its own
// executor, fed the values the graph's inputs and earlier stages made.
#pragma once

#include <memory>
#include <vector>

#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::runtime {

// One stage: an executor returning the tuple of its outputs.
struct ExecutorStage {
  std::unique_ptr<GraphExecutor> executor;
  std::vector<int> inputs;   // value ids (of the whole graph) it takes, in order
  std::vector<int> outputs;  // value ids (of the whole graph) its tuple holds, in order
};

class StagedExecutor final : public GraphExecutor {
 public:
  // `graph_inputs`: the whole graph's input value ids, in the order of
  // run()'s inputs; `output` builds the result from value ids (Node refs)
  // among `value_count`.
  StagedExecutor(std::vector<ExecutorStage> stages, std::vector<int> graph_inputs, graph::Arg output,
                 int value_count);
  PyObject* run(PyObject* const* inputs) const override;
  const char* name() const override { return stages_.front().executor->name(); }

 private:
  std::vector<ExecutorStage> stages_;
  std::vector<int> graph_inputs_;
  graph::Arg output_;
  int value_count_;
  // Per stage: the values it made that no later stage and no output read
  // after it, dropped once it has run.
  std::vector<std::vector<int>> last_read_by_;
};

}  // namespace kiln::runtime
