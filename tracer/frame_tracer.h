// The frame interpreter: runs one frame's bytecode (the traced function or
// an inlined callee) symbolically over the trace's shared TraceState
// (trace_state.h). Its methods are defined by family: frame_tracer.cpp (the
// loop and graph-break snapshots), trace_calls.cpp, trace_attributes.cpp,
// trace_operators.cpp and the trace_*.cpp files of Python's language
// families.
#pragma once

#include <Python.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tracer/trace_state.h"

namespace kiln::tracer {

// Interprets one frame (the traced function or an inlined callee).
// How many custom Function classes the tracer refused to trace the
// backward of (Note [Traced Function backwards]); a trace that refused one
// is traced again.
size_t refused_function_count();
// True where a custom Function class has no setup_context of its own: its
// forward takes ctx first.
bool function_forward_takes_ctx(PyObject* cls);

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
  // What the frame returned (null before it returns): a generator's return
  // value is what `yield from` it evaluates to.
  const ValuePtr& returned_value() const { return return_value_; }

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
  // `a is b` for two tensor values, or a trace abort where it is not
  // known (Note [Tensor identity]).
  bool tensors_are_one_object(const ValuePtr& a, const ValuePtr& b);
  ValuePtr class_descriptor(const ValuePtr& base, PyObject* class_attr, int entry_source = -1);
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
  // torch.utils.checkpoint.checkpoint(fn, *args, **kwargs): fn traced as a
  // checkpointed region (trace_checkpoint.cpp, Note [Traced checkpoints]).
  ValuePtr call_checkpoint(std::vector<ValuePtr> args, KwArgs kwargs);
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
  // Cls.forward of a custom autograd.Function traced inline where no
  // gradient can flow through Cls.apply(*args); null where the call stays
  // one graph node (Note [Custom autograd Functions] in trace_calls.cpp).
  ValuePtr inline_function_forward(PyObject* cls, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // Cls.apply(*args) with gradients flowing: forward and backward traced,
  // the call one node that carries the backward's graph (Note [Traced
  // Function backwards] in trace_function_vjp.cpp); null where the call
  // stays the Function's own node.
  ValuePtr trace_function_vjp(PyObject* cls, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
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
  // module.forward(*args, **kwargs), inlined.
  ValuePtr call_module_forward(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs);
  // A call of a module with forward (pre-)hooks: Note [Inlined module hooks].
  ValuePtr call_hooked_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs);
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
  // `tensor in set` for a tensor read through a source (Note [Tensors in sets]).
  bool set_holds_tensor(const std::vector<ValuePtr>& members, const ValuePtr& tensor);
  // Objects of plain Python classes the trace makes (Note [User objects]).
  ValuePtr make_record(const ValuePtr& cls, std::vector<ValuePtr> args, KwArgs kwargs);
  // `generic`: object.__getattribute__'s lookup, past a Python __getattribute__.
  ValuePtr record_attr(const ValuePtr& record, PyObject* name, bool generic = false);
  // copy.deepcopy(value) (Note [Deep copies], trace_copy.cpp).
  ValuePtr deep_copy(const ValuePtr& value);
  ValuePtr deep_copy_into(const ValuePtr& value, std::vector<std::pair<const Value*, ValuePtr>>* memo);
  ValuePtr copy_object(const ValuePtr& value, std::vector<std::pair<const Value*, ValuePtr>>* memo);
  // A torch.nn module class called with constant arguments, made while
  // tracing (Note [Torch modules made in forward], trace_calls.cpp).
  ValuePtr make_torch_module(PyObject* type, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // setattr(x, name, value) / delattr(x, name) with a constant name.
  ValuePtr call_attribute_builtin(bool store, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // `generic`: object.__setattr__'s store, past a Python __setattr__.
  void store_record_attr(const ValuePtr& record, PyObject* name, const ValuePtr& value, bool generic = false);
  // `tensor.name = value`: requires_grad as Tensor.requires_grad_, else a break.
  void store_tensor_attr(const ValuePtr& tensor, const std::string& name, const ValuePtr& value);
  // `del target.name` (DELETE_ATTR, delattr()): on a Record, else a break.
  void delete_attr(const ValuePtr& target, PyObject* name);
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
  // A logging.Logger method of `base` (Note [Deferred logging]), or null.
  ValuePtr logger_method(const ValuePtr& base, PyObject* name);
  // Records a deferred logging call; returns None.
  ValuePtr defer_logging_call(const ValuePtr& callable, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // "file:line" of the instruction being traced.
  std::string current_location() const;

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
    uint64_t birth = 0;  // values made by the instruction are born after it
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

}  // namespace kiln::tracer
