// A compiled graph whose constant subgraph runs once (Note [Constant
// subgraphs] in prims/constant_subgraphs.cpp): the kept tensors follow the
// call's inputs into the executor of the rest.
#pragma once

#include <memory>
#include <vector>

#include "base/py_ref.h"
#include "prims/prim_graph.h"
#include "runtime/graph_executor.h"
#include "runtime/prim_executor.h"

namespace kiln::runtime {

class ConstantInputsExecutor final : public GraphExecutor {
 public:
  // `rest` takes `input_count` inputs, then the outputs of `constants` (a
  // graph without inputs), in order.
  ConstantInputsExecutor(std::shared_ptr<const prims::PrimGraph> constants, std::unique_ptr<GraphExecutor> rest,
                         size_t input_count);
  PyObject* run(PyObject* const* inputs) const override;
  const char* name() const override { return rest_->name(); }

 private:
  // Runs the constants at the first call; false, with a Python error set,
  // when they raise (the next call tries again).
  bool ensure_kept() const;

  PrimExecutor constants_;
  std::unique_ptr<GraphExecutor> rest_;
  size_t input_count_;
  size_t kept_count_;
  // Filled once, under the GIL; a graph object lives as long as the
  // compiled graph.
  mutable std::vector<base::PyRef> kept_;
};

}  // namespace kiln::runtime
