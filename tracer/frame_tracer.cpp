// The frame interpreter's loop and its stack, local, constant, container and
// jump instructions. Calls, attributes and operators live in sibling files.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "cpython/bytecode_decoder.h"
#include "base/log.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

using cpython::Instruction;
using cpython::Op;

namespace {

constexpr size_t kMaxSteps = 1'000'000;  // unrolled loops end well before this

PyObject* torch_prefix() {
  static PyObject* prefix = PyUnicode_InternFromString("torch.");
  return prefix;
}

std::string code_file(PyCodeObject* code) {
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  return file ? file : "?";
}

}  // namespace

void abort_trace(BreakCode code, const std::string& message) { throw TraceAbort(code, message); }

std::string take_python_error() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (!type) return "unknown error";
  PyErr_NormalizeException(&type, &value, &traceback);
  std::string out = reinterpret_cast<PyTypeObject*>(type)->tp_name;
  if (value) {
    PyObject* text = PyObject_Str(value);
    if (text) {
      out += std::string(": ") + PyUnicode_AsUTF8(text);
      Py_DECREF(text);
    }
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  // Keep messages to one readable line.
  size_t newline = out.find('\n');
  if (newline != std::string::npos) out = out.substr(0, newline);
  return out;
}

FrameTracer::FrameTracer(TraceState& state, PyCodeObject* code, PyObject* globals,
                         PyObject* func, int func_source, int depth)
    : state_(state),
      code_(code),
      globals_(globals),
      func_(func),
      func_source_(func_source),
      depth_(depth),
      is_top_(depth == 0),
      instructions_(cpython::decode_bytecode(code)) {
  locals_.resize(code->co_nlocalsplus);
}

PyRef FrameTracer::name_at(int index) const {
  return PyRef::borrow(PyTuple_GET_ITEM(code_->co_names, index));
}

PyRef FrameTracer::const_at(int index) const {
  return PyRef::borrow(PyTuple_GET_ITEM(code_->co_consts, index));
}

std::string FrameTracer::local_name(int index) const {
  PyObject* name = PyTuple_GET_ITEM(code_->co_localsplusnames, index);
  const char* utf8 = PyUnicode_AsUTF8(name);
  return utf8 ? utf8 : "?";
}

ValuePtr FrameTracer::pop() {
  if (stack_.empty()) abort_trace(BreakCode::UnsupportedOpcode, "value stack underflow");
  ValuePtr value = std::move(stack_.back());
  stack_.pop_back();
  return value;
}

std::vector<ValuePtr> FrameTracer::pop_n(int n) {
  if (static_cast<int>(stack_.size()) < n) {
    abort_trace(BreakCode::UnsupportedOpcode, "value stack underflow");
  }
  std::vector<ValuePtr> out(stack_.end() - n, stack_.end());
  stack_.resize(stack_.size() - n);
  return out;
}

std::string FrameTracer::current_location() const {
  const size_t at = pc_ > 0 ? pc_ - 1 : 0;
  int line = at < instructions_.size() ? instructions_[at].line : -1;
  if (line < 0) line = code_->co_firstlineno;
  return code_file(code_) + ":" + std::to_string(line);
}

ValuePtr FrameTracer::run() {
  size_t steps = 0;
  try {
    // Handlers only run when something raises, and a trace stops wherever
    // the code would raise: the path traced is the one on which nothing
    // does (Note [Tracing try blocks]). The top frame needs to know where
    // user handlers protect it, to make no graph break there.
    if (is_top_) in_user_try_ = user_try_coverage(code_, instructions_);
    while (!returned_ && !suspended_) {
      if (pc_ >= instructions_.size()) {
        abort_trace(BreakCode::UnsupportedOpcode, "ran past the end of the bytecode");
      }
      if (++steps > kMaxSteps) abort_trace(BreakCode::UnsupportedFrame, "the trace is too long");
      if (is_top_) {
        snapshot_.pc = pc_;
        snapshot_.stack = stack_;
        snapshot_.locals = locals_;
        snapshot_.graph_size = static_cast<int>(state_.graph().nodes().size());
        snapshot_.mutations = state_.mutations();
        snapshot_.birth = next_value_birth();
        snapshot_.stores = state_.stores.size();
        // An inlined callee may consume an iterator of this frame (a 3.11
        // comprehension does): a break puts the positions back.
        snapshot_.iterators.clear();
        for (const auto* values : {&stack_, &locals_}) {
          for (const ValuePtr& value : *values) {
            if (value && value->is(ValueKind::Iterator)) snapshot_.iterators.emplace_back(value, value->position);
          }
        }
      }
      const Instruction& ins = instructions_[pc_++];
      try {
        step(ins);
      } catch (PythonRaise& raised) {
        // Note [Exceptions in inlined frames].
        if (!enter_handler(raised)) throw;
      }
    }
  } catch (TraceAbort& abort) {
    if (abort.location.empty()) abort.location = current_location();
    if (is_top_ && record_break(abort)) return nullptr;
    throw;
  } catch (Specialize& specialize) {
    if (specialize.location.empty()) specialize.location = current_location();
    throw;
  }
  return return_value_;
}

