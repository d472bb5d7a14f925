// Custom autograd.Function calls with gradients flowing: forward and
// backward traced, the call one node carrying the backward's graph.
#include <algorithm>

#include "base/log.h"
#include "base/module_attr.h"
#include "graph/graph_tail.h"
#include "runtime/aten_bridge.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

// Note [Traced Function backwards]
// Under gradients, a custom Function's call was a graph node whose
// derivative was an extern rerunning Cls.apply under enable_grad in the
// backward (Note [Extern gradients]): the forward ran twice, the backward
// in Python (Bloom's GeLUFunction: about half of a CPU training step).
// torch.compile traces both (its autograd.Function higher-order op); so
// does this: the forward is traced inline under no_grad, as apply runs it,
// its ctx a kiln._autograd.TracedFunctionContext whose save_for_backward
// keeps the traced tensors; then the backward is traced on that ctx and a
// placeholder for the output's gradient, and the nodes it made are cut off
// into a graph of their own (graph::cut_tail), its inputs the placeholder
// and the earlier values it reads (saved tensors, arguments). The call
// becomes one node, a kiln._autograd.TracedFunctionCall of the forward's
// result, the tensor arguments and those values, holding the backward's
// graph; kiln's autograd differentiates it by decomposing that graph into
// the backward (autograd/derivatives_function.cpp), so both sides fuse
// with their neighbours. Where torch runs the node with autograd on (a
// graph kiln does not decompose) it calls Cls.apply itself: the same
// values and gradients, torch's way.
// Traced: Functions with a forward(ctx, ...) and backward(ctx, grad) that
// are Python functions, positional tensor or constant arguments, one
// tensor result. A Function marking outputs non-differentiable or dirty,
// a backward kiln cannot trace, or one reading what it did not save, stops
// the trace; the class is then refused for the process and the frame
// traced again with the call as the Function's own node (tracer.cpp).
namespace {

// Classes whose calls stay the Function's own node (kept for the process,
// never destroyed: their references must not drop after Python finalizes).
std::vector<PyRef>& refused_classes() {
  static auto* classes = new std::vector<PyRef>();
  return *classes;
}

bool refused(PyObject* cls) {
  for (const PyRef& c : refused_classes()) {
    if (c.get() == cls) return true;
  }
  return false;
}

[[noreturn]] void refuse(PyObject* cls, const std::string& why) {
  if (!refused(cls)) refused_classes().push_back(PyRef::borrow(cls));
  KILN_LOG(graph, reinterpret_cast<PyTypeObject*>(cls)->tp_name << ".apply: backward not traced (" << why
                                                                  << "); the call stays one node");
  abort_trace(BreakCode::UnsupportedCall,
              std::string(reinterpret_cast<PyTypeObject*>(cls)->tp_name) + " backward not traced: " + why);
}

// Cls.<name> as a plain Python function, or null.
PyRef plain_function(PyObject* cls, const char* name) {
  PyRef fn = PyRef::steal(PyObject_GetAttrString(cls, name));
  if (!fn) {
    PyErr_Clear();
    return PyRef();
  }
  return PyFunction_Check(fn.get()) ? fn : PyRef();
}

PyObject* autograd_attr(const char* name) {
  PyObject* found = base::import_attr("kiln._autograd", name);
  if (!found) PyErr_Clear();
  return found;  // a new reference kept for the process by the caller's static
}

void delete_graph(PyObject* capsule) {
  delete static_cast<graph::Graph*>(PyCapsule_GetPointer(capsule, "kiln.graph.Graph"));
}

// Grad mode off for a traced block, back on when it ends (aborts too).
class NoGradBlock {
 public:
  explicit NoGradBlock(TraceState& state) : state_(state) { state_.set_grad_mode(false); }
  ~NoGradBlock() { state_.set_grad_mode(true); }
  NoGradBlock(const NoGradBlock&) = delete;
  NoGradBlock& operator=(const NoGradBlock&) = delete;

 private:
  TraceState& state_;
};

}  // namespace

size_t refused_function_count() { return refused_classes().size(); }

