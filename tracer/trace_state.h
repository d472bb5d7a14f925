// State shared by every frame of one trace (the graph being built, the
// guards, the values already wrapped per source) and the frame interpreter.
#pragma once

#include <Python.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "base/py_text.h"
#include "guards/guard_set.h"
#include "cpython/exception_table.h"
#include "cpython/instruction.h"
#include "tracer/break_reason.h"
#include "tracer/dynamic_shapes.h"
#include "tracer/tracer.h"
#include "tracer/value.h"

namespace kiln::tracer {

// Casts autocast applies to an op's inputs: (meta fake, torch dtype).
using AutocastCasts = std::vector<std::pair<base::PyRef, base::PyRef>>;

// A Python exception the traced code raises exactly as eager Python would
// (its cause is guarded or fixed): a handler in an inlined frame may catch
// it (Note [Exceptions in inlined frames] in trace_exceptions.cpp).
class PythonRaise : public TraceAbort {
 public:
  PythonRaise(const std::string& message, PyRef exception)
      : TraceAbort(BreakCode::PythonException, message), exception(std::move(exception)) {}
  PyRef exception;  // the exception instance
};

// Throws the pending Python error as a PythonRaise, its message `prefix`
// then "Type: message".
// One trace: owns the graph and guards until they are handed to the cache.
class TraceState {
 public:
  // `dynamic` names the input dims to trace symbolically (Note [Dynamic
  // shapes]); empty for a static trace.
  TraceState(const guards::FrameView& frame, const DynamicDims& dynamic);
  // Leaves autocast blocks a stopped trace left open (trace_autocast.cpp).
  ~TraceState();

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
  // A dict (or a dict subclass seen through dict's own methods) as a Dict
  // value read item by item, its keys guarded when `guarded`.
  ValuePtr wrap_dict(PyObject* obj, int source, bool guarded);
  // True for a Tensor method that writes its self (Tensor.add_).
  static bool is_inplace_method(const std::string& name);

  // Emits a call of a torch callable as a graph node, inferring its result
  // on meta tensors. `factory` marks callables that create tensors without
  // tensor inputs (their fake run gets device="meta").
  ValuePtr call_torch(const std::string& name, PyObject* target, const std::vector<ValuePtr>& args,
                      const KwArgs& kwargs, bool factory);

  // Answers a metadata query (`tensor.name(*args)`, or the attribute `name`
  // when `attribute`) from the fakes: a constant when every sample point
  // agrees, else SymInts computed at run time (Note [Dynamic shapes]).
  ValuePtr query_fake(const ValuePtr& tensor, const std::string& name,
                      const std::vector<ValuePtr>& args, bool attribute);
  // tensor.size(dim), as query_fake answers it.
  ValuePtr tensor_size(const ValuePtr& tensor, int dim);
  // Applies `fn` (an operator-module function named op_name) to SymInts and
  // int constants: a new SymInt, or a constant when every point agrees.
  // Throws Specialize for results that are not ints.
  ValuePtr sym_arithmetic(const std::string& op_name, PyObject* fn,
                          const std::vector<ValuePtr>& operands);
  // The dims of a tensor value whose size differs between sample points.
  std::vector<int> dynamic_dims_of(const ValuePtr& tensor) const;
  // Number of sample points fakes run at (1 for a static trace).
  int points() const { return points_; }

  // Lowers a value to a graph argument; throws for values graphs can't hold.
  graph::Arg lower(const ValuePtr& value);
  // Lowers a value the frame returns: like lower(), but objects the caller
  // passed in come back as themselves (identity kept), and named tuples
  // (torch.return_types) as their own type.
  graph::Arg lower_output(const ValuePtr& value);
  // Before lowering a frame's outputs: finds the lists, dicts and records
  // reachable more than once from `roots`, which lower_output then builds
  // once, as a graph node, and returns as that one object everywhere
  // (`return d, [d]` gives the same dict twice, as in Python).
  void plan_output_identity(const std::vector<ValuePtr>& roots);
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
  // `with` blocks of grad-mode, autocast and Python-defined contexts open
  // at the current instruction (no graph break inside one).
  int open_with_blocks = 0;
  // Tracing twins of the autocast blocks open now, innermost last (Note
  // [Autocast blocks]); while any is open, ops infer their results through
  // infer_under_autocast.
  std::vector<PyRef> open_autocasts;
  // True when autocast applies to the ops traced now: a block is open, or
  // autocast was on when the frame was called (guarded).
  bool autocast_active() const { return ambient_autocast_ || !open_autocasts.empty(); }

