#include "autograd/function_bridge.h"

#include <structmember.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "autograd/absent_grads.h"
#include "runtime/aten_bridge.h"
#include "runtime/graph_arg_values.h"
#include "base/log.h"
#include "base/python_warning.h"
#include "runtime/prim_executor.h"
#include "base/py_ref.h"

namespace kiln::autograd {
namespace {

using base::PyRef;

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

// Note [The backward compiles at its first call]
// The forward runs as soon as its kernels are compiled; the backward graph's
// kernel passes wait for the first backward call, when it is known which
// output gradients arrive. Compiling it at the forward, as before, paid
// for a backward a model may never run in that form: a transformers model
// returns logits and a KV cache, the loss reads only the logits, and the
// first backward then needed the variant without the cache's gradients
// (Note [Absent gradients]), planned and emitted a second time (hf-llama-6l
// on the H100: the full backward's passes took 522 ms, then the variant's
// 155 ms, most of its kernels found in the cache the first had filled).
// A backward whose passes throw runs its prims through torch, with a
// RuntimeWarning and a `backend` log line; two threads meeting the same
// uncompiled backward may both compile it (the cache dict keeps one; the
// kernel cache makes the second cheap).

// What the backward and its variants for absent gradients are built from
// (Note [Absent gradients]), held by a capsule behind make_variant.
struct BackwardVariants {
  std::shared_ptr<const prims::PrimGraph> backward;  // as partitioned, before `finish`
  size_t first_grad = 0;                             // the saved values come first
  std::vector<std::vector<int>> deps;                // Partition::input_grad_deps
  GraphPass finish;
};

constexpr const char* kVariantsCapsule = "kiln.BackwardVariants";

void variants_capsule_free(PyObject* capsule) {
  delete static_cast<BackwardVariants*>(PyCapsule_GetPointer(capsule, kVariantsCapsule));
}

// make_variant((k, ...)) -> (backward callable, positions of the backward's
// outputs it returns), for the gradient inputs k (positions among the
// gradients) that did not arrive; make_variant(()) is the backward itself.
// CompiledFunction caches the result. Every backward, the full one
// included, compiles at the first backward call that needs it (Note [The
// backward compiles at its first call]).
PyObject* make_variant(PyObject* capsule, PyObject* missing) {
  auto* variants = static_cast<BackwardVariants*>(PyCapsule_GetPointer(capsule, kVariantsCapsule));
  if (!variants) return nullptr;
  PyRef items = PyRef::steal(PySequence_Fast(missing, "kiln: absent gradients must be a sequence"));
  if (!items) return nullptr;
  const size_t inputs = variants->backward->inputs().size();
  std::vector<bool> absent(inputs, false);
  for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(items.get()); ++j) {
    const long k = PyLong_AsLong(PySequence_Fast_GET_ITEM(items.get(), j));
    if (k < 0 || variants->first_grad + static_cast<size_t>(k) >= inputs) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "kiln: absent gradient position out of range");
      return nullptr;
    }
    absent[variants->first_grad + static_cast<size_t>(k)] = true;
  }
  // No gradient absent: the backward as partitioned, every gradient returned.
  const bool full = PySequence_Fast_GET_SIZE(items.get()) == 0;
  std::vector<bool> keep;
  std::vector<int> present;
  for (size_t k = 0; k < variants->deps.size(); ++k) {
    bool reached = full;
    for (int d : variants->deps[k]) reached = reached || !absent[variants->first_grad + static_cast<size_t>(d)];
    keep.push_back(reached);
    if (reached) present.push_back(static_cast<int>(k));
  }
  try {
    prims::PrimGraph graph =
        full ? *variants->backward : without_absent_grads(*variants->backward, variants->first_grad, absent, keep);
    if (variants->finish) {
      // A pass that fails leaves the variant as it is (its prims run
      // through torch), as a failing pass does for any graph.
      const char* what = full ? "backward" : "backward, some gradients absent";
      try {
        graph = variants->finish(graph, what);
      } catch (const std::exception& e) {
        // Said out loud, as compile_resolved does for a forward: the
        // backward now compiles inside the autograd engine's call.
        KILN_LOG(backend, what << " runs unfused: " << e.what());
        base::warn(PyExc_RuntimeWarning, std::string("kiln: internal error compiling a ") + what +
                                             " graph, whose prims run through torch: " + e.what());
      }
    }
    auto shared = std::make_shared<const prims::PrimGraph>(std::move(graph));
    PyRef call = make_executor_callable(std::make_unique<runtime::PrimExecutor>(shared), static_cast<int>(inputs));
    PyRef positions = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(present.size())));
    if (!call || !positions) return nullptr;
    for (size_t j = 0; j < present.size(); ++j) PyTuple_SET_ITEM(positions.get(), j, PyLong_FromLong(present[j]));
    return PyTuple_Pack(2, call.get(), positions.get());
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "kiln: cannot build the backward for absent gradients: %s", e.what());
    return nullptr;
  }
}