bool function_forward_takes_ctx(PyObject* cls) {
  static PyObject* base_setup = [] {
    PyObject* function_class = base::import_attr("torch.autograd.function", "Function");
    PyObject* setup = function_class ? PyObject_GetAttrString(function_class, "setup_context") : nullptr;
    if (!setup) PyErr_Clear();
    return setup;  // kept for the process
  }();
  PyRef setup = PyRef::steal(PyObject_GetAttrString(cls, "setup_context"));
  if (!setup) PyErr_Clear();
  return setup && base_setup && setup.get() == base_setup;
}

ValuePtr FrameTracer::trace_function_vjp(PyObject* cls, const std::vector<ValuePtr>& args, const KwArgs& kwargs) {
  if (!kwargs.empty() || !runtime::grad_mode_enabled() || refused(cls)) return nullptr;
  PyRef forward = plain_function(cls, "forward");
  PyRef backward = plain_function(cls, "backward");
  if (!forward || !backward || !function_forward_takes_ctx(cls)) return nullptr;
  static PyObject* ctx_class = autograd_attr("TracedFunctionContext");
  static PyObject* call_class = autograd_attr("TracedFunctionCall");
  if (!ctx_class || !call_class) return nullptr;
  // Arguments: tensors of static sizes, or constants (kept in the node).
  std::vector<ValuePtr> tensors;
  PyRef arguments = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  PyRef positions = PyRef::steal(PyList_New(0));
  PyRef needs = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    const ValuePtr& arg = args[i];
    PyObject* item = Py_None;
    bool wants_grad = false;
    if (arg->is(ValueKind::Tensor)) {
      if (!arg->alt_fakes.empty()) return nullptr;  // symbolic sizes: the node keeps them
      tensors.push_back(arg);
      PyRef at = PyRef::steal(PyLong_FromSize_t(i));
      PyList_Append(positions.get(), at.get());
      wants_grad = arg->meta.requires_grad;
    } else if (arg->is(ValueKind::Constant)) {
      item = arg->obj.get();
    } else {
      return nullptr;
    }
    Py_INCREF(item);
    PyTuple_SET_ITEM(arguments.get(), static_cast<Py_ssize_t>(i), item);
    PyObject* flag = wants_grad ? Py_True : Py_False;
    Py_INCREF(flag);
    PyTuple_SET_ITEM(needs.get(), static_cast<Py_ssize_t>(i), flag);
  }
  if (!any_requires_grad(tensors)) return nullptr;
  const char* name = reinterpret_cast<PyTypeObject*>(cls)->tp_name;
  KILN_LOG(graph, name << ".apply: tracing its forward and backward");
  ValuePtr ctx;
  ValuePtr result;
  try {
    ctx = call_value(state_.wrap_unguarded(ctx_class), {state_.wrap_unguarded(needs.get())}, {});
    std::vector<ValuePtr> forward_args{ctx};
    forward_args.insert(forward_args.end(), args.begin(), args.end());
    NoGradBlock no_grad(state_);  // apply runs the forward under no_grad
    result = inline_function(forward.get(), -1, std::move(forward_args), {});
  } catch (const TraceAbort& abort) {
    // The call as the Function's own node needs only apply on the fakes.
    refuse(cls, std::string("tracing its forward stopped: ") + abort.what());
  }
  if (!result->is(ValueKind::Tensor)) refuse(cls, "its forward returns " + describe_value(*result));
  if (!result->alt_fakes.empty()) refuse(cls, "its result has symbolic sizes");
  static PyObject* refused_name = PyUnicode_InternFromString("refused");  // kept for the process
  static PyObject* saved_name = PyUnicode_InternFromString("saved_tensors");
  const ValuePtr refused_flag = load_attr(ctx, refused_name);
  if (!refused_flag->is(ValueKind::Constant) || refused_flag->obj.get() != Py_False) {
    refuse(cls, "its forward marks outputs non-differentiable or dirty, or leaves gradients unmaterialized");
  }
  graph::Graph& graph = state_.graph();
  const int first = static_cast<int>(graph.nodes().size());
  ValuePtr grads;
  ValuePtr placeholder;
  const size_t stores = state_.stores.size();
  try {
    NoGradBlock no_grad(state_);  // backward runs without recording (create_graph=False)
    static PyObject* zeros_like = base::import_attr("torch", "zeros_like");
    placeholder = state_.call_torch("torch.zeros_like", zeros_like, {result}, {}, false);
    grads = inline_function(backward.get(), -1, {ctx, placeholder}, {});
  } catch (const TraceAbort& abort) {
    refuse(cls, std::string("tracing it stopped: ") + abort.what());
  }
  if (state_.stores.size() != stores) refuse(cls, "its backward changes objects outside it");
  // One gradient per argument: a tuple, or the value itself for one argument.
  std::vector<ValuePtr> per_arg;
  if (grads->is(ValueKind::Tuple)) {
    per_arg = grads->items;
  } else {
    per_arg = {grads};
  }
  while (per_arg.size() > args.size() && per_arg.back()->is(ValueKind::Constant) && per_arg.back()->obj.get() == Py_None) {
    per_arg.pop_back();
  }
  if (per_arg.size() != args.size()) refuse(cls, "its backward returns a gradient count other than the arguments'");
  graph::Arg output;
  output.kind = graph::Arg::Kind::Tuple;
  for (size_t i = 0; i < args.size(); ++i) {
    const ValuePtr& g = per_arg[i];
    const bool none = g->is(ValueKind::Constant) && g->obj.get() == Py_None;
    if (!args[i]->is(ValueKind::Tensor)) {
      if (!none) refuse(cls, "its backward returns a gradient for a non-tensor argument");
      continue;
    }
    if (none) {
      output.items.push_back(graph::Arg::of_constant(Py_None));
    } else if (g->is(ValueKind::Tensor) && g->node >= 0 && g->alt_fakes.empty()) {
      output.items.push_back(graph::Arg::of_node(g->node));
    } else {
      refuse(cls, "its backward returns " + describe_value(*g));
    }
  }
  std::string why;
  graph::GraphTail tail = graph::cut_tail(graph, first, {placeholder->node}, output, &why);
  if (!tail.graph) refuse(cls, why);
  // The values the backward reads, as the trace's tensors: saved ones, the
  // arguments, the result.
  std::vector<ValuePtr> known(args.begin(), args.end());
  known.push_back(result);
  const ValuePtr saved_tuple = load_attr(ctx, saved_name);
  if (saved_tuple->is(ValueKind::Tuple)) known.insert(known.end(), saved_tuple->items.begin(), saved_tuple->items.end());
  std::vector<ValuePtr> saved;
  for (int id : tail.outer) {
    auto found = std::find_if(known.begin(), known.end(),
                              [id](const ValuePtr& v) { return v->is(ValueKind::Tensor) && v->node == id; });
    if (found == known.end()) refuse(cls, "its backward reads a tensor it did not save");
    saved.push_back(*found);
  }
  graph.truncate(first);
  PyRef capsule = PyRef::steal(PyCapsule_New(tail.graph.get(), "kiln.graph.Graph", delete_graph));
  if (!capsule) abort_trace(BreakCode::PythonException, take_python_error());
  tail.graph.release();  // the capsule owns it now
  PyRef position_tuple = PyRef::steal(PyList_AsTuple(positions.get()));
  PyRef call = PyRef::steal(
      PyObject_CallFunctionObjArgs(call_class, cls, arguments.get(), position_tuple.get(), capsule.get(), nullptr));
  if (!call) abort_trace(BreakCode::PythonException, take_python_error());
  const ValuePtr made = state_.call_torch(std::string(name) + ".apply", call.get(),
                                          {result, make_sequence(ValueKind::Tuple, tensors, -1),
                                           make_sequence(ValueKind::Tuple, saved, -1)},
                                          {}, false);
  // The node returns the forward's result itself in kiln's compiled forward.
  if (made->is(ValueKind::Tensor) && made->node >= 0) graph.node(made->node).fresh_result = false;
  return made;
}

}  // namespace kiln::tracer