  // Stores to caller-visible state, in program order (Note [Side effects]).
  std::vector<BreakInfo::PendingStore> stores;
  // The exception an inlined handler is handling (sys.exception()), null
  // outside handlers (Note [Exceptions in inlined frames]).
  ValuePtr handled_exception;
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
  // The value's stand-in at sample point `point`: fakes, SymInt values,
  // constants, containers of them.
  PyRef lower_fake(const ValuePtr& value, int point);
  // A graph node rebuilding a Record the frame returns (trace_records.cpp).
  graph::Arg lower_record(const ValuePtr& record);
  ValuePtr wrap_result(int node, PyObject* fake_result, graph::DeviceType device_type,
                       int device_index);
  // An in-place op made `target` require grad: its meta and fakes follow.
  void mark_requires_grad(const ValuePtr& target);
  // Gives a result tensor its fakes at the other points and names its
  // symbolic dims on the node.
  void attach_points(const ValuePtr& value, const std::vector<PyRef>& per_point, int node);
  ValuePtr make_symint(std::vector<int64_t> per_point, const std::string& name, PyObject* target,
                       std::vector<ValuePtr> operands, PyObject* index);
  // `value` with each tensor that `casts` names replaced by a Tensor.to
  // node casting it (nested tuples and lists rebuilt). (*made)[i] holds the
  // cast value of casts[i] once made, so a tensor passed twice is cast once
  // (Note [Explicit autocast casts]).
  ValuePtr with_autocast_casts(const ValuePtr& value, const AutocastCasts& casts, std::vector<ValuePtr>* made);

  guards::FrameView frame_;
  DynamicDims dynamic_;
  SymbolTable symbols_;
  // plan_output_identity: uses of each container in the outputs, and the
  // node that builds each shared one once lowered.
  std::unordered_map<const Value*, int> output_uses_;
  std::unordered_map<const Value*, int> output_nodes_;
  graph::Arg lower_output_once(const ValuePtr& value);
  int points_ = 1;
  std::unique_ptr<graph::Graph> graph_;
  std::unique_ptr<guards::GuardSet> guards_;
  std::unordered_map<int, ValuePtr> wrapped_;
  // Lists and dicts by identity: one object reached through two sources
  // must be one value, or a change through one path would not show in the
  // other.
  std::unordered_map<PyObject*, ValuePtr> wrapped_containers_;
  uint64_t mutations_ = 0;
  std::unique_ptr<BreakInfo> break_info_;
  // Autocast was on when the frame was called.
  bool ambient_autocast_ = false;
  // Set while call_torch emits an op whose autocast casts are already
  // graph nodes, and the casts themselves.
  bool autocast_explicit_ = false;
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
  // Makes this frame a generator's, run a yield at a time by resume().
  void make_generator() { generator_ = true; }
  // Runs a generator's frame to its next yield: the value yielded, or null
  // once it returned (Note [Generators]).
  ValuePtr resume();
  // Runs to the frame's return; returns the returned value.
  ValuePtr run();

  // Calls any value with arguments, as CALL would (used by inlining too).
  ValuePtr call_value(const ValuePtr& callable, std::vector<ValuePtr> args, KwArgs kwargs);

 private:
  void step(const cpython::Instruction& ins);
  void step_load_store(const cpython::Instruction& ins);
  void step_build(const cpython::Instruction& ins);
  void step_jump(const cpython::Instruction& ins);
  void step_call(const cpython::Instruction& ins);
  // `match` statements (trace_match.cpp).
  void step_match(const cpython::Instruction& ins);
  ValuePtr match_class(const ValuePtr& subject, const ValuePtr& cls, const ValuePtr& names, int positional);
  void store_attr(const ValuePtr& target, PyObject* name, const ValuePtr& value);
  void store_global(PyObject* name, const ValuePtr& value);