namespace {

// Instructions CPython can run at a graph break: they work on the value
// stack only, so the transformed code can rebuild the stack, run them, and
// hand what follows to a resume function.
bool breakable_op(cpython::Op op) {
  using cpython::Op;
  switch (op) {
    case Op::Call:
    case Op::CallFunctionEx:
    case Op::PopJumpIfFalse:
    case Op::PopJumpIfTrue:
    case Op::PopJumpIfNone:
    case Op::PopJumpIfNotNone:
    case Op::BinaryOp:
    case Op::CompareOp:
    case Op::IsOp:
    case Op::ContainsOp:
    case Op::UnaryNegative:
    case Op::UnaryPositive:
    case Op::UnaryNot:
    case Op::UnaryInvert:
    case Op::BinarySubscr:
    case Op::StoreSubscr:
    case Op::StoreAttr:
    case Op::StoreGlobal:
    case Op::LoadAttr:
    case Op::LoadGlobal:
    case Op::GetIter:
    case Op::FormatValue:
    case Op::BuildString:
    case Op::UnpackSequence:
    case Op::ImportName:
    case Op::ImportFrom:
      return true;
    default:
      return false;
  }
}

// True when bytecode can rebuild the value at a graph break.
bool reconstructible(const ValuePtr& value, bool on_stack) {
  switch (value->kind) {
    case ValueKind::Null:
      return on_stack;
    case ValueKind::Constant:
    case ValueKind::Tensor:
      return true;
    case ValueKind::SymInt:
      // The resume function would take it as a plain int argument.
      throw Specialize("a dynamic size is live at a graph break");
    case ValueKind::Tuple:
    case ValueKind::List:
    case ValueKind::Dict:
      if (value->source >= 0 || value->obj) return true;
      for (const ValuePtr& item : value->items) {
        if (!reconstructible(item, false)) return false;
      }
      return true;
    case ValueKind::Iterator:
      if (!on_stack || value->generator) return false;  // a suspended generator cannot be handed over
      for (size_t i = value->position; i < value->items.size(); ++i) {
        if (!reconstructible(value->items[i], false)) return false;
      }
      return true;
    case ValueKind::TensorMethod:
    case ValueKind::ContainerMethod:
      return reconstructible(value->self, false);
    case ValueKind::Cell:
      // A local's cell: the transformed code stores its contents back.
      return !on_stack && (value->items.empty() || reconstructible(value->items[0], false));
    case ValueKind::LocalFunction:
      // Made again by MAKE_FUNCTION; its cells must be the frame's own
      // (checked when the code is generated).
      return (!value->defaults || reconstructible(value->defaults, false)) &&
             (!value->kwdefaults || reconstructible(value->kwdefaults, false));
    case ValueKind::Method:
      return value->source >= 0 || reconstructible(value->self, false);
    case ValueKind::StdObject:
      // Made again by calling its type with the stored arguments.
      return reconstructible(value->items[0], false) && reconstructible(value->items[1], false);
    case ValueKind::Record:
      // Made again by rebuild_object (Note [User objects]).
      return reconstructible(value->attrs, false) && (!value->contents || reconstructible(value->contents, false));
    case ValueKind::Module:
    case ValueKind::Function:
    case ValueKind::TorchCallable:
    case ValueKind::Builtin:
    case ValueKind::PyModule:
    case ValueKind::Object:
      return value->source >= 0 || value->obj;
    default:
      return false;
  }
}

void collect_tensors(const ValuePtr& value, std::vector<int>& nodes) {
  if (value->source >= 0) return;  // rebuilt from its source, not from the graph
  if (value->is(ValueKind::Tensor)) {
    if (std::find(nodes.begin(), nodes.end(), value->node) == nodes.end()) nodes.push_back(value->node);
    return;
  }
  for (const ValuePtr& item : value->items) collect_tensors(item, nodes);
  if (value->self) collect_tensors(value->self, nodes);
  if (value->attrs) collect_tensors(value->attrs, nodes);
  if (value->contents) collect_tensors(value->contents, nodes);
}

}  // namespace

// Note [Tensor identity]
// `a is b` between two tensor values of the trace (nn.MultiheadAttention
// asks `query is not key` to pick its fast path: SigLIP's pooling head
// passes a learned probe and the hidden states). Two graph inputs are one
// object or not as their real tensors are now, and a pair guard keeps it
// so. A tensor an op made is a new object unless the op may hand back one
// of its inputs: in-place ops, and the conversions and copies that return
// their input when it already has the dtype or layout asked (contiguous,
// to, type...), which the trace resolves where sizes are static (Note
// [Conversions that change nothing]). So two values, each an input or
// made by an op that makes a new tensor, are distinct; anything else stops
// the trace.
bool FrameTracer::tensors_are_one_object(const ValuePtr& a, const ValuePtr& b) {
  if (a->source >= 0 && b->source >= 0) {
    const bool same = a->tensor_address == b->tensor_address;
    if (same) {
      state_.guards().add_same_object(a->source, b->source);
    } else {
      state_.guards().add_distinct({a->source, b->source});
    }
    return same;
  }
  auto makes_new_tensor = [&](const ValuePtr& v) {
    if (v->source >= 0 || v->node < 0) return false;
    const std::string& name = state_.graph().node(v->node).target_name;
    // Static: a node was made only where the result is new (Note [Conversions that change nothing]).
    if (TraceState::may_return_input(name)) return state_.graph().node(v->node).symbolic_sizes.empty();
    if (name.empty() || name.back() == '_' || name.rfind("operator.i", 0) == 0) return false;
    // inplace=True, or a True among the positional arguments of a
    // functional form (F.relu(x, True)).
    const graph::Node& node = state_.graph().node(v->node);
    for (const auto& [key, arg] : node.kwargs) {
      if (key == "inplace" && !(arg.kind == graph::Arg::Kind::Constant && arg.constant == Py_False)) return false;
    }
    for (const graph::Arg& arg : node.args) {
      if (arg.kind == graph::Arg::Kind::Constant && arg.constant == Py_True) return false;
    }
    return true;
  };
  // Each an input or new: a new tensor is no other value's object.
  auto known = [&](const ValuePtr& v) { return v->source >= 0 || makes_new_tensor(v); };
  if (a->fake && b->fake && a->fake.get() != b->fake.get() && known(a) && known(b)) return false;
  abort_trace(BreakCode::UnsupportedOperator, "'is' between two tensor values");
}

