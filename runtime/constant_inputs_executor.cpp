#include "runtime/constant_inputs_executor.h"

#include "base/small_buffer.h"

namespace kiln::runtime {

using base::PyRef;

ConstantInputsExecutor::ConstantInputsExecutor(std::shared_ptr<const prims::PrimGraph> constants,
                                               std::unique_ptr<GraphExecutor> rest, size_t input_count)
    : constants_(constants), rest_(std::move(rest)), input_count_(input_count),
      kept_count_(constants->outputs().size()) {}

bool ConstantInputsExecutor::ensure_kept() const {
  if (!kept_.empty()) return true;
  base::SmallBuffer<16> buffer(kept_count_);
  PyObject** made = buffer.data();
  if (!constants_.run_values(nullptr, made)) return false;
  // Two threads may both have run the constants (a torch call releases the
  // GIL): the first to get here keeps its tensors.
  std::vector<PyRef> kept;
  for (size_t i = 0; i < kept_count_; ++i) kept.push_back(PyRef::steal(made[i]));
  if (kept_.empty()) kept_ = std::move(kept);
  return true;
}

PyObject* ConstantInputsExecutor::run(PyObject* const* inputs) const {
  if (!ensure_kept()) return nullptr;
  base::SmallBuffer<64> buffer(input_count_ + kept_count_);
  PyObject** all = buffer.data();
  for (size_t i = 0; i < input_count_; ++i) all[i] = inputs[i];
  for (size_t i = 0; i < kept_count_; ++i) all[input_count_ + i] = kept_[i].get();
  return rest_->run(all);
}

}  // namespace kiln::runtime