  // Attribute, operator and subscript semantics (trace_attributes.cpp,
  // trace_operators.cpp).
  ValuePtr load_attr(const ValuePtr& base, PyObject* name);
  // `import name` / `from name import ...` of a module already loaded, and
  // `from module import name` (trace_imports.cpp).
  ValuePtr import_name(PyObject* name, const ValuePtr& level, const ValuePtr& fromlist);
  ValuePtr import_from(const ValuePtr& module, PyObject* name);
  // `generic`: object.__getattribute__'s lookup, past a class's own
  // __getattribute__ (which a read without it inlines; Note [Custom getattr]).
  ValuePtr load_object_attr(const ValuePtr& base, PyObject* name, bool generic = false);
  // self.<name>(*args) where self is an Object whose class implements the
  // special method `name` (__getitem__, __contains__, __len__) in Python:
  // inlined, as the operator would call it; null when it has no such method.
  ValuePtr call_python_special(const ValuePtr& self, const char* name, std::vector<ValuePtr> args);
  // A source for `entry`, what reading `name` through `type` gives: the
  // GlobalIn entry of the dict (of `type` or a base) that holds it, or that
  // entry's __func__ for a static method; -1 for anything else.
  int class_entry_source(PyTypeObject* type, PyObject* name, PyObject* entry);
  // object.__getattribute__(base, name) called explicitly or through super().
  ValuePtr generic_getattr(const ValuePtr& base, const ValuePtr& name);
  // Reads a class-level descriptor (property, staticmethod, classmethod) on
  // `base`; null for kinds kiln does not model.
  ValuePtr class_descriptor(const ValuePtr& base, PyObject* class_attr);
  ValuePtr binary_op(int nb_op, const ValuePtr& a, const ValuePtr& b);
  ValuePtr compare_op(int cmp, const ValuePtr& a, const ValuePtr& b);
  // ==/!= with a plain Python object on one side: its Python __eq__ is
  // inlined, object's identity rule applied; null when not modelled.
  ValuePtr compare_objects(int cmp, const ValuePtr& a, const ValuePtr& b);
  ValuePtr unary_op(cpython::Op op, const ValuePtr& a);
  ValuePtr subscript(const ValuePtr& base, const ValuePtr& index);
  bool truthiness(const ValuePtr& value);
  // iter(value). `lazy`: a generator may stay suspended (GET_ITER in an
  // inlined frame, whose FOR_ITER pulls its items one by one).
  ValuePtr get_iter(const ValuePtr& value, bool lazy = false);
  // The next item of an iterator value, resuming its generator if needed;
  // null when it is exhausted.
  ValuePtr next_item(const ValuePtr& iterator);
  // Runs an iterator's generator to its end, so `items` holds everything.
  void drain(const ValuePtr& iterator);
  std::vector<ValuePtr> unpack(const ValuePtr& value, int count);

  // Call kinds (trace_calls.cpp).
  ValuePtr call_tensor_method(const ValuePtr& method, std::vector<ValuePtr> args, KwArgs kwargs);
  // Builtins, std-module callables and container methods (trace_stdlib.cpp).
  ValuePtr call_modelled(const ValuePtr& callee, std::vector<ValuePtr> args, KwArgs kwargs);
  friend class ModelContext;
  // BEFORE_WITH over a context whose __enter__/__exit__ are Python
  // functions (Note [Python context managers]).
  void enter_user_context(const ValuePtr& context);
  ValuePtr make_grad_mode_context(PyObject* factory, const std::vector<ValuePtr>& args);
  void before_with();
  void store_subscript(const ValuePtr& container, const ValuePtr& key, const ValuePtr& value);
  void delete_subscript(const ValuePtr& container, const ValuePtr& key);
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
  ValuePtr make_function(const cpython::Instruction& ins);
  // module(*args): its forward, with nn.Module.__call__'s rules. A Python
  // __call__ of the module's class is inlined first unless `base_call` (the
  // call is nn.Module.__call__ itself, reached through super()).
  ValuePtr call_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs, bool base_call = false);
  ValuePtr load_global(PyObject* name);
  ValuePtr load_free_var(int index);