bool FrameTracer::record_break(TraceAbort& abort) {
  if (abort.code == BreakCode::UnsupportedFrame) return false;
  auto refuse = [&abort](const char* why) {
    abort.detail = std::string("; no graph break is possible here (") + why + "), so the frame runs eagerly";
    return false;
  };
  if (state_.open_with_blocks > 0) return refuse("it is inside a with block");
  if (uses_zero_arg_super(code_)) return refuse("zero-argument super() needs the method's own frame");
  if (snapshot_.pc < in_user_try_.size() && in_user_try_[snapshot_.pc]) {
    // Note [Tracing try blocks]: CPython would run the instruction outside
    // the try, where the handler could not catch what it raises.
    return refuse("it is inside a try block");
  }
  // Note [Changes of new values]
  // CPython runs the instruction again from the state before it, so a
  // change the trace made to a value that existed then (a list of the
  // frame, the caller's dict, a cell) would happen twice, or be lost. A
  // change to a value the instruction itself made cannot be: running it
  // again makes that value anew. Inlined library calls build and fill
  // their own containers all the time (a wrapper's kwargs dict, a config
  // copied field by field, a set deduplicating children), and counting
  // those kept transformers' encoder-decoder models from breaking at all.
  if (state_.changed_older_than(snapshot_.mutations, snapshot_.birth)) {
    return refuse("the instruction already changed state");
  }
  if (snapshot_.pc >= instructions_.size() || !breakable_op(instructions_[snapshot_.pc].op)) {
    return refuse("CPython cannot run this instruction on its own");
  }
  // Inside a loop, each iteration would resume in a new function called
  // from the last one, nesting Python frames as deep as the loop runs: the
  // frame runs eagerly instead (as Dynamo does).
  for (size_t k = snapshot_.pc + 1; k < instructions_.size(); ++k) {
    const int target = instructions_[k].target;
    if (target >= 0 && target <= static_cast<int>(snapshot_.pc)) return refuse("it is inside a loop");
  }
  for (const ValuePtr& value : snapshot_.stack) {
    if (!reconstructible(value, true)) return refuse("a stack value cannot be rebuilt in bytecode");
  }
  for (const ValuePtr& value : snapshot_.locals) {
    if (value && !reconstructible(value, false)) return refuse("a local cannot be rebuilt in bytecode");
  }
  for (auto& [iterator, position] : snapshot_.iterators) iterator->position = position;
  // Stores made inside the instruction happen again when CPython runs it.
  state_.stores.resize(snapshot_.stores);
  for (const auto& store : state_.stores) {
    if (!reconstructible(store.value, false)) return refuse("a stored value cannot be rebuilt in bytecode");
  }
  auto info = std::make_unique<BreakInfo>();
  info->instruction = static_cast<int>(snapshot_.pc);
  info->stores = state_.stores;
  for (const auto& store : info->stores) collect_tensors(store.value, info->outputs);
  info->stack = snapshot_.stack;
  info->locals = snapshot_.locals;
  state_.graph().truncate(snapshot_.graph_size);
  for (const ValuePtr& value : info->stack) collect_tensors(value, info->outputs);
  for (const ValuePtr& value : info->locals) {
    if (value) collect_tensors(value, info->outputs);
  }
  for (size_t j = 0; j < info->locals.size(); ++j) {
    const ValuePtr& value = info->locals[j];
    if (!value || !value->is(ValueKind::Tensor)) continue;
    for (int dim : state_.dynamic_dims_of(value)) info->dynamic_locals.emplace_back(local_name(static_cast<int>(j)), dim);
  }
  state_.break_info() = std::move(info);
  state_.break_code = abort.code;
  state_.break_reason = abort.location + ": " + abort.what();
  returned_ = true;
  return true;
}

