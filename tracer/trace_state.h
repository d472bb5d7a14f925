// State shared by every frame of one trace (the graph being built, the
// guards, the values already wrapped per source) and the frame interpreter.
#pragma once

#include <Python.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "runtime/py_text.h"
#include "guards/guard_set.h"
#include "interpreter/instruction.h"
#include "tracer/break_reason.h"
#include "tracer/tracer.h"
#include "tracer/value.h"

namespace kiln::tracer {

// One trace: owns the graph and guards until they are handed to the cache.
class TraceState {
 public:
  TraceState(const guards::FrameView& frame);

  graph::Graph& graph() { return *graph_; }
  guards::GuardSet& guards() { return *guards_; }
  guards::SourceTable& sources() { return guards_->sources(); }
  const guards::FrameView& frame() const { return frame_; }
  std::unique_ptr<graph::Graph> take_graph() { return std::move(graph_); }
  std::unique_ptr<guards::GuardSet> take_guards() { return std::move(guards_); }

  // Wraps an object read from `source`, installing the guards that reading
  // it implies. The same source always yields the same Value.
  ValuePtr wrap(PyObject* obj, int source);
  // Wraps an object kiln assumes fixed (torch's namespace, constants made
  // by the trace): no source, no guard.
  ValuePtr wrap_unguarded(PyObject* obj);

  // Emits a call of a torch callable as a graph node, inferring its result
  // on meta tensors. `factory` marks callables that create tensors without
  // tensor inputs (their fake run gets device="meta").
  ValuePtr call_torch(const std::string& name, PyObject* target, const std::vector<ValuePtr>& args,
                      const KwArgs& kwargs, bool factory);

  // Lowers a value to a graph argument; throws for values graphs can't hold.
  graph::Arg lower(const ValuePtr& value);
  // Lowers a value the frame returns: like lower(), but objects the caller
  // passed in come back as themselves (identity kept), and named tuples
  // (torch.return_types) as their own type.
  graph::Arg lower_output(const ValuePtr& value);
  // Lowers the items of a list or dict as a new list or dict (the contents
  // written back to a container the caller passed in).
  graph::Arg lower_contents(const ValuePtr& container);

  // Counts in-place changes of containers and cells, so a graph break can
  // tell whether an instruction it backs out of already changed state.
  void note_mutation() { ++mutations_; }
  uint64_t mutations() const { return mutations_; }

  // Emits torch._C._set_grad_enabled(enabled) into the graph and sets the
  // mode for the rest of the trace (fake tensors follow it too).
  void set_grad_mode(bool enabled);
  // `with` blocks of grad-mode contexts open at the current instruction.
  int open_grad_contexts = 0;

  // Stores to caller-visible state, in program order (Note [Side effects]).
  std::vector<BreakInfo::PendingStore> stores;
  // Marks a list or dict the caller passed in as changed by the trace: its
  // new contents are written back like a store (Note [Side effects]).
  void note_container_write(const ValuePtr& container);
  // The value the trace last stored to target.name / globals[name], or null.
  ValuePtr stored_attr(const ValuePtr& target, PyObject* name) const;
  ValuePtr stored_global(PyObject* globals, PyObject* name) const;

  // The graph break the top frame recorded, if any, and why it broke.
  std::unique_ptr<BreakInfo>& break_info() { return break_info_; }
  BreakCode break_code = BreakCode::UnsupportedOpcode;
  std::string break_reason;

 private:
  ValuePtr wrap_tensor(PyObject* tensor, int source);
  PyRef lower_fake(const ValuePtr& value);
  ValuePtr wrap_result(int node, PyObject* fake_result, graph::DeviceType device_type,
                       int device_index);

  guards::FrameView frame_;
  std::unique_ptr<graph::Graph> graph_;
  std::unique_ptr<guards::GuardSet> guards_;
  std::unordered_map<int, ValuePtr> wrapped_;
  // Lists and dicts by identity: one object reached through two sources
  // must be one value, or a change through one path would not show in the
  // other.
  std::unordered_map<PyObject*, ValuePtr> wrapped_containers_;
  uint64_t mutations_ = 0;
  std::unique_ptr<BreakInfo> break_info_;
};

// Interprets one frame (the traced function or an inlined callee).
class FrameTracer {
 public:
  FrameTracer(TraceState& state, PyCodeObject* code, PyObject* globals, PyObject* func,
              int func_source, int depth);

  // Sets the initial locals (arguments bound to parameters).
  void set_locals(std::vector<ValuePtr> locals) { locals_ = std::move(locals); }
  // Sets the cells a LocalFunction closes over (COPY_FREE_VARS uses them).
  void set_closure(std::vector<ValuePtr> cells) { closure_ = std::move(cells); }
  // Runs a generator's code to completion, collecting what it yields.
  void collect_yields(std::vector<ValuePtr>* yields) { yields_ = yields; }
  // Runs to the frame's return; returns the returned value.
  ValuePtr run();

  // Calls any value with arguments, as CALL would (used by inlining too).
  ValuePtr call_value(const ValuePtr& callable, std::vector<ValuePtr> args, KwArgs kwargs);