PyRef make_variant_function(BackwardVariants variants) {
  static PyMethodDef def = {"make_variant", make_variant, METH_O, "A backward graph without absent gradients."};
  auto* owned = new BackwardVariants(std::move(variants));
  PyRef capsule = PyRef::steal(PyCapsule_New(owned, kVariantsCapsule, variants_capsule_free));
  if (!capsule) {
    delete owned;
    return PyRef();
  }
  return PyRef::steal(PyCFunction_New(&def, capsule.get()));
}

// Note [Outputs that alias]
// torch forbids writing in place into an output of a custom Function that
// is a view (of an input, or of anything made inside it), and autograd
// would not see the view relation anyway. So an output that views a graph
// input or another output is taken again, after the Function, as
// base.as_strided(...) of the caller-visible base: in-place writes then
// reach the base as in eager, and gradients flow through the view into the
// Function. An output viewing an intermediate takes as its base another
// output sharing its storage (an in-place extern returns its argument), or,
// when none does, is handed out as a copy: no one else can see that memory.
struct ViewOf {
  int input = -1;      // the graph input it views, or -1
  int output = -1;     // the forward output it views, or -1
  bool hidden = false;  // it views an intermediate
};

// Per forward output of `forward` (the first `count`), what it views.
std::vector<ViewOf> resolve_output_views(const prims::PrimGraph& forward, int count) {
  const std::vector<int>& outputs = forward.outputs();
  auto root_of = [&](int value, bool* is_view) {
    *is_view = false;
    for (;;) {
      const prims::PrimValue& v = forward.value(value);
      if (v.node < 0) return value;
      const prims::PrimNode& node = forward.node(v.node);
      if (prims::prim_info(node.prim).family != prims::Family::View || node.args.empty() ||
          !node.args[0].is_value()) {
        return value;
      }
      *is_view = true;
      value = node.args[0].value;
    }
  };
  std::vector<ViewOf> result(count);
  for (int k = 0; k < count; ++k) {
    bool is_view = false;
    const int root = root_of(outputs[k], &is_view);
    if (!is_view) continue;
    const auto& inputs = forward.inputs();
    if (auto at = std::find(inputs.begin(), inputs.end(), root); at != inputs.end()) {
      result[k].input = static_cast<int>(at - inputs.begin());
      continue;
    }
    for (int j = 0; j < count && result[k].output < 0; ++j) {
      bool j_view = false;
      if (j != k && outputs[j] == root && root_of(outputs[j], &j_view) == root && !j_view) result[k].output = j;
    }
    // Otherwise its base is an intermediate: an output that shares its
    // storage (an in-place extern's result) is found at run time.
    if (result[k].output < 0) result[k].hidden = true;
  }
  return result;
}

class AutogradExecutor final : public runtime::GraphExecutor {
 public:
  AutogradExecutor(PyRef apply, PyRef runner, graph::Arg output, std::vector<int> forward_outputs,
                   int value_count, int input_count, std::vector<bool> detach, std::vector<ViewOf> view_of)
      : apply_(std::move(apply)), runner_(std::move(runner)), output_(std::move(output)),
        forward_outputs_(std::move(forward_outputs)), value_count_(value_count), input_count_(input_count),
        detach_(std::move(detach)), view_of_(std::move(view_of)) {}