void FrameTracer::step(const Instruction& ins) {
  switch (ins.op) {
    case Op::Nop:
    case Op::Resume:
    case Op::CallSetup:
      return;
    case Op::Unsupported:
      abort_trace(BreakCode::UnsupportedOpcode, std::string("opcode ") + ins.raw_name + " is not supported");
    case Op::PopTop:
      pop();
      return;
    case Op::PushNull:
      push(make_null());
      return;
    case Op::Copy:
      push(top(ins.arg));
      return;
    case Op::Swap:
      std::swap(top(1), top(ins.arg));
      return;
    case Op::ReturnValue:
      return_value_ = pop();
      returned_ = true;
      return;
    case Op::ReturnConst:
      return_value_ = state_.wrap_unguarded(const_at(ins.arg).get());
      returned_ = true;
      return;
    case Op::KwNames:
      kwnames_ = const_at(ins.arg);
      return;
    case Op::Call:
    case Op::CallFunctionEx:
      step_call(ins);
      return;
    case Op::LoadFast:
    case Op::LoadFastAndClear:
    case Op::StoreFast:
    case Op::DeleteFast:
    case Op::LoadConst:
    case Op::LoadGlobal:
    case Op::StoreGlobal:
    case Op::LoadDeref:
    case Op::StoreDeref:
    case Op::LoadClosure:
    case Op::MakeCell:
    case Op::CopyFreeVars:
    case Op::LoadAttr:
    case Op::StoreAttr:
    case Op::DeleteAttr:
    case Op::ImportName:
    case Op::ImportFrom:
      step_load_store(ins);
      return;
    case Op::Jump:
    case Op::PopJumpIfFalse:
    case Op::PopJumpIfTrue:
    case Op::PopJumpIfNone:
    case Op::PopJumpIfNotNone:
    case Op::JumpIfFalseOrPop:
    case Op::JumpIfTrueOrPop:
    case Op::GetIter:
    case Op::ForIter:
    case Op::EndFor:
    case Op::GetYieldFromIter:
    case Op::Send:
      step_jump(ins);
      return;
    case Op::UnaryNegative:
    case Op::UnaryPositive:
    case Op::UnaryNot:
    case Op::UnaryInvert: {
      ValuePtr a = pop();
      push(unary_op(ins.op, a));
      return;
    }
    case Op::BinaryOp: {
      ValuePtr b = pop();
      ValuePtr a = pop();
      push(binary_op(ins.arg, a, b));
      return;
    }
    case Op::CompareOp: {
      ValuePtr b = pop();
      ValuePtr a = pop();
      push(compare_op(ins.arg, a, b));
      return;
    }
    case Op::IsOp: {
      ValuePtr b = pop();
      ValuePtr a = pop();
      bool same;
      // Tensors, containers and records are never the same object as an
      // Object-kind value (which wraps everything else); a Tensor's obj is
      // its type, not itself, so it must not reach the obj comparison.
      auto holds_values = [](const ValuePtr& v) {
        return v->is(ValueKind::Tensor) || v->is(ValueKind::Tuple) || v->is(ValueKind::List) ||
               v->is(ValueKind::Dict) || v->is(ValueKind::Record);
      };
      if (a.get() != b.get() && holds_values(a) != holds_values(b) &&
          (a->is(ValueKind::Object) || b->is(ValueKind::Object))) {
        same = false;
      } else if (a->is(ValueKind::Tensor) && b->is(ValueKind::Tensor) && a.get() != b.get()) {
        // Two inputs may be one tensor passed twice, and in-place ops
        // return their argument: identity is known only where Note
        // [Tensor identity] says.
        same = tensors_are_one_object(a, b);
      } else if (a->is(ValueKind::Constant) && b->is(ValueKind::Constant)) {
        same = a->obj.get() == b->obj.get();
      } else if (a->obj && b->obj) {
        // An object guarded by type is never a constant (None, a str...).
        if (!a->is(ValueKind::Constant) && !b->is(ValueKind::Constant)) {
          state_.pin_identity(a, "compared by 'is'");  // Note [Objects guarded by type]
          state_.pin_identity(b, "compared by 'is'");
        }
        same = a->obj.get() == b->obj.get();
      } else if (a.get() == b.get()) {
        same = true;
      } else if (a->is(ValueKind::Constant) || b->is(ValueKind::Constant)) {
        same = false;  // a constant is never the same object as a graph value
      } else {
        abort_trace(BreakCode::UnsupportedOperator, "'is' between " + describe_value(*a) +
                                                        " and " + describe_value(*b));
      }
      push(state_.wrap_unguarded((same != (ins.arg == 1)) ? Py_True : Py_False));
      return;
    }
    case Op::ContainsOp: {
      ValuePtr container = pop();
      ValuePtr item = pop();
      ValuePtr answer = is_environ(container) ? read_environ("__contains__", {item}, {})
                                              : call_python_special(container, "__contains__", {item});
      if (answer) {
        push(state_.wrap_unguarded((truthiness(answer) != (ins.arg == 1)) ? Py_True : Py_False));
        return;
      }
      if (container->contents) container = container->contents;  // a Record's or dict-backed Object's items
      bool found = false;
      if ((container->is(ValueKind::Tuple) || container->is(ValueKind::List)) && item->is(ValueKind::Object)) {
        // x in (A, B): identity, then ==, item by item, as CPython does.
        for (const ValuePtr& element : container->items) {
          if (element->is(ValueKind::Object)) {
            state_.pin_identity(item, "looked up by 'in'");  // Note [Objects guarded by type]
            state_.pin_identity(element, "looked up by 'in'");
          }
          if (element->obj && element->obj.get() == item->obj.get() &&
              (element->is(ValueKind::Object) || element->is(ValueKind::Constant))) {
            found = true;
            break;
          }
          ValuePtr equal = compare_objects(Py_EQ, item, element);
          if (!equal) {
            abort_trace(BreakCode::UnsupportedOperator,
                        "'in' comparing " + describe_value(*item) + " with " + describe_value(*element));
          }
          if (truthiness(equal)) {
            found = true;
            break;
          }
        }
        push(state_.wrap_unguarded((found != (ins.arg == 1)) ? Py_True : Py_False));
        return;
      }
      if (item->is(ValueKind::Tensor) && container->is(ValueKind::Set)) {
        push(state_.wrap_unguarded(set_holds_tensor(container->items, item) != (ins.arg == 1) ? Py_True : Py_False));
        return;
      }
      const bool module_in_set = item->is(ValueKind::Module) && container->is(ValueKind::Set);
      if (!item->is(ValueKind::Constant) && !module_in_set) {
        abort_trace(BreakCode::UnsupportedOperator, "'in' with " + describe_value(*item));
      }
      if (container->is(ValueKind::Dict)) {
        for (const PyRef& key : container->keys) {
          found = found || PyObject_RichCompareBool(key.get(), item->obj.get(), Py_EQ) == 1;
        }
      } else if (container->is(ValueKind::Tuple) || container->is(ValueKind::List)) {
        for (const ValuePtr& element : container->items) {
          found = found || (element->is(ValueKind::Constant) &&
                            PyObject_RichCompareBool(element->obj.get(), item->obj.get(), Py_EQ) == 1);
          if (!element->is(ValueKind::Constant)) {
            abort_trace(BreakCode::UnsupportedOperator, "'in' over non-constant items");
          }
        }
      } else if (container->is(ValueKind::Constant) || container->is(ValueKind::Set)) {
        int r = PySequence_Contains(container->obj.get(), item->obj.get());
        if (r < 0) abort_trace(BreakCode::PythonException, take_python_error());
        found = r == 1;
      } else {
        abort_trace(BreakCode::UnsupportedOperator, "'in' on " + describe_value(*container));
      }
      PyErr_Clear();
      push(state_.wrap_unguarded((found != (ins.arg == 1)) ? Py_True : Py_False));
      return;
    }
    case Op::BinarySubscr: {
      ValuePtr index = pop();
      ValuePtr base = pop();
      push(subscript(base, index));
      return;
    }
    case Op::DeleteSubscr: {
      ValuePtr key = pop();
      ValuePtr container = pop();
      delete_subscript(container, key);
      return;
    }
    case Op::StoreSubscr: {
      ValuePtr key = pop();
      ValuePtr container = pop();
      ValuePtr value = pop();
      store_subscript(container, key, value);
      return;
    }
    case Op::BinarySlice: {
      ValuePtr end = pop();
      ValuePtr start = pop();
      ValuePtr base = pop();
      if (start->is(ValueKind::SymInt) || end->is(ValueKind::SymInt)) {
        push(subscript(base, state_.sym_slice({start, end})));
        return;
      }
      if (!start->is(ValueKind::Constant) || !end->is(ValueKind::Constant)) {
        abort_trace(BreakCode::UnsupportedOperator, "slice bounds must be Python values");
      }
      PyRef slice = PyRef::steal(PySlice_New(start->obj.get(), end->obj.get(), nullptr));
      push(subscript(base, state_.wrap_unguarded(slice.get())));
      return;
    }
    case Op::StoreSlice: {
      ValuePtr end = pop();
      ValuePtr start = pop();
      ValuePtr container = pop();
      ValuePtr value = pop();
      if (!start->is(ValueKind::Constant) || !end->is(ValueKind::Constant)) {
        abort_trace(BreakCode::UnsupportedOperator, "slice bounds must be Python values");
      }
      PyRef slice = PyRef::steal(PySlice_New(start->obj.get(), end->obj.get(), nullptr));
      store_subscript(container, state_.wrap_unguarded(slice.get()), value);
      return;
    }
    case Op::MakeFunction:
      push(make_function(ins));
      return;
    case Op::PushExcInfo:
    case Op::PopExcept:
    case Op::CheckExcMatch:
    case Op::Reraise:
    case Op::RaiseVarargs:
    case Op::WithExceptStart:
      step_exceptions(ins);
      return;
    case Op::BeforeWith:
      before_with();
      return;
    case Op::GetLen:
    case Op::MatchSequence:
    case Op::MatchMapping:
    case Op::MatchKeys:
    case Op::MatchClass:
      step_match(ins);
      return;
    case Op::LoadSuperAttr: {
      ValuePtr receiver = pop();
      ValuePtr cls = pop();
      ValuePtr super_global = pop();
      if (super_global->obj.get() != reinterpret_cast<PyObject*>(&PySuper_Type)) {
        abort_trace(BreakCode::UnsupportedCall, "'super' is rebound to " + describe_value(*super_global));
      }
      ValuePtr attr = super_attr(make_super({cls, receiver}), name_at(ins.arg).get());
      if (ins.flags & cpython::kMethod) push(make_null());
      push(attr);
      return;
    }
    case Op::ReturnGenerator:
    case Op::YieldValue:
      // Generator expressions run to completion; other generators a yield
      // at a time (Note [Generators]).
      if (!yields_ && !generator_) abort_trace(BreakCode::UnsupportedFrame, "a generator frame");
      if (ins.op == Op::YieldValue) {
        if (generator_) {
          yielded_ = pop();
          suspended_ = true;
        } else {
          yields_->push_back(pop());
        }
      }
      push(state_.wrap_unguarded(Py_None));  // what send() passes: next() sends None
      return;
    case Op::BuildSlice: {
      std::vector<ValuePtr> parts = pop_n(ins.arg);
      bool symbolic = false;
      for (const ValuePtr& part : parts) symbolic = symbolic || part->is(ValueKind::SymInt);
      if (symbolic) {
        push(state_.sym_slice(parts));
        return;
      }
      for (const ValuePtr& part : parts) {
        if (!part->is(ValueKind::Constant)) {
          abort_trace(BreakCode::UnsupportedOperator, "slice bounds must be Python values");
        }
      }
      PyRef slice = PyRef::steal(PySlice_New(parts[0]->obj.get(), parts[1]->obj.get(),
                                             ins.arg == 3 ? parts[2]->obj.get() : nullptr));
      push(state_.wrap_unguarded(slice.get()));
      return;
    }
    case Op::BuildTuple:
    case Op::BuildList:
    case Op::BuildSet:
    case Op::SetAdd:
    case Op::SetUpdate:
    case Op::BuildMap:
    case Op::BuildConstKeyMap:
    case Op::BuildString:
    case Op::FormatValue:
    case Op::ListAppend:
    case Op::ListExtend:
    case Op::ListToTuple:
    case Op::DictUpdate:
    case Op::DictMerge:
    case Op::MapAdd:
    case Op::UnpackSequence:
    case Op::UnpackEx:
      step_build(ins);
      return;
    default:
      abort_trace(BreakCode::UnsupportedOpcode,
                  std::string("opcode ") + ins.raw_name + " (" + cpython::op_name(ins.op) +
                      ") is not traced yet");
  }
}

