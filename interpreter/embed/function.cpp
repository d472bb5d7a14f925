// kiln::Function: calling a Python callable with tensors from any host
// thread, compiling it, warming it up.
#include "interpreter/embed/embed_state.h"
#include "interpreter/embed/tensor_convert.h"
#include "base/py_ref.h"

namespace kiln {

using embed::GilScope;
using base::PyRef;

namespace {

// "1 input", "2 inputs".
std::string inputs_text(int count) {
  return std::to_string(count) + (count == 1 ? " input" : " inputs");
}

// Throws when `count` inputs cannot match the callable's signature, before
// Python would say it in terms of its own parameters (self included).
void check_input_count(const embed::FunctionState& f, size_t count) {
  if (f.fewest_inputs < 0) return;
  const int given = static_cast<int>(count);
  if (given >= f.fewest_inputs && (f.most_inputs < 0 || given <= f.most_inputs)) return;
  std::string expected =
      f.most_inputs < 0 ? "at least " + inputs_text(f.fewest_inputs)
      : f.most_inputs == f.fewest_inputs
          ? inputs_text(f.fewest_inputs)
          : std::to_string(f.fewest_inputs) + " to " + inputs_text(f.most_inputs);
  throw Error(f.name + " takes " + expected + ", got " + std::to_string(given));
}

}  // namespace

std::vector<at::Tensor> Function::call(const std::vector<at::Tensor>& inputs) const {
  const embed::FunctionState& f = *state_;
  check_input_count(f, inputs.size());
  std::vector<at::Tensor> outputs;
  // The GIL is held from here to the end of the Python call; torch's ops
  // release it inside their kernels, so other threads run Python meanwhile.
  GilScope gil;
  PyRef args = PyRef::steal(embed::tensors_to_tuple(inputs));
  if (!args) throw embed::take_python_error("passing the inputs of " + f.name);
  PyRef result = PyRef::steal(PyObject_Call(f.callable, args.get(), nullptr));
  if (!result) throw embed::take_python_error("calling " + f.name);
  std::string problem;
  if (!embed::tensors_from_result(result.get(), &outputs, &problem)) {
    throw Error(f.name + " returned " + problem +
                "; a C++ caller receives a tensor, or a tuple or list of tensors");
  }
  return outputs;
}

Function Function::compile(const CompileOptions& options) const {
  const embed::FunctionState& f = *state_;
  GilScope gil;
  PyRef backend = PyRef::steal(PyUnicode_FromString(options.backend.c_str()));
  PyObject* dynamic = !options.dynamic ? Py_None : *options.dynamic ? Py_True : Py_False;  // borrowed
  PyRef compiled =
      backend ? PyRef::steal(embed::call_helper(*f.runtime, "compile",
                                                {f.callable, backend.get(),
                                                 options.fullgraph ? Py_True : Py_False, dynamic}))
              : PyRef();
  if (!compiled) throw embed::take_python_error("compiling " + f.name);
  auto state = std::make_shared<embed::FunctionState>();
  state->runtime = f.runtime;
  state->callable = compiled.release();
  state->name = "compiled " + f.name;
  state->fewest_inputs = f.fewest_inputs;
  state->most_inputs = f.most_inputs;
  return Function(std::move(state));
}

void Function::warm_up(const std::vector<std::vector<at::Tensor>>& examples) const {
  // One call per example traces and caches every graph the example reaches;
  // later calls with inputs of the same kinds only check guards.
  for (const std::vector<at::Tensor>& example : examples) call(example);
}

const std::string& Function::name() const { return state_->name; }

}  // namespace kiln