  PyObject* run(PyObject* const* inputs) const override {
    PyRef args = PyRef::steal(PyTuple_New(input_count_ + 1));
    if (!args) return nullptr;
    PyTuple_SET_ITEM(args.get(), 0, PyRef(runner_).release());
    for (int i = 0; i < input_count_; ++i) {
      // An input no output's gradient reaches goes in detached: torch's
      // engine runs every node upstream of a Function's inputs, even those
      // that receive no gradient, and eager never reaches them (their saved
      // tensors may since have been written in place).
      PyObject* arg = inputs[i];
      if (detach_[i] && runtime::is_tensor(arg)) {
        arg = PyObject_CallMethod(arg, "detach", nullptr);
        if (!arg) return nullptr;
      } else {
        Py_INCREF(arg);
      }
      PyTuple_SET_ITEM(args.get(), i + 1, arg);
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
    // Views of inputs and of other outputs are taken again outside the
    // Function (Note [Outputs that alias]).
    std::vector<PyRef> views;
    for (size_t k = 0; k < forward_outputs_.size(); ++k) {
      const ViewOf& of = view_of_[k];
      if (of.input < 0 && of.output < 0 && !of.hidden) continue;
      PyObject* made = PyTuple_GET_ITEM(outs.get(), k);
      if (!runtime::is_tensor(made)) continue;
      PyObject* base = of.input >= 0 ? inputs[of.input] : of.output >= 0 ? values[forward_outputs_[of.output]] : nullptr;
      for (size_t j = 0; of.hidden && !base && j < forward_outputs_.size(); ++j) {
        const ViewOf& other = view_of_[j];
        PyObject* candidate = values[forward_outputs_[j]];
        if (j != k && other.input < 0 && other.output < 0 && !other.hidden && runtime::is_tensor(candidate) &&
            runtime::tensor_storage(candidate) == runtime::tensor_storage(made)) {
          base = candidate;
        }
      }
      if (of.hidden && !base) {
        PyRef copy = PyRef::steal(PyObject_CallMethod(made, "clone", nullptr));
        if (!copy) return nullptr;
        values[forward_outputs_[k]] = copy.get();
        views.push_back(std::move(copy));
        continue;
      }
      // A reshape that had to copy is not a view after all.
      if (!runtime::is_tensor(base) || runtime::tensor_storage(made) != runtime::tensor_storage(base)) continue;
      PyRef size = PyRef::steal(PyObject_CallMethod(made, "size", nullptr));
      PyRef stride = size ? PyRef::steal(PyObject_CallMethod(made, "stride", nullptr)) : PyRef();
      PyRef offset = stride ? PyRef::steal(PyObject_CallMethod(made, "storage_offset", nullptr)) : PyRef();
      PyRef view = offset ? PyRef::steal(PyObject_CallMethod(base, "as_strided", "OOO", size.get(), stride.get(),
                                                             offset.get()))
                          : PyRef();
      if (!view) return nullptr;
      values[forward_outputs_[k]] = view.get();
      views.push_back(std::move(view));
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
  std::vector<bool> detach_;  // per input: no gradient reaches it
  std::vector<ViewOf> view_of_;  // per forward output
};

}  // namespace

std::unique_ptr<runtime::GraphExecutor> make_autograd_executor(Partition partition, graph::Arg output,
                                                               std::vector<int> forward_outputs,
                                                               int value_count, GraphPass finish) {
  const int input_count = static_cast<int>(partition.forward.inputs().size());
  std::vector<ViewOf> view_of = resolve_output_views(partition.forward, partition.forward_output_count);
  BackwardVariants variants;
  variants.backward = std::make_shared<const prims::PrimGraph>(partition.backward);
  variants.first_grad = static_cast<size_t>(partition.saved_count);
  variants.deps = partition.input_grad_deps;
  variants.finish = finish;
  auto forward_graph = std::make_shared<const prims::PrimGraph>(finish ? finish(partition.forward, "forward")
                                                                       : std::move(partition.forward));
  PyRef forward = make_executor_callable(std::make_unique<runtime::PrimExecutor>(forward_graph), input_count);
  PyRef module = forward ? PyRef::steal(PyImport_ImportModule("kiln._autograd")) : PyRef();
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
  PyRef make = make_variant_function(std::move(variants));
  PyRef cache = PyRef::steal(PyDict_New());
  PyRef runner = make && cache ? PyRef::steal(PyTuple_Pack(8, forward.get(), has_grad.get(), slots.get(),
                                                           count.get(), saved.get(), deps.get(), make.get(),
                                                           cache.get()))
                               : PyRef();
  if (!runner) throw std::runtime_error("cannot set up the autograd function: " + take_error_text());
  std::vector<bool> detach;
  for (int slot : partition.input_grad_slot) detach.push_back(slot < 0);
  return std::make_unique<AutogradExecutor>(std::move(apply), std::move(runner), std::move(output),
                                            std::move(forward_outputs), value_count, input_count,
                                            std::move(detach), std::move(view_of));
}

}  // namespace kiln::autograd