void FrameTracer::step_load_store(const Instruction& ins) {
  switch (ins.op) {
    case Op::LoadFast: {
      const ValuePtr& value = locals_[ins.arg];
      if (!value) {
        abort_trace(BreakCode::UnboundName, "local '" + local_name(ins.arg) + "' is read before assignment");
      }
      push(value);
      return;
    }
    case Op::LoadFastAndClear:
      push(locals_[ins.arg] ? locals_[ins.arg] : make_null());
      locals_[ins.arg] = nullptr;
      return;
    case Op::StoreFast: {
      ValuePtr value = pop();
      locals_[ins.arg] = value->is(ValueKind::Null) ? nullptr : value;
      return;
    }
    case Op::DeleteFast:
      locals_[ins.arg] = nullptr;
      return;
    case Op::LoadConst:
      push(state_.wrap_unguarded(const_at(ins.arg).get()));
      return;
    case Op::LoadGlobal: {
      if (ins.flags & cpython::kPushNull) push(make_null());
      push(load_global(name_at(ins.arg).get()));
      return;
    }
    case Op::StoreGlobal: {
      ValuePtr value = pop();
      store_global(name_at(ins.arg).get(), value);
      return;
    }
    case Op::ImportName: {
      ValuePtr fromlist = pop();
      ValuePtr level = pop();
      push(import_name(name_at(ins.arg).get(), level, fromlist));
      return;
    }
    case Op::ImportFrom:
      push(import_from(top(), name_at(ins.arg).get()));
      return;
    case Op::MakeCell: {
      // A cell is a shared box, so closures created by the trace see later
      // stores (Python's late binding).
      auto cell = std::make_shared<Value>();
      cell->kind = ValueKind::Cell;
      if (locals_[ins.arg]) cell->items.push_back(locals_[ins.arg]);
      locals_[ins.arg] = cell;
      return;
    }
    case Op::CopyFreeVars: {
      const int first = code_->co_nlocalsplus - ins.arg;
      for (int i = 0; i < ins.arg; ++i) {
        if (i < static_cast<int>(closure_.size())) {
          locals_[first + i] = closure_[i];
          continue;
        }
        auto cell = std::make_shared<Value>();
        cell->kind = ValueKind::Cell;
        cell->outer_cell = true;
        if (ValuePtr contents = load_free_var(i)) cell->items.push_back(contents);
        locals_[first + i] = cell;
      }
      return;
    }
    case Op::LoadClosure:
      if (!locals_[ins.arg] || !locals_[ins.arg]->is(ValueKind::Cell)) {
        abort_trace(BreakCode::UnboundName, "closure variable '" + local_name(ins.arg) + "' has no cell");
      }
      push(locals_[ins.arg]);
      return;
    case Op::LoadDeref: {
      const ValuePtr& slot = locals_[ins.arg];
      const bool is_cell = slot && slot->is(ValueKind::Cell);
      if (!slot || (is_cell && slot->items.empty())) {
        abort_trace(BreakCode::UnboundName, "free variable '" + local_name(ins.arg) + "' is unbound");
      }
      push(is_cell ? slot->items[0] : slot);
      return;
    }
    case Op::StoreDeref: {
      ValuePtr& slot = locals_[ins.arg];
      ValuePtr value = pop();
      if (!slot || !slot->is(ValueKind::Cell)) {
        slot = value;
        return;
      }
      if (slot->outer_cell) {
        abort_trace(BreakCode::SideEffect, "assignment to enclosing variable '" + local_name(ins.arg) + "'");
      }
      state_.note_mutation(slot);
      slot->items.assign(1, value);
      return;
    }
    case Op::LoadAttr: {
      ValuePtr base = pop();
      ValuePtr attr = load_attr(base, name_at(ins.arg).get());
      if (ins.flags & cpython::kMethod) push(make_null());
      push(attr);
      return;
    }
    case Op::StoreAttr: {
      ValuePtr target = pop();
      ValuePtr value = pop();
      store_attr(target, name_at(ins.arg).get(), value);
      return;
    }
    case Op::DeleteAttr:
      return delete_attr(pop(), name_at(ins.arg).get());
    default:
      abort_trace(BreakCode::UnsupportedOpcode, std::string("opcode ") + ins.raw_name);
  }
}

