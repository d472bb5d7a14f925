#include "runtime/staged_executor.h"

#include <iomanip>
#include <sstream>

#include "base/check.h"
#include "base/log.h"
#include "base/stopwatch.h"
#include "runtime/graph_arg_values.h"
#include "base/py_ref.h"

namespace kiln::runtime {

using base::PyRef;
namespace {

void note_output_reads(const graph::Arg& arg, std::vector<bool>& read) {
  if (arg.kind == graph::Arg::Kind::Node) read[arg.node] = true;
  for (const graph::Arg& item : arg.items) note_output_reads(item, read);
}

}  // namespace

StagedExecutor::StagedExecutor(std::vector<ExecutorStage> stages, std::vector<int> graph_inputs, graph::Arg output,
                               int value_count)
    : stages_(std::move(stages)), graph_inputs_(std::move(graph_inputs)), output_(std::move(output)),
      value_count_(value_count), last_read_by_(stages_.size()) {
  KILN_CHECK(!stages_.empty(), "a staged executor needs a stage");
  std::vector<bool> returned(value_count_, false);
  note_output_reads(output_, returned);
  std::vector<int> last_stage(value_count_, -1);
  for (size_t k = 0; k < stages_.size(); ++k) {
    for (int id : stages_[k].outputs) last_stage[id] = static_cast<int>(k);
    for (int id : stages_[k].inputs) last_stage[id] = static_cast<int>(k);
  }
  for (size_t k = 0; k < stages_.size(); ++k) {
    for (int id : stages_[k].outputs) {
      if (!returned[id] && last_stage[id] >= 0) last_read_by_[last_stage[id]].push_back(id);
    }
  }
}

PyObject* StagedExecutor::run(PyObject* const* inputs) const {
  std::vector<PyObject*> values(value_count_, nullptr);
  std::vector<PyRef> owned(value_count_);
  for (size_t i = 0; i < graph_inputs_.size(); ++i) values[graph_inputs_[i]] = inputs[i];
  std::vector<PyObject*> args;
  // Note [Executor run profile]: with KILN_LOGS=perf, each stage's host
  // time by its executor's name (a static region's compiled executor, or
  // the eager replay between regions), one line a run.
  const bool profiled = base::log_enabled(base::LogChannel::perf);
  std::ostringstream profile;
  const base::Stopwatch run_clock;
  for (size_t k = 0; k < stages_.size(); ++k) {
    const ExecutorStage& stage = stages_[k];
    args.clear();
    for (int id : stage.inputs) args.push_back(values[id]);
    const base::Stopwatch stage_clock;
    PyRef made = PyRef::steal(stage.executor->run(args.data()));
    if (profiled) {
      profile.precision(1);
      profile << std::fixed << "; " << stage.executor->name() << " " << stage_clock.ms() * 1e3 << " us";
    }
    if (!made) return nullptr;
    if (!PyTuple_Check(made.get()) || PyTuple_GET_SIZE(made.get()) != static_cast<Py_ssize_t>(stage.outputs.size())) {
      PyErr_Format(PyExc_RuntimeError, "kiln: stage %zu of a staged graph returned an unexpected value", k);
      return nullptr;
    }
    for (size_t j = 0; j < stage.outputs.size(); ++j) {
      const int id = stage.outputs[j];
      owned[id] = PyRef::borrow(PyTuple_GET_ITEM(made.get(), static_cast<Py_ssize_t>(j)));
      values[id] = owned[id].get();
    }
    for (int id : last_read_by_[k]) {
      owned[id] = PyRef();
      values[id] = nullptr;
    }
  }
  if (profiled) {
    KILN_LOG(perf, "staged run: " << stages_.size() << " stages, " << std::fixed << std::setprecision(1)
                                  << run_clock.ms() * 1e3 << " us" << profile.str());
  }
  return materialize_arg(output_, values.data());
}

}  // namespace kiln::runtime