 private:
  void step(const interpreter::Instruction& ins);
  void step_load_store(const interpreter::Instruction& ins);
  void step_build(const interpreter::Instruction& ins);
  void step_jump(const interpreter::Instruction& ins);
  void step_call(const interpreter::Instruction& ins);
  void store_attr(const ValuePtr& target, PyObject* name, const ValuePtr& value);
  void store_global(PyObject* name, const ValuePtr& value);

  // Attribute, operator and subscript semantics (trace_attributes.cpp,
  // trace_operators.cpp).
  ValuePtr load_attr(const ValuePtr& base, PyObject* name);
  ValuePtr load_object_attr(const ValuePtr& base, PyObject* name);
  // Reads a class-level descriptor (property, staticmethod, classmethod) on
  // `base`; null for kinds kiln does not model.
  ValuePtr class_descriptor(const ValuePtr& base, PyObject* class_attr);
  ValuePtr binary_op(int nb_op, const ValuePtr& a, const ValuePtr& b);
  ValuePtr compare_op(int cmp, const ValuePtr& a, const ValuePtr& b);
  ValuePtr unary_op(interpreter::Op op, const ValuePtr& a);
  ValuePtr subscript(const ValuePtr& base, const ValuePtr& index);
  bool truthiness(const ValuePtr& value);
  ValuePtr get_iter(const ValuePtr& value);
  std::vector<ValuePtr> unpack(const ValuePtr& value, int count);

  // Call kinds (trace_calls.cpp).
  ValuePtr call_tensor_method(const ValuePtr& method, std::vector<ValuePtr> args, KwArgs kwargs);
  // Builtins, std-module callables and container methods (trace_stdlib.cpp).
  ValuePtr call_modelled(const ValuePtr& callee, std::vector<ValuePtr> args, KwArgs kwargs);
  friend class ModelContext;
  ValuePtr make_grad_mode_context(PyObject* factory, const std::vector<ValuePtr>& args);
  void before_with();
  void store_subscript(const ValuePtr& container, const ValuePtr& key, const ValuePtr& value);
  ValuePtr inline_function(PyObject* func, int func_source, std::vector<ValuePtr> args,
                           KwArgs kwargs);
  ValuePtr inline_local_function(const ValuePtr& func, std::vector<ValuePtr> args, KwArgs kwargs);
  // Binds arguments and runs the callee's frame.
  struct Callee {
    PyCodeObject* code;
    PyObject* globals;
    PyObject* func;         // real function object, or null for a LocalFunction
    int func_source;
    PyObject* defaults;     // real function's defaults tuple (borrowed) or null
    PyObject* kwdefaults;   // real function's kw defaults dict (borrowed) or null
    ValuePtr local_defaults;    // LocalFunction's defaults (Tuple) or null
    ValuePtr local_kwdefaults;  // LocalFunction's kw defaults (Dict) or null
    std::vector<ValuePtr> closure;  // LocalFunction's cells
  };
  ValuePtr inline_callee(const Callee& callee, std::vector<ValuePtr> args, KwArgs kwargs);
  ValuePtr make_function(const interpreter::Instruction& ins);
  ValuePtr call_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs);
  ValuePtr load_global(PyObject* name);
  ValuePtr load_free_var(int index);

  PyRef name_at(int index) const;  // co_names[index]
  PyRef const_at(int index) const;  // co_consts[index]
  std::string local_name(int index) const;

  // Records a graph break before instruction `pc` from the snapshot taken
  // there; false when the state cannot be handed to CPython.
  bool record_break(TraceAbort& abort);

  ValuePtr pop();
  ValuePtr& top(int depth = 1) { return stack_[stack_.size() - depth]; }
  void push(ValuePtr value) { stack_.push_back(std::move(value)); }
  std::vector<ValuePtr> pop_n(int n);

  TraceState& state_;
  PyCodeObject* code_;
  PyObject* globals_;
  PyObject* func_;  // borrowed; null for the top frame when unknown
  int func_source_;
  int depth_;
  bool is_top_;
  std::vector<interpreter::Instruction> instructions_;
  std::vector<ValuePtr> locals_;
  std::vector<ValuePtr> closure_;
  std::vector<ValuePtr>* yields_ = nullptr;
  std::vector<ValuePtr> stack_;
  PyRef kwnames_;
  size_t pc_ = 0;
  // The top frame's state before the instruction being traced (for breaks).
  struct Snapshot {
    size_t pc = 0;
    std::vector<ValuePtr> stack;
    std::vector<ValuePtr> locals;
    int graph_size = 0;
    uint64_t mutations = 0;
    std::vector<std::pair<ValuePtr, size_t>> iterators;  // on the stack, with positions
    size_t stores = 0;
  } snapshot_;
  ValuePtr return_value_;
  bool returned_ = false;
};

// Throws a TraceAbort with a formatted message.
[[noreturn]] void abort_trace(BreakCode code, const std::string& message);

using runtime::py_repr;

// Turns a value into the real Python object it stands for (constants,
// objects and containers of them); null if it holds graph values.
PyRef value_to_python(const ValuePtr& value);

// Like value_to_python, but only for constants and tuples/lists of them:
// values on which Python operators and builtins run no user code.
PyRef constant_to_python(const ValuePtr& value);

// Fetches and clears the pending Python error as "Type: message".
std::string take_python_error();

}  // namespace kiln::tracer