void FrameTracer::store_global(PyObject* name, const ValuePtr& value) {
  if (!value->is(ValueKind::Tensor) && !value->is(ValueKind::Constant) && value->source < 0) {
    abort_trace(BreakCode::SideEffect, "assignment of " + describe_value(*value) + " to global '" +
                                           std::string(PyUnicode_AsUTF8(name)) + "'");
  }
  BreakInfo::PendingStore store;
  store.effect.kind = SideEffect::Kind::Global;
  store.effect.name = PyRef::borrow(name);
  store.effect.globals = PyRef::borrow(globals_);
  store.value = value;
  state_.stores.push_back(std::move(store));
}

namespace {

// A value a replayed store can hand over (Note [Side effects]): what the
// graph can return (tensors, constants, sizes, containers and objects the
// trace built of them) or what a source fetches again.
bool storable(const ValuePtr& value) {
  if (value->source >= 0 || value->is(ValueKind::Tensor) || value->is(ValueKind::Constant)) return true;
  if (value->is(ValueKind::SymInt)) return !value->sym_slice;  // an int the graph computes
  switch (value->kind) {
    case ValueKind::Tuple:
    case ValueKind::List:
    case ValueKind::Dict:
      return std::all_of(value->items.begin(), value->items.end(), storable);
    case ValueKind::Record:
      return storable(value->attrs) && (!value->contents || storable(value->contents));
    default:
      return false;
  }
}

}  // namespace

void FrameTracer::store_attr(const ValuePtr& target, PyObject* name, const ValuePtr& value) {
  if (target->is(ValueKind::Record)) return store_record_attr(target, name, value);
  const std::string attr = PyUnicode_AsUTF8(name);
  if (target->is(ValueKind::Tensor)) return store_tensor_attr(target, attr, value);
  if (target->source < 0 || !(target->is(ValueKind::Module) || target->is(ValueKind::Object))) {
    abort_trace(BreakCode::SideEffect, "assignment to attribute '" + attr + "' of " + describe_value(*target));
  }
  if (!storable(value)) {
    abort_trace(BreakCode::SideEffect, "assignment of " + describe_value(*value) + " to attribute '" + attr + "'");
  }
  PyObject* obj = target->obj.get();
  if (target->is(ValueKind::Object) && Py_TYPE(obj)->tp_setattro != PyObject_GenericSetAttr) {
    abort_trace(BreakCode::SideEffect, std::string(Py_TYPE(obj)->tp_name) + " customizes attribute assignment");
  }
  if (target->is(ValueKind::Module)) {
    // nn.Module.__setattr__ registers parameters and submodules and type-
    // checks assignments to them: only plain attributes and buffers are
    // replayed as stores.
    for (const char* table : {"_parameters", "_modules"}) {
      PyRef dict = PyRef::steal(PyObject_GetAttrString(obj, table));
      if (!dict) PyErr_Clear();
      const bool registered = dict && PyDict_Check(dict.get()) && PyDict_GetItemWithError(dict.get(), name);
      PyErr_Clear();
      if (registered) abort_trace(BreakCode::SideEffect, "assignment to the registered " + attr + " of a module");
    }
  }
  BreakInfo::PendingStore store;
  store.effect.kind = SideEffect::Kind::Attr;
  store.effect.target_source = target->source;
  store.effect.name = PyRef::borrow(name);
  store.value = value;
  state_.stores.push_back(std::move(store));
}

void FrameTracer::delete_attr(const ValuePtr& target, PyObject* name) {
  if (target->is(ValueKind::Record)) return delete_record_attr(target, name);
  // Not an object the trace made: its deletion would have to be replayed.
  abort_trace(BreakCode::SideEffect, std::string("deletion of attribute '") + PyUnicode_AsUTF8(name) + "' of " +
                                         describe_value(*target));
}