  // namedtuples and dataclasses (trace_records.cpp, Note [Records]).
  ValuePtr make_namedtuple(PyObject* type, std::vector<ValuePtr> args, const KwArgs& kwargs);
  // callable(*args, **kwargs) run while tracing, its result a constant
  // (an exception to raise, a torch.device); every argument must be a
  // constant, else the trace stops with "<what> <argument>".
  ValuePtr call_on_constants(PyObject* callable, const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                             const std::string& what);
  // A namedtuple's method or property (null for tuple methods).
  ValuePtr namedtuple_attr(const ValuePtr& base, PyObject* name);
  ValuePtr call_namedtuple_method(const ValuePtr& method, std::vector<ValuePtr> args, KwArgs kwargs);
  // Sets of constants (trace_sets.cpp).
  ValuePtr make_set(const std::vector<ValuePtr>& items);
  void set_insert(const ValuePtr& set, const std::vector<ValuePtr>& items);
  ValuePtr call_set_method(const ValuePtr& method, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // Objects of plain Python classes the trace makes (Note [User objects]).
  ValuePtr make_record(const ValuePtr& cls, std::vector<ValuePtr> args, KwArgs kwargs);
  ValuePtr record_attr(const ValuePtr& record, PyObject* name);
  // `generic`: object.__setattr__'s store, past a Python __setattr__.
  void store_record_attr(const ValuePtr& record, PyObject* name, const ValuePtr& value, bool generic = false);
  // `del record.name` on an object the trace made: its __dict__ entry goes.
  void delete_record_attr(const ValuePtr& record, PyObject* name);
  // A dict or OrderedDict method `descriptor` bound to the record's contents.
  ValuePtr record_method(const ValuePtr& record, PyObject* name, PyObject* descriptor);
  // os.environ reads (trace_environ.cpp, Note [Environment variables]): the
  // bound method for get/__getitem__/__contains__ (null for others), and
  // the read itself, `op` one of get, __getitem__, __contains__.
  ValuePtr environ_method(const ValuePtr& environ, PyObject* name);
  ValuePtr read_environ(const std::string& op, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // d.__setitem__(k, v) and the other dunders of a dict value, called as
  // methods (super().__setitem__ in a dict subclass).
  ValuePtr call_dict_dunder(const ValuePtr& method, std::vector<ValuePtr> args, const KwArgs& kwargs);
  // object.__setattr__ / object.__init__ called on a Record (null when
  // `callable` is neither).
  ValuePtr call_object_slot(const ValuePtr& callable, std::vector<ValuePtr> args, const KwArgs& kwargs);

  // Enum members (trace_enums.cpp): Cls.MEMBER, member.name/.value (null
  // when `base` is no enum class or member), and ==/!= between members.
  ValuePtr enum_attr(const ValuePtr& base, PyObject* name);
  ValuePtr compare_enum(int cmp, const ValuePtr& a, const ValuePtr& b);

  // A str method evaluated on constants (trace_formatting.cpp).
  ValuePtr call_constant_method(const ValuePtr& method, const std::vector<ValuePtr>& args, const KwArgs& kwargs);

  // Autocast blocks (trace_autocast.cpp, Note [Autocast blocks]).
  ValuePtr make_autocast_context(PyObject* cls, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // The with statement's entry: pushes the block's __exit__ and None.
  void enter_autocast(const ValuePtr& context);
  // Opens the block: its graph node and tracing twin; returns the value
  // exit_autocast closes (kind AutocastExit).
  ValuePtr open_autocast(const ValuePtr& context);
  ValuePtr exit_autocast(const ValuePtr& exit);

  // super() and its lookups (trace_super.cpp).
  ValuePtr make_super(const std::vector<ValuePtr>& args);
  ValuePtr super_attr(const ValuePtr& super, PyObject* name);

  PyRef name_at(int index) const;  // co_names[index]
  PyRef const_at(int index) const;  // co_consts[index]
  std::string local_name(int index) const;

  // try/except in inlined frames (trace_exceptions.cpp): jumps to the
  // handler that catches `raised` here; false when none does.
  bool enter_handler(const PythonRaise& raised);
  void step_exceptions(const cpython::Instruction& ins);

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
  std::vector<cpython::Instruction> instructions_;
  std::vector<ValuePtr> locals_;
  std::vector<ValuePtr> closure_;
  std::vector<ValuePtr>* yields_ = nullptr;
  bool generator_ = false;   // a generator's frame, run by resume()
  bool suspended_ = false;   // stopped at a yield; yielded_ holds the value
  ValuePtr yielded_;
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
  // Top frame: instructions a user's try/except/finally protects.
  std::vector<bool> in_user_try_;
  // co_exceptiontable, decoded when something first raises in the frame.
  std::vector<cpython::ExceptionTableEntry> exception_entries_;
  bool exception_entries_read_ = false;
};

// Throws a TraceAbort with a formatted message.
[[noreturn]] void abort_trace(BreakCode code, const std::string& message);

[[noreturn]] void raise_python_error(const std::string& prefix = "");
// Throws `exception` (an instance) as a PythonRaise.
[[noreturn]] void raise_exception_object(PyObject* exception);
// True for an exception class whose __new__ and __init__ are C code (the
// builtin exceptions and subclasses that add only methods or attributes).
bool exception_class_is_builtin_made(PyObject* cls);

using base::py_repr;

// Turns a value into the real Python object it stands for (constants,
// objects and containers of them); null if it holds graph values.
PyRef value_to_python(const ValuePtr& value);

// Like value_to_python, but only for constants and tuples/lists of them:
// values on which Python operators and builtins run no user code.
PyRef constant_to_python(const ValuePtr& value);

// True for a collections.namedtuple class (and subclasses that keep its
// __new__ and add no __init__).
bool is_namedtuple_type(PyObject* type);

// True for object.__getattribute__ (the slot wrapper), the generic lookup.
bool is_object_getattribute(PyObject* obj);
// True for the value of os.environ, and for the function os.getenv.
bool is_environ(const ValuePtr& value);
bool is_getenv(PyObject* callable);
// True for object's own slot wrapper `name` (object.__setattr__, ...).
bool is_object_slot(PyObject* obj, const char* name);
// True for a method of dict or OrderedDict (a method descriptor or slot wrapper).
bool is_dict_descriptor(PyObject* obj);
// True for a plain Python class whose instances the tracer can model as a
// Record (Note [User objects] in trace_records.cpp).
bool is_record_class(PyObject* type);
// The callable that rebuilds a Record: rebuild_object(cls, attrs, contents).
PyObject* record_rebuilder();
// The callable that rebuilds a returned tuple of `type` from a sequence:
// Type._make for namedtuples, the type itself for torch.return_types.
PyRef namedtuple_rebuilder(PyObject* type);

// Marks, per decoded instruction, whether a user's try/except/finally
// handler protects it (Note [Tracing try blocks] in trace_exceptions.cpp).
std::vector<bool> user_try_coverage(PyCodeObject* code, const std::vector<cpython::Instruction>& instructions);

// True when `name` is a str method that call_constant_method evaluates.
bool is_constant_method(const ValuePtr& base, const std::string& name);

// True for torch.autocast and its subclasses (torch.cpu.amp.autocast, ...).
bool is_autocast_class(PyObject* obj);
// torch.autocast, or nullptr where torch has none.
PyObject* autocast_class();
// Runs target(*args, **kwargs) on meta fakes as autocast would on
// `device`; returns the result or null with a Python error set.
PyRef infer_under_autocast(PyObject* target, PyObject* args, PyObject* kwargs, graph::DeviceType device_type,
                           int device_index);
// The input casts autocast applies to target(*args, **kwargs) on `device`
// (Note [Explicit autocast casts]): (meta fake, dtype) pairs, empty when it
// casts nothing; nullopt when no casts of inputs reproduce its result
// dtypes. Aborts the trace when the op raises.
std::optional<AutocastCasts> explicit_autocast_casts(PyObject* target, PyObject* args, PyObject* kwargs,
                                                     graph::DeviceType device_type, int device_index);

// True when `code` calls zero-argument super(), which reads the frame's
// first argument and __class__ cell: resume functions cannot provide them.
bool uses_zero_arg_super(PyCodeObject* code);

// Fetches and clears the pending Python error as "Type: message".
std::string take_python_error();

}  // namespace kiln::tracer
