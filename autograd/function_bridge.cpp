#include "autograd/function_bridge.h"

#include <structmember.h>

#include <stdexcept>
#include <string>

#include "runtime/graph_arg_values.h"
#include "runtime/prim_executor.h"
#include "runtime/py_ref.h"

namespace kiln::autograd {
namespace {

using runtime::PyRef;

// A Python callable running a PrimExecutor: f(*inputs) -> tuple of outputs.
struct ExecutorCallable {
  PyObject_HEAD
  runtime::PrimExecutor* executor;  // owned
  Py_ssize_t input_count;
  vectorcallfunc vectorcall;
};

PyObject* executor_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<ExecutorCallable*>(callable);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames || nargs != self->input_count) {
    PyErr_Format(PyExc_TypeError, "kiln autograd graph takes %zd positional arguments, got %zd",
                 self->input_count, nargs);
    return nullptr;
  }
  return self->executor->run(args);
}

void executor_dealloc(PyObject* callable) {
  auto* self = reinterpret_cast<ExecutorCallable*>(callable);
  delete self->executor;
  Py_TYPE(callable)->tp_free(callable);
}

PyTypeObject* executor_callable_type() {
  static PyTypeObject* type = [] {
    static PyMemberDef members[] = {
        {"__vectorcalloffset__", T_PYSSIZET, offsetof(ExecutorCallable, vectorcall), READONLY, nullptr},
        {nullptr, 0, 0, 0, nullptr},
    };
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, reinterpret_cast<void*>(executor_dealloc)},
        {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
        {Py_tp_members, members},
        {0, nullptr},
    };
    static PyType_Spec spec = {"kiln.AutogradGraph", sizeof(ExecutorCallable), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, slots};
    return reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  }();
  return type;
}

PyRef make_executor_callable(std::unique_ptr<runtime::PrimExecutor> executor, int input_count) {
  PyTypeObject* type = executor_callable_type();
  if (!type) return PyRef();
  auto* self = PyObject_New(ExecutorCallable, type);
  if (!self) return PyRef();
  self->executor = executor.release();
  self->input_count = input_count;
  self->vectorcall = executor_call;
  return PyRef::steal(reinterpret_cast<PyObject*>(self));
}

std::string take_error_text() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* text = value ? PyObject_Str(value) : nullptr;
  std::string out = text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : "unknown error";
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return out;
}

class AutogradExecutor final : public runtime::GraphExecutor {
 public:
  AutogradExecutor(PyRef apply, PyRef runner, graph::Arg output, std::vector<int> forward_outputs,
                   int value_count, int input_count)
      : apply_(std::move(apply)), runner_(std::move(runner)), output_(std::move(output)),
        forward_outputs_(std::move(forward_outputs)), value_count_(value_count), input_count_(input_count) {}

  PyObject* run(PyObject* const* inputs) const override {
    PyRef args = PyRef::steal(PyTuple_New(input_count_ + 1));
    if (!args) return nullptr;
    PyTuple_SET_ITEM(args.get(), 0, PyRef(runner_).release());
    for (int i = 0; i < input_count_; ++i) {
      Py_INCREF(inputs[i]);
      PyTuple_SET_ITEM(args.get(), i + 1, inputs[i]);
    }
    PyRef outs = PyRef::steal(PyObject_Call(apply_.get(), args.get(), nullptr));
    if (!outs) return nullptr;
    if (!PyTuple_Check(outs.get()) || PyTuple_GET_SIZE(outs.get()) != static_cast<Py_ssize_t>(forward_outputs_.size())) {
      PyErr_SetString(PyExc_RuntimeError, "kiln: the autograd function returned an unexpected value");
      return nullptr;
    }
    std::vector<PyObject*> values(value_count_, nullptr);
    for (size_t k = 0; k < forward_outputs_.size(); ++k) {
      // An input the graph returns as it is comes back as the caller's own
      // object, as in eager (the Function would hand back a new tensor).
      const int id = forward_outputs_[k];
      values[id] = id < input_count_ ? inputs[id] : PyTuple_GET_ITEM(outs.get(), k);
    }
    return runtime::materialize_arg(output_, values.data());
  }

  const char* name() const override { return "aot_eager"; }

 private:
  PyRef apply_;
  PyRef runner_;
  graph::Arg output_;
  std::vector<int> forward_outputs_;
  int value_count_;
  int input_count_;
};

}  // namespace

std::unique_ptr<runtime::GraphExecutor> make_autograd_executor(Partition partition, graph::Arg output,
                                                               std::vector<int> forward_outputs,
                                                               int value_count) {
  const int input_count = static_cast<int>(partition.forward.inputs().size());
  const int backward_inputs = static_cast<int>(partition.backward.inputs().size());
  auto forward_graph = std::make_shared<const prims::PrimGraph>(std::move(partition.forward));
  auto backward_graph = std::make_shared<const prims::PrimGraph>(std::move(partition.backward));
  PyRef forward = make_executor_callable(std::make_unique<runtime::PrimExecutor>(forward_graph), input_count);
  PyRef backward = forward ? make_executor_callable(std::make_unique<runtime::PrimExecutor>(backward_graph), backward_inputs)
                           : PyRef();
  PyRef module = backward ? PyRef::steal(PyImport_ImportModule("kiln._autograd")) : PyRef();
  PyRef function = module ? PyRef::steal(PyObject_GetAttrString(module.get(), "CompiledFunction")) : PyRef();
  PyRef apply = function ? PyRef::steal(PyObject_GetAttrString(function.get(), "apply")) : PyRef();
  if (!apply) throw std::runtime_error("cannot set up the autograd function: " + take_error_text());
  PyRef has_grad = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(partition.output_has_grad.size())));
  for (size_t k = 0; k < partition.output_has_grad.size(); ++k) {
    PyObject* flag = partition.output_has_grad[k] ? Py_True : Py_False;
    Py_INCREF(flag);
    PyTuple_SET_ITEM(has_grad.get(), k, flag);
  }
  PyRef slots = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(partition.input_grad_slot.size())));
  for (size_t i = 0; i < partition.input_grad_slot.size(); ++i) {
    PyTuple_SET_ITEM(slots.get(), i, PyLong_FromLong(partition.input_grad_slot[i]));
  }
  PyRef deps = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(partition.input_grad_deps.size())));
  for (size_t k = 0; deps && k < partition.input_grad_deps.size(); ++k) {
    const std::vector<int>& reads = partition.input_grad_deps[k];
    PyObject* positions = PyTuple_New(static_cast<Py_ssize_t>(reads.size()));
    for (size_t j = 0; positions && j < reads.size(); ++j) {
      PyTuple_SET_ITEM(positions, j, PyLong_FromLong(reads[j]));
    }
    PyTuple_SET_ITEM(deps.get(), k, positions);
  }
  PyRef count = PyRef::steal(PyLong_FromLong(partition.forward_output_count));
  PyRef saved = PyRef::steal(PyLong_FromLong(partition.saved_count));
  PyRef runner = PyRef::steal(
      PyTuple_Pack(7, forward.get(), backward.get(), has_grad.get(), slots.get(), count.get(), saved.get(), deps.get()));
  if (!runner) throw std::runtime_error("cannot set up the autograd function: " + take_error_text());
  return std::make_unique<AutogradExecutor>(std::move(apply), std::move(runner), std::move(output),
                                            std::move(forward_outputs), value_count, input_count);
}

}  // namespace kiln::autograd