ValuePtr FrameTracer::load_global(PyObject* name) {
  if (ValuePtr stored = state_.stored_global(globals_, name)) return stored;
  PyObject* builtins = state_.frame().builtins;
  PyObject* value = PyDict_GetItemWithError(globals_, name);
  if (!value && !PyErr_Occurred() && builtins) value = PyDict_GetItemWithError(builtins, name);
  if (!value) {
    PyErr_Clear();
    abort_trace(BreakCode::UnboundName,
                "name '" + std::string(PyUnicode_AsUTF8(name)) + "' is not defined");
  }
  // torch's own modules are assumed fixed, like its namespace.
  PyObject* module_name = PyDict_GetItemString(globals_, "__name__");
  if (module_name && PyUnicode_Check(module_name) &&
      PyUnicode_Tailmatch(module_name, torch_prefix(), 0, 6, -1) == 1) {
    return state_.wrap_unguarded(value);
  }
  // Callees sharing the traced frame's module read globals the same way.
  const int source = globals_ == state_.frame().globals ? state_.sources().global(name)
                                                        : state_.sources().global_in(globals_, name);
  return state_.wrap(value, source);
}

ValuePtr FrameTracer::load_free_var(int index) {
  PyObject* closure = is_top_ ? state_.frame().closure
                              : (func_ ? PyFunction_GET_CLOSURE(func_) : nullptr);
  if (!closure || index >= PyTuple_GET_SIZE(closure)) {
    abort_trace(BreakCode::UnboundName, "closure cell is missing");
  }
  PyObject* contents = PyCell_GET(PyTuple_GET_ITEM(closure, index));
  if (!contents) return nullptr;
  const std::string var = local_name(code_->co_nlocalsplus - code_->co_nfreevars + index);
  if (var == "__class__" && PyType_Check(contents)) {
    // The compiler's cell for zero-argument super(): class creation fills
    // it once with the class that defines this very function, so it is as
    // fixed as the function's code.
    return state_.wrap_unguarded(contents);
  }
  int source = -1;
  if (is_top_) {
    source = state_.sources().closure_cell(index, var);
  } else if (func_source_ >= 0) {
    PyRef closure_name = PyRef::steal(PyUnicode_InternFromString("__closure__"));
    PyRef contents_name = PyRef::steal(PyUnicode_InternFromString("cell_contents"));
    int cells = state_.sources().attr(func_source_, closure_name.get());
    source = state_.sources().attr(state_.sources().index(cells, index), contents_name.get());
  } else {
    abort_trace(BreakCode::UnsupportedValue, "closure of a function kiln cannot re-fetch");
  }
  return state_.wrap(contents, source);
}

void FrameTracer::step_build(const Instruction& ins) {
  switch (ins.op) {
    case Op::BuildTuple:
      push(make_sequence(ValueKind::Tuple, pop_n(ins.arg)));
      return;
    case Op::BuildList:
      push(make_sequence(ValueKind::List, pop_n(ins.arg)));
      return;
    case Op::BuildSet:
      push(make_set(pop_n(ins.arg)));
      return;
    case Op::SetAdd: {
      ValuePtr item = pop();
      set_insert(top(ins.arg), {item});
      return;
    }
    case Op::SetUpdate: {
      ValuePtr items = pop();
      set_insert(top(ins.arg), unpack(items, -1));
      return;
    }
    case Op::BuildMap: {
      std::vector<ValuePtr> parts = pop_n(2 * ins.arg);
      ValuePtr dict = make_sequence(ValueKind::Dict, {});
      for (int i = 0; i < ins.arg; ++i) {
        if (!parts[2 * i]->is(ValueKind::Constant)) {
          abort_trace(BreakCode::UnsupportedValue, "dict keys must be Python constants");
        }
        dict->keys.push_back(parts[2 * i]->obj);
        dict->items.push_back(parts[2 * i + 1]);
      }
      push(dict);
      return;
    }
    case Op::BuildConstKeyMap: {
      ValuePtr keys = pop();
      std::vector<ValuePtr> values = pop_n(ins.arg);
      ValuePtr dict = make_sequence(ValueKind::Dict, std::move(values));
      for (const ValuePtr& key : keys->items) dict->keys.push_back(key->obj);
      push(dict);
      return;
    }
    case Op::ListAppend: {
      ValuePtr item = pop();
      ValuePtr& list = top(ins.arg);
      state_.note_mutation(list);
      list->items.push_back(item);
      return;
    }
    case Op::ListExtend: {
      ValuePtr items = pop();
      ValuePtr& list = top(ins.arg);
      std::vector<ValuePtr> unpacked = unpack(items, -1);
      state_.note_mutation(list);
      list->items.insert(list->items.end(), unpacked.begin(), unpacked.end());
      return;
    }
    case Op::ListToTuple: {
      ValuePtr list = pop();
      push(make_sequence(ValueKind::Tuple, list->items));
      return;
    }
    case Op::DictUpdate:
    case Op::DictMerge: {
      ValuePtr update = pop();
      ValuePtr& dict = top(ins.arg);
      if (!update->is(ValueKind::Dict) || !dict->is(ValueKind::Dict)) {
        abort_trace(BreakCode::UnsupportedValue, "dict update with " + describe_value(*update));
      }
      state_.note_mutation(dict);
      for (size_t i = 0; i < update->items.size(); ++i) {
        dict->keys.push_back(update->keys[i]);
        dict->items.push_back(update->items[i]);
      }
      return;
    }
    case Op::MapAdd: {
      ValuePtr value = pop();
      ValuePtr key = pop();
      ValuePtr& dict = top(ins.arg);
      if (!key->is(ValueKind::Constant)) abort_trace(BreakCode::UnsupportedValue, "dict keys must be constants");
      state_.note_mutation(dict);
      dict->keys.push_back(key->obj);
      dict->items.push_back(value);
      return;
    }
    case Op::UnpackSequence: {
      ValuePtr seq = pop();
      std::vector<ValuePtr> items = unpack(seq, ins.arg);
      for (auto it = items.rbegin(); it != items.rend(); ++it) push(*it);
      return;
    }
    case Op::UnpackEx: {
      const int before = ins.arg & 0xFF;
      const int after = ins.arg >> 8;
      ValuePtr seq = pop();
      std::vector<ValuePtr> items = unpack(seq, -1);
      if (static_cast<int>(items.size()) < before + after) {
        abort_trace(BreakCode::PythonException, "not enough values to unpack");
      }
      std::vector<ValuePtr> middle(items.begin() + before, items.end() - after);
      for (int i = 0; i < after; ++i) push(items[items.size() - 1 - i]);
      push(make_sequence(ValueKind::List, middle));
      for (int i = before - 1; i >= 0; --i) push(items[i]);
      return;
    }
    case Op::FormatValue:
    case Op::BuildString: {
      // Formatting of constants (and tuples and lists of them: an error
      // message naming x.shape) folds; anything else is not traced yet.
      const int count = ins.op == Op::BuildString ? ins.arg : 1 + ((ins.arg & 0x04) ? 1 : 0);
      std::vector<ValuePtr> parts = pop_n(count);
      for (ValuePtr& part : parts) {
        if (part->is(ValueKind::Constant)) continue;
        PyRef folded = part->is(ValueKind::Tuple) || part->is(ValueKind::List) ? constant_to_python(part) : PyRef();
        if (!folded) abort_trace(BreakCode::UnsupportedValue, "formatting of " + describe_value(*part));
        part = make_constant(folded);
      }
      PyRef result;
      if (ins.op == Op::BuildString) {
        PyRef pieces = PyRef::steal(PyTuple_New(count));
        for (int i = 0; i < count; ++i) {
          PyTuple_SET_ITEM(pieces.get(), i, PyRef(parts[i]->obj).release());
        }
        PyRef empty = PyRef::steal(PyUnicode_FromString(""));
        result = PyRef::steal(PyUnicode_Join(empty.get(), pieces.get()));
      } else {
        PyObject* value = parts[0]->obj.get();
        PyRef converted;
        switch (ins.arg & 0x03) {
          case 1: converted = PyRef::steal(PyObject_Str(value)); break;
          case 2: converted = PyRef::steal(PyObject_Repr(value)); break;
          case 3: converted = PyRef::steal(PyObject_ASCII(value)); break;
          default: converted = PyRef::borrow(value); break;
        }
        PyObject* spec = count == 2 ? parts[1]->obj.get() : nullptr;
        result = converted ? PyRef::steal(PyObject_Format(converted.get(), spec)) : PyRef();
      }
      if (!result) abort_trace(BreakCode::PythonException, take_python_error());
      push(state_.wrap_unguarded(result.get()));
      return;
    }
    default:
      abort_trace(BreakCode::UnsupportedOpcode, std::string("opcode ") + ins.raw_name);
  }
}

