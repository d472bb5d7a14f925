// State shared by every frame of one trace: the graph being built, the
// guards, the values already wrapped per source (the frame interpreter that
// runs over it: frame_tracer.h).
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

// A Python int that is no bool.
bool is_int(PyObject* obj);
// True when every result equals the first (Python ==).
bool all_equal(const std::vector<base::PyRef>& results);

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
  // The finished trace's guards; its dynamic dims admit size 1 where the
  // trace held there (Note [The size-one point]).
  std::unique_ptr<guards::GuardSet> take_guards();

  // Wraps an object read from `source`, installing the guards that reading
  // it implies. The same source always yields the same Value.
  ValuePtr wrap(PyObject* obj, int source);
  // Wraps an object kiln assumes fixed (torch's namespace, constants made
  // by the trace): no source, no guard.
  ValuePtr wrap_unguarded(PyObject* obj);
  // Guards the identity of an object wrapped with a type guard only, once
  // the trace compares it by identity or hands it to code that keeps it
  // (Note [Objects guarded by type]). No-op for other values.
  // `why` is logged (KILN_LOGS=guards).
  void pin_identity(const ValuePtr& value, const char* why);
  // Guards that the objects the trace read as separate values stay separate
  // objects where a type guard alone would let two names alias (Note
  // [Objects guarded by type]). Called once, when the trace is done.
  void guard_distinct_objects();
  // A dict (or a dict subclass seen through dict's own methods) as a Dict
  // value read item by item, its keys guarded when `guarded`.
  ValuePtr wrap_dict(PyObject* obj, int source, bool guarded);
  // True for a Tensor method that writes its self (Tensor.add_).
  static bool is_inplace_method(const std::string& name);
  // True for the conversions and copies that return their input itself when
  // it already has the dtype, device or layout asked (Tensor.float, .to,
  // .contiguous, ...): Note [Conversions that change nothing].
  static bool may_return_input(const std::string& name);

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
  // The exact expression of a SymInt made by `op_name` (operator.add,
  // sub, mul, neg) from `operands`, where theirs are known.
  std::optional<guards::SizeExpr> composed_size(const std::string& op_name,
                                                const std::vector<ValuePtr>& operands) const;
  // A constant's or SymInt's expression: exact where known, else fitted
  // from its sample points (Note [Size relations]).
  std::optional<guards::SizeExpr> size_expr_of(const ValuePtr& value) const;
  // The exact expression of dim `dim` of `tensor`: s<k> for a graph
  // input's symbolic dim, a constant for a static one, or what a shape
  // rule gave a call's result (Note [Exact dims through shape rules]).
  std::optional<guards::SizeExpr> exact_dim_size(const ValuePtr& tensor, int64_t dim) const;
  // Sets `result`'s dim_exprs from the shape rule of `name` where it has
  // one, checked against the result's sizes at every sample point.
  void apply_shape_rule(const std::string& name, const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                        const ValuePtr& result) const;
  // Marks the symbols `value` (a SymInt) derives from: the symbolic dims
  // its Tensor.size calls read, through its arithmetic.
  void note_sym_sources(const ValuePtr& value, std::vector<bool>* symbols) const;
  // slice(parts...) where a part is a SymInt: a sym_slice value whose
  // fake at each point is the slice of the parts' values there.
  ValuePtr sym_slice(const std::vector<ValuePtr>& parts);
  // The fake of `tensor[index]`'s tensor at sample point `point` made long
  // enough that no dynamic slice bound clamps there where it does not at
  // the traced sizes, guarding that it never does (Note [Slices past a
  // buffer]); null when no dim needs it.
  PyRef unclamped_fake(const ValuePtr& tensor, const ValuePtr& index, int point);
  // `a cmp b` (Py_LT .. Py_GE) where a side is a SymInt: the answer at the
  // traced sizes, kept with a SizeRelation guard (Note [Size relations]);
  // throws Specialize where it differs between sample points or no size
  // expression fits a side.
  ValuePtr sym_compare(int cmp, const ValuePtr& a, const ValuePtr& b);
  ValuePtr sym_arithmetic(const std::string& op_name, PyObject* fn,
                          const std::vector<ValuePtr>& operands);
  // The dims of a tensor value whose size differs between sample points.
  std::vector<int> dynamic_dims_of(const ValuePtr& tensor) const;
  // Number of sample points fakes run at (1 for a static trace), the
  // size-one point included while it holds.
  int points() const { return points_; }
  // True once the trace read a dynamic int (Note [Dynamic ints]).
  bool has_int_symbols() const { return !int_symbols_.empty(); }
  // True while the trace holds at the point where every symbol is 1
  // (Note [The size-one point]).
  bool ones_point_holds() const { return points_ > SymbolTable::kPoints; }
  // The trace differs at the size-one point (`why`): later ops skip it and
  // the trace's guards keep every symbol >= 2.
  void drop_ones_point(const std::string& why);
  // A value the sample points agree on must be the same at the size-one
  // point: where `results` (one per point) differ there only, the point is
  // dropped (`what` names the value in the log) and its result removed.
  void check_ones_constant(std::vector<PyRef>* results, const std::string& what);

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

  // Records an in-place change of a container, cell or record (`changed`;
  // null when the change has no one target), so a graph break can tell
  // whether an instruction it backs out of already changed state.
  void note_mutation(const ValuePtr& changed = nullptr) {
    mutated_births_.push_back(changed && changed->source < 0 ? changed->birth : 0);
  }
  uint64_t mutations() const { return mutated_births_.size(); }
  // True when a change since mutations() was `since` touched a value made
  // before `born` (or one the caller passed in): Note [Changes of new values].
  bool changed_older_than(uint64_t since, uint64_t born) const {
    for (size_t i = since; i < mutated_births_.size(); ++i) {
      if (mutated_births_[i] < born) return true;
    }
    return false;
  }

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
  // The int at `source` as a SymInt of its own symbol when the trace has
  // it dynamic (Note [Dynamic ints] in dynamic_shapes.cpp); null otherwise.
  ValuePtr wrap_dynamic_int(PyObject* obj, int source);
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
  // The symbols dynamic ints bind (Note [Dynamic ints]).
  std::vector<int> int_symbols_;
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
  // Plain objects wrapped through a source, by object: a second source
  // reaching one gets the same value (and guards its identity).
  std::unordered_map<PyObject*, ValuePtr> wrapped_objects_;
  std::vector<uint64_t> mutated_births_;  // per change: the changed value's birth, 0 when old or unknown
  std::unique_ptr<BreakInfo> break_info_;
  // Autocast was on when the frame was called.
  bool ambient_autocast_ = false;
  // Set while call_torch emits an op whose autocast casts are already
  // graph nodes, and the casts themselves.
  bool autocast_explicit_ = false;
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
// True for a torch.nn module class whose constructors are all torch.nn's
// (Note [Torch modules made in forward] in trace_calls.cpp).
bool is_torch_module_class(PyObject* obj);
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