void FrameTracer::step_jump(const Instruction& ins) {
  auto jump_to = [this](int target) {
    if (target < 0) abort_trace(BreakCode::UnsupportedOpcode, "jump outside the code");
    pc_ = static_cast<size_t>(target);
  };
  switch (ins.op) {
    case Op::Jump:
      jump_to(ins.target);
      return;
    case Op::PopJumpIfFalse:
    case Op::PopJumpIfTrue: {
      ValuePtr cond = pop();
      if (truthiness(cond) == (ins.op == Op::PopJumpIfTrue)) jump_to(ins.target);
      return;
    }
    case Op::PopJumpIfNone:
    case Op::PopJumpIfNotNone: {
      ValuePtr value = pop();
      const bool is_none = value->is(ValueKind::Constant) && value->obj.get() == Py_None;
      if (is_none == (ins.op == Op::PopJumpIfNone)) jump_to(ins.target);
      return;
    }
    case Op::JumpIfFalseOrPop:
    case Op::JumpIfTrueOrPop: {
      if (truthiness(top()) == (ins.op == Op::JumpIfTrueOrPop)) {
        jump_to(ins.target);
      } else {
        pop();
      }
      return;
    }
    case Op::GetIter: {
      ValuePtr iterable = pop();
      // Graph breaks happen in the top frame, where a suspended generator
      // could not be handed to CPython: there it runs to its end first.
      push(get_iter(iterable, /*lazy=*/!is_top_));
      return;
    }
    case Op::GetYieldFromIter: {
      // `yield from` inside a generator the trace runs a step at a time
      // (Note [Generators]): the delegate is consumed as lazily.
      ValuePtr iterable = pop();
      push(iterable->is(ValueKind::Iterator) ? iterable : get_iter(iterable, /*lazy=*/true));
      return;
    }
    case Op::Send: {
      ValuePtr sent = pop();
      if (!sent->is(ValueKind::Constant) || sent->obj.get() != Py_None) {
        abort_trace(BreakCode::UnsupportedOpcode, "send() of a value into a `yield from`");
      }
      ValuePtr& iterator = top();
      if (!iterator->is(ValueKind::Iterator)) {
        abort_trace(BreakCode::UnsupportedValue, "yield from " + describe_value(*iterator));
      }
      const std::shared_ptr<FrameTracer> delegate = iterator->generator;  // next_item drops it at the end
      if (ValuePtr item = next_item(iterator)) {
        push(item);
        return;
      }
      // The delegate's return value (a generator's; None for others).
      ValuePtr returned = delegate ? delegate->returned_value() : nullptr;
      iterator = returned ? returned : state_.wrap_unguarded(Py_None);
      jump_to(ins.target);
      return;
    }
    case Op::ForIter: {
      ValuePtr& iterator = top();
      if (!iterator->is(ValueKind::Iterator)) {
        abort_trace(BreakCode::UnsupportedValue, "iteration over " + describe_value(*iterator));
      }
      if (ValuePtr item = next_item(iterator)) {
        push(item);
        return;
      }
      pop();
      jump_to(ins.target);
      // An exhausted loop resumes after END_FOR where the version has one.
      if (pc_ < instructions_.size() && instructions_[pc_].op == Op::EndFor) ++pc_;
      return;
    }
    case Op::EndFor:
      pop();
      pop();
      return;
    default:
      abort_trace(BreakCode::UnsupportedOpcode, std::string("opcode ") + ins.raw_name);
  }
}

}  // namespace kiln::tracer
