#include "tracer/break_codegen.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "cpython/bytecode_builder.h"
#include "cpython/bytecode_decoder.h"
#include "base/dict_order.h"
#include "tracer/trace_state.h"

namespace kiln::tracer {
namespace {

using cpython::BytecodeBuilder;
using cpython::CodeLayout;
using cpython::Instruction;
using cpython::Op;
using base::PyRef;

// Thrown inside this file when the state cannot be expressed in bytecode.
struct CodegenError {
  std::string message;
};

[[noreturn]] void fail(const std::string& message) { throw CodegenError{message}; }

// How many values instruction `ins` reads from the stack and leaves there,
// on its fall-through and jump edges (normalized ops, so version-neutral).
struct StackIO {
  int pops = 0;
  int pushes = 0;       // fall-through
  int jump_pushes = 0;  // to ins.target
};

StackIO stack_io(const Instruction& ins) {
  switch (ins.op) {
    case Op::Call: return {ins.arg + 2, 1, 0};
    case Op::CallFunctionEx: return {3 + (ins.arg & 1), 1, 0};
    case Op::PopJumpIfFalse:
    case Op::PopJumpIfTrue:
    case Op::PopJumpIfNone:
    case Op::PopJumpIfNotNone: return {1, 0, 0};
    case Op::BinaryOp:
    case Op::CompareOp:
    case Op::IsOp:
    case Op::ContainsOp:
    case Op::BinarySubscr: return {2, 1, 0};
    case Op::UnaryNegative:
    case Op::UnaryPositive:
    case Op::UnaryNot:
    case Op::UnaryInvert:
    case Op::GetIter: return {1, 1, 0};
    case Op::StoreSubscr: return {3, 0, 0};
    case Op::StoreAttr: return {2, 0, 0};
    case Op::StoreGlobal: return {1, 0, 0};
    case Op::ImportName: return {2, 1, 0};
    case Op::ImportFrom: return {1, 2, 0};
    case Op::LoadAttr:
      if (ins.flags & cpython::kMethod) fail("a method load cannot be a break point");
      return {1, 1, 0};
    case Op::LoadGlobal:
      if (ins.flags & cpython::kPushNull) fail("a global load pushing NULL cannot be a break point");
      return {0, 1, 0};
    case Op::FormatValue: return {1 + ((ins.arg & 0x04) ? 1 : 0), 1, 0};
    case Op::BuildString: return {ins.arg, 1, 0};
    case Op::UnpackSequence: return {1, ins.arg, 0};
    default: fail(std::string("no graph break at ") + ins.raw_name);
  }
}

bool has_jump_edge(const Instruction& ins) {
  return ins.op == Op::PopJumpIfFalse || ins.op == Op::PopJumpIfTrue ||
         ins.op == Op::PopJumpIfNone || ins.op == Op::PopJumpIfNotNone;
}

// What one stack slot at a successor holds.
enum class SlotKind { Value, Null, Iterator };

// Emits bytecode that rebuilds symbolic values in the transformed code.
class ValueEmitter {
 public:
  // `slot_of` maps the original code's localsplus indices to the
  // transformed code's; `is_cell` says which of those hold cells.
  ValueEmitter(BytecodeBuilder& b, const guards::SourceTable& sources, int out_slot,
               const std::vector<int>& outputs, const std::vector<int>& slot_of,
               const std::vector<bool>& is_cell, int first_free)
      : b_(b), sources_(sources), out_slot_(out_slot), outputs_(outputs), slot_of_(slot_of),
        is_cell_(is_cell), first_free_(first_free) {}

  // Remembers that `value` now lives in local `slot`: later uses load it,
  // which keeps mutable containers shared as they were.
  void memo(const ValuePtr& value, int slot) { memo_[value.get()] = slot; }
  // Remembers that the cell `cell` is the transformed code's cell `slot`.
  void cell_at(const ValuePtr& cell, int slot) { cells_[cell.get()] = slot; }

  void emit_source(int id) {
    const guards::Source& source = sources_.at(id);
    switch (source.kind) {
      case guards::SourceKind::Local: {
        // An argument captured by a closure lives in a cell after MAKE_CELL.
        const int slot = slot_of_.at(source.index);
        if (is_cell_.at(source.index)) {
          b_.load_deref(slot);
        } else {
          b_.load_fast(slot);
        }
        return;
      }
      case guards::SourceKind::Global: b_.load_global(source.name, false); return;
      case guards::SourceKind::GlobalIn: {
        PyObject* value = PyDict_GetItemWithError(source.dict, source.name);
        if (!value) {
          PyErr_Clear();
          fail("global " + source.text + " is not in its module");
        }
        b_.load_const(source.dict);
        b_.load_const(source.name);
        b_.emit("BINARY_SUBSCR");
        return;
      }
      case guards::SourceKind::ClosureCell: b_.load_deref(first_free_ + source.index); return;
      case guards::SourceKind::Attr:
        emit_source(source.base);
        b_.load_attr(source.name);
        return;
      case guards::SourceKind::GenericAttr: {
        static PyObject* generic = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyBaseObject_Type),
                                                          "__getattribute__");  // kept for the process
        if (!generic) fail("object.__getattribute__ is missing");
        b_.push_null();
        b_.load_const(generic);
        emit_source(source.base);
        b_.load_const(source.name);
        b_.call(2);
        return;
      }
      case guards::SourceKind::DictItem:
        emit_source(source.base);
        b_.load_const(source.name);
        b_.emit("BINARY_SUBSCR");
        return;
      case guards::SourceKind::Index: {
        emit_source(source.base);
        PyRef index = PyRef::steal(PyLong_FromLong(source.index));
        b_.load_const(index.get());
        b_.emit("BINARY_SUBSCR");
        return;
      }
    }
  }

  // Pushes a new list or dict holding `container`'s items (not the object
  // its source names).
  void emit_contents(const ValuePtr& container) {
    for (size_t i = 0; i < container->items.size(); ++i) {
      if (container->is(ValueKind::Dict)) b_.load_const(container->keys[i].get());
      emit(container->items[i]);
    }
    if (container->is(ValueKind::Dict)) {
      b_.build_map(static_cast<int>(container->items.size()));
    } else {
      b_.build_list(static_cast<int>(container->items.size()));
    }
  }

  // Pushes `value`. An iterator is pushed as the tuple of what it has left
  // (and made an iterator again unless `iterator_as_tuple`).
  void emit(const ValuePtr& value, bool iterator_as_tuple = false) {
    auto found = memo_.find(value.get());
    if (found != memo_.end()) {
      b_.load_fast(found->second);
      return;
    }
    if (value->source >= 0 && !value->is(ValueKind::Null)) {
      emit_source(value->source);
      return;
    }
    switch (value->kind) {
      case ValueKind::Null: b_.push_null(); return;
      case ValueKind::Tensor: {
        auto at = std::find(outputs_.begin(), outputs_.end(), value->node);
        if (at == outputs_.end()) fail("a tensor the graph does not return");
        PyRef index = PyRef::steal(PyLong_FromLong(static_cast<long>(at - outputs_.begin())));
        b_.load_fast(out_slot_);
        b_.load_const(index.get());
        b_.emit("BINARY_SUBSCR");
        return;
      }
      case ValueKind::Constant: b_.load_const(value->obj.get()); return;
      case ValueKind::Tuple:
      case ValueKind::List:
        if (value->obj) {
          b_.load_const(value->obj.get());  // torch.Size
          return;
        }
        if (value->tuple_type) {
          // A namedtuple or structseq: its type rebuilds it from the items.
          PyRef rebuild = namedtuple_rebuilder(value->tuple_type.get());
          b_.push_null();
          b_.load_const(rebuild.get());
          for (const ValuePtr& item : value->items) emit(item);
          b_.build_tuple(static_cast<int>(value->items.size()));
          b_.call(1);
          return;
        }
        for (const ValuePtr& item : value->items) emit(item);
        if (value->is(ValueKind::Tuple)) {
          b_.build_tuple(static_cast<int>(value->items.size()));
        } else {
          b_.build_list(static_cast<int>(value->items.size()));
        }
        return;
      case ValueKind::Dict: {
        // An OrderedDict is made from the plain dict of its items.
        // A defaultdict from its factory and that dict.
        if (value->tuple_type) {
          b_.push_null();
          b_.load_const(value->tuple_type.get());
        }
        const bool with_factory = value->tuple_type.get() == base::defaultdict_type();
        if (with_factory) b_.load_const(value->self ? value->self->obj.get() : Py_None);
        for (size_t i = 0; i < value->items.size(); ++i) {
          b_.load_const(value->keys[i].get());
          emit(value->items[i]);
        }
        b_.build_map(static_cast<int>(value->items.size()));
        if (value->tuple_type) b_.call(with_factory ? 2 : 1);
        return;
      }
      case ValueKind::Iterator:
        for (size_t i = value->position; i < value->items.size(); ++i) emit(value->items[i]);
        b_.build_tuple(static_cast<int>(value->items.size() - value->position));
        if (!iterator_as_tuple) b_.get_iter();
        return;
      case ValueKind::ContainerMethod:
        if (value->self->is(ValueKind::Record)) {
          // types.MethodType(descriptor, obj): the very method found (a
          // super() one too), bound to the rebuilt object.
          static PyObject* method_type = reinterpret_cast<PyObject*>(&PyMethod_Type);
          b_.push_null();
          b_.load_const(method_type);
          b_.load_const(value->obj.get());
          emit(value->self);
          b_.call(2);
          return;
        }
        [[fallthrough]];
      case ValueKind::TensorMethod: {
        emit(value->self);
        PyRef name = PyRef::steal(PyUnicode_FromString(value->name.c_str()));
        b_.load_attr(name.get());
        return;
      }
      case ValueKind::Method: {
        if (!value->self) break;
        emit(value->self);
        PyRef name = PyRef::steal(PyObject_GetAttrString(value->obj.get(), "__name__"));
        if (!name) {
          PyErr_Clear();
          break;
        }
        b_.load_attr(name.get());
        return;
      }
      case ValueKind::Record: {
        // rebuild_object(cls, attrs, contents) (Note [User objects]).
        auto emit_dict = [&](const ValuePtr& dict) {
          for (size_t i = 0; i < dict->items.size(); ++i) {
            b_.load_const(dict->keys[i].get());
            emit(dict->items[i]);
          }
          b_.build_map(static_cast<int>(dict->items.size()));
        };
        b_.push_null();
        b_.load_const(record_rebuilder());
        b_.load_const(value->tuple_type.get());
        emit_dict(value->attrs);
        if (value->contents) {
          emit_dict(value->contents);
        } else {
          b_.load_const(Py_None);
        }
        b_.call(3);
        return;
      }
      case ValueKind::StdObject:
        b_.push_null();
        b_.load_const(value->obj.get());
        emit(value->items[0]);
        emit(value->items[1]);
        b_.call_function_ex(true);
        return;
      case ValueKind::LocalFunction: {
        // MAKE_FUNCTION again, over the frame's own cells.
        int flags = 0;
        if (value->defaults) {
          emit(value->defaults);
          flags |= 0x01;
        }
        if (value->kwdefaults) {
          emit(value->kwdefaults);
          flags |= 0x02;
        }
        if (!value->items.empty()) {
          for (const ValuePtr& cell : value->items) {
            auto slot = cells_.find(cell.get());
            if (slot == cells_.end()) fail("a closure over cells of another frame");
            b_.load_closure(slot->second);
          }
          b_.build_tuple(static_cast<int>(value->items.size()));
          flags |= 0x08;
        }
        b_.load_const(value->obj.get());
        b_.make_function(flags);
        return;
      }
      case ValueKind::Module:
      case ValueKind::Function:
      case ValueKind::TorchCallable:
      case ValueKind::Builtin:
      case ValueKind::PyModule:
      case ValueKind::Object:
        if (value->obj) {
          b_.load_const(value->obj.get());
          return;
        }
        break;
      default:
        break;
    }
    fail("cannot rebuild " + describe_value(*value) + " in bytecode");
  }

 private:
  BytecodeBuilder& b_;
  const guards::SourceTable& sources_;
  int out_slot_;
  const std::vector<int>& outputs_;
  const std::vector<int>& slot_of_;
  const std::vector<bool>& is_cell_;
  int first_free_;
  std::unordered_map<const Value*, int> memo_;
  std::unordered_map<const Value*, int> cells_;
};

bool has_cell(uint8_t kind) { return kind & cpython::kFastCell; }
bool is_free(uint8_t kind) { return kind & cpython::kFastFree; }
// A slot the frame's locals vector holds as a plain value (not a cell).
bool plain_local(uint8_t kind) { return !has_cell(kind) && !is_free(kind); }

std::string code_name(PyCodeObject* code) {
  const char* name = PyUnicode_AsUTF8(code->co_name);
  return name ? name : "fn";
}

// The stack at successor `target` after the break: the untouched part
// (below the break instruction's operands) then what the instruction left.
struct Successor {
  int target = -1;
  std::vector<SlotKind> slots;  // bottom first, the full stack of the original code
  int passed = 0;               // values passed to the resume function (slots minus NULLs)
};

// The localsplus indices of `layout` whose cells a resume function takes as
// its closure: cell variables first, then free variables, in slot order.
std::vector<int> closure_order(const CodeLayout& layout) {
  std::vector<int> order;
  for (size_t j = 0; j < layout.kinds.size(); ++j) {
    if (has_cell(layout.kinds[j])) order.push_back(static_cast<int>(j));
  }
  for (size_t j = 0; j < layout.kinds.size(); ++j) {
    if (is_free(layout.kinds[j])) order.push_back(static_cast<int>(j));
  }
  return order;
}

// Builds R_s: see Note [Graph breaks].
PyObject* build_resume_code(PyCodeObject* code, const std::vector<Instruction>& instructions,
                            const Successor& successor, const std::vector<int>& bound_locals,
                            int body_from) {
  const CodeLayout original = cpython::layout_of(code);
  CodeLayout layout;
  layout.flags = original.flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  // A resume function can break again: its own stack arguments are among
  // `original`'s names, so pick a prefix none of them uses.
  std::string prefix = "__kiln_stack_";
  for (int n = 1; original.index_of(prefix + "0") >= 0; ++n) {
    prefix = "__kiln_stack" + std::to_string(n) + "_";
  }
  for (int k = 0; k < successor.passed; ++k) layout.add(prefix + std::to_string(k), cpython::kFastLocal);
  std::vector<int> local_map(original.names.size(), -1);
  for (int j : bound_locals) local_map[j] = layout.add(original.names[j], cpython::kFastLocal);
  layout.argcount = static_cast<int>(layout.names.size());
  for (size_t j = 0; j < original.names.size(); ++j) {
    if (local_map[j] < 0 && plain_local(original.kinds[j])) {
      local_map[j] = layout.add(original.names[j], cpython::kFastLocal);
    }
  }
  // The frame's cells (its own, then its free variables) come in as this
  // function's closure: see closure_order().
  int free_vars = 0;
  for (int j : closure_order(original)) {
    local_map[j] = layout.add(original.names[j], cpython::kFastFree);
    ++free_vars;
  }
  BytecodeBuilder b(code);
  b.check_unbound_locals(true);
  b.set_line(instructions[successor.target].line);
  if (free_vars > 0) b.copy_free_vars(free_vars);
  b.resume();
  int arg = 0;
  for (SlotKind slot : successor.slots) {
    if (slot == SlotKind::Null) {
      b.push_null();
      continue;
    }
    b.load_fast(arg++);
    if (slot == SlotKind::Iterator) b.get_iter();
  }
  const int entry = b.new_label();
  b.emit_jump("JUMP", entry);
  std::string error;
  std::vector<int> labels;
  auto no_outside = [](int) { return -1; };
  if (!b.copy_from(code, body_from, static_cast<int>(instructions.size()), local_map, no_outside,
                   &error, &labels)) {
    fail("copying the code to resume: " + error);
  }
  b.bind_at(entry, labels.at(successor.target - body_from));
  const std::string name = "__resume_at_" + std::to_string(successor.target) + "_" + code_name(code);
  PyObject* built = b.build(layout, name.c_str());
  if (!built) fail("building " + name + ": " + take_python_error());
  return built;
}

}  // namespace

PyObject* build_break_code(PyCodeObject* code, const BreakInfo& info,
                           const guards::SourceTable& sources, const graph::Graph& graph,
                           PyObject* graph_callable, std::string* error) {
  try {
    const std::vector<Instruction> instructions = cpython::decode_bytecode(code);
    const int i = info.instruction;
    if (i < 0 || i >= static_cast<int>(instructions.size())) fail("break point out of range");
    const Instruction& ins = instructions[i];
    const StackIO io = stack_io(ins);
    const int depth = static_cast<int>(info.stack.size());
    if (io.pops > depth) fail("the break instruction reads below the traced stack");
    const int untouched = depth - io.pops;

    // The body starts after RESUME (and, before it, MAKE_CELL and
    // COPY_FREE_VARS, which the generated codes emit themselves).
    int body_from = 0;
    while (body_from < static_cast<int>(instructions.size()) && instructions[body_from].op != Op::Resume) {
      ++body_from;
    }
    if (body_from >= static_cast<int>(instructions.size())) fail("code without RESUME");
    ++body_from;

    // The break instruction with the instructions that set it up.
    int first = i;
    while (first > body_from &&
           (instructions[first - 1].op == Op::KwNames || instructions[first - 1].op == Op::CallSetup)) {
      --first;
    }

    // Successors and their stacks.
    std::vector<Successor> successors;
    auto make_successor = [&](int target, int pushed) {
      Successor s;
      s.target = target;
      for (int p = 0; p < untouched; ++p) {
        const ValuePtr& value = info.stack[p];
        s.slots.push_back(value->is(ValueKind::Null)       ? SlotKind::Null
                          : value->is(ValueKind::Iterator) ? SlotKind::Iterator
                                                           : SlotKind::Value);
      }
      for (int p = 0; p < pushed; ++p) s.slots.push_back(SlotKind::Value);
      for (SlotKind slot : s.slots) s.passed += slot != SlotKind::Null;
      return s;
    };
    successors.push_back(make_successor(i + 1, io.pushes));
    if (has_jump_edge(ins)) {
      if (ins.target < 0) fail("jump outside the code");
      successors.push_back(make_successor(ins.target, io.jump_pushes));
    }

    const CodeLayout original = cpython::layout_of(code);
    // Plain locals bound at the break go to the resume function as
    // arguments; cells travel as its closure.
    std::vector<int> bound_locals;
    for (size_t j = 0; j < info.locals.size(); ++j) {
      if (info.locals[j] && plain_local(original.kinds[j])) bound_locals.push_back(static_cast<int>(j));
    }

    // The transformed code's layout: the frame's argument slots become plain
    // positional parameters; temporaries go after the original locals and
    // before the cells, as CPython's slot order requires.
    CodeLayout layout;
    layout.argcount = code->co_argcount + code->co_kwonlyargcount +
                      ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                      ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
    layout.flags = original.flags & ~(CO_VARARGS | CO_VARKEYWORDS);
    std::vector<int> slot_of(original.names.size(), -1);
    std::vector<bool> is_cell(original.names.size(), false);
    for (size_t j = 0; j < original.names.size(); ++j) {
      is_cell[j] = has_cell(original.kinds[j]) || is_free(original.kinds[j]);
      if (original.kinds[j] & cpython::kFastLocal) {
        slot_of[j] = layout.add(original.names[j], original.kinds[j]);
      }
    }
    const int out_slot = layout.add("__kiln_graph_out", cpython::kFastLocal);
    const int stack_slot = layout.add("__kiln_stack", cpython::kFastLocal);
    std::vector<int> store_temps;
    for (size_t k = 0; k < info.stores.size(); ++k) {
      store_temps.push_back(layout.add("__kiln_store_" + std::to_string(k), cpython::kFastLocal));
    }
    std::vector<int> temp_of(original.names.size(), -1);
    for (int j : bound_locals) {
      temp_of[j] = layout.add("__kiln_local_" + std::to_string(j), cpython::kFastLocal);
    }
    // The frame's own cells whose contents the trace knows (free variables
    // are the caller's cells: the trace never writes them).
    std::vector<int> cell_temp(original.names.size(), -1);
    for (size_t j = 0; j < info.locals.size(); ++j) {
      const ValuePtr& cell = info.locals[j];
      if (has_cell(original.kinds[j]) && cell && cell->is(ValueKind::Cell) && !cell->items.empty()) {
        cell_temp[j] = layout.add("__kiln_cell_" + std::to_string(j), cpython::kFastLocal);
      }
    }
    int first_free = -1;
    for (size_t j = 0; j < original.names.size(); ++j) {
      if (original.kinds[j] == cpython::kFastCell) slot_of[j] = layout.add(original.names[j], original.kinds[j]);
    }
    int free_vars = 0;
    for (size_t j = 0; j < original.names.size(); ++j) {
      if (is_free(original.kinds[j])) {
        slot_of[j] = layout.add(original.names[j], original.kinds[j]);
        if (first_free < 0) first_free = slot_of[j];
        ++free_vars;
      }
    }

    BytecodeBuilder b(code);
    b.set_line(ins.line);
    for (size_t j = 0; j < original.names.size(); ++j) {
      if (has_cell(original.kinds[j])) b.make_cell(slot_of[j]);
    }
    if (free_vars > 0) b.copy_free_vars(free_vars);
    b.resume();
    // 1. The graph (unless it computes nothing the rest needs).
    ValueEmitter emitter(b, sources, out_slot, info.outputs, slot_of, is_cell, first_free);
    const bool run_graph = graph.call_count() > 0 || !info.outputs.empty();
    for (size_t j = 0; j < info.locals.size(); ++j) {
      if (info.locals[j] && info.locals[j]->is(ValueKind::Cell) && slot_of[j] >= 0) {
        emitter.cell_at(info.locals[j], slot_of[j]);
      }
    }
    if (run_graph) {
      b.push_null();
      b.load_const(graph_callable);
      for (int input : graph.inputs()) emitter.emit_source(graph.node(input).input_source);
      b.call(static_cast<int>(graph.inputs().size()));
      b.store_fast(out_slot);
    }
    // 2. Bound locals into temporaries (unless unchanged arguments), then
    //    the stack.
    std::vector<int> local_slots(info.locals.size(), -1);
    for (int j : bound_locals) {
      const ValuePtr& value = info.locals[j];
      if (value->source >= 0 && sources.at(value->source).kind == guards::SourceKind::Local &&
          sources.at(value->source).index == j) {
        local_slots[j] = slot_of[j];
        continue;
      }
      emitter.emit(value);
      local_slots[j] = temp_of[j];
      b.store_fast(local_slots[j]);
      emitter.memo(value, local_slots[j]);
    }
    // Cell contents into temporaries: like every value rebuilt here, they
    // are read before anything is written (a cell argument's source reads
    // the cell, which the store-back below changes).
    for (size_t j = 0; j < info.locals.size(); ++j) {
      if (cell_temp[j] < 0) continue;
      emitter.emit(info.locals[j]->items[0]);
      b.store_fast(cell_temp[j]);
      // Later uses (a method of it on the stack, a closure) get this object.
      emitter.memo(info.locals[j]->items[0], cell_temp[j]);
    }
    // The values the stores write, into temporaries: everything the
    // transformed code rebuilds reads the state as the frame entered it,
    // so no store may happen before all of it is read.
    std::vector<int> store_slots;
    for (size_t k = 0; k < info.stores.size(); ++k) {
      const auto& store = info.stores[k];
      const bool contents = store.effect.kind == SideEffect::Kind::ListContents ||
                            store.effect.kind == SideEffect::Kind::DictContents;
      if (contents) {
        emitter.emit_contents(store.value);
      } else {
        emitter.emit(store.value);
      }
      store_slots.push_back(store_temps[k]);
      b.store_fast(store_slots.back());
      if (!contents) emitter.memo(store.value, store_slots.back());
    }
    for (int p = 0; p < depth; ++p) {
      const ValuePtr& value = info.stack[p];
      if (p < untouched && value->is(ValueKind::Null)) continue;  // restored by the resume code
      emitter.emit(value, /*iterator_as_tuple=*/p < untouched);
    }
    // Writes, now that everything is read: the cells' contents, then the
    // stores traced before the break, in program order (Note [Side
    // effects]), from the temporaries.
    for (size_t j = 0; j < info.locals.size(); ++j) {
      if (cell_temp[j] < 0) continue;
      b.load_fast(cell_temp[j]);
      b.store_deref(slot_of[j]);
    }
    for (size_t k = 0; k < info.stores.size(); ++k) {
      const auto& store = info.stores[k];
      switch (store.effect.kind) {
        case SideEffect::Kind::Attr:
          b.load_fast(store_slots[k]);
          emitter.emit_source(store.effect.target_source);
          b.emit("STORE_ATTR", b.add_name(store.effect.name.get()));
          break;
        case SideEffect::Kind::Global:
          b.load_fast(store_slots[k]);
          b.load_const(store.effect.globals.get());
          b.load_const(store.effect.name.get());
          b.emit("STORE_SUBSCR");
          break;
        case SideEffect::Kind::ListContents: {
          // target[:] = new items
          b.load_fast(store_slots[k]);
          emitter.emit_source(store.effect.target_source);
          PyRef all = PyRef::steal(PySlice_New(nullptr, nullptr, nullptr));
          b.load_const(all.get());
          b.emit("STORE_SUBSCR");
          break;
        }
        case SideEffect::Kind::Call:
          // callee(*args) (Note [Deferred logging])
          b.push_null();
          b.load_const(store.effect.callee.get());
          b.load_fast(store_slots[k]);
          b.call_function_ex(false);
          b.pop_top();
          break;
        case SideEffect::Kind::DictContents: {
          // target.clear(); target.update(new items)
          PyRef clear = PyRef::steal(PyUnicode_InternFromString("clear"));
          PyRef update = PyRef::steal(PyUnicode_InternFromString("update"));
          emitter.emit_source(store.effect.target_source);
          b.load_method(clear.get());
          b.call(0);
          b.pop_top();
          emitter.emit_source(store.effect.target_source);
          b.load_method(update.get());
          b.load_fast(store_slots[k]);
          b.call(1);
          b.pop_top();
          break;
        }
      }
    }
    // 3. The instruction CPython runs.
    std::vector<int> successor_labels;
    for (size_t k = 0; k < successors.size(); ++k) successor_labels.push_back(b.new_label());
    const std::vector<int>& identity = slot_of;
    auto outside = [&](int target) {
      for (size_t k = 0; k < successors.size(); ++k) {
        if (successors[k].target == target) return successor_labels[k];
      }
      return -1;
    };
    std::string copy_error;
    if (!b.copy_from(code, first, i + 1, identity, outside, &copy_error)) {
      fail("copying the break instruction: " + copy_error);
    }
    // 4. The resume calls.
    PyRef empty = PyRef::steal(PyTuple_New(0));
    for (size_t k = 0; k < successors.size(); ++k) {
      const Successor& successor = successors[k];
      b.bind(successor_labels[k]);
      PyRef resume = PyRef::steal(build_resume_code(code, instructions, successor, bound_locals, body_from));
      b.build_tuple(successor.passed);
      b.store_fast(stack_slot);
      b.push_null();
      const std::vector<int> closure = closure_order(original);
      for (int j : closure) b.load_closure(slot_of[j]);
      if (!closure.empty()) b.build_tuple(static_cast<int>(closure.size()));
      b.load_const(resume.get());
      b.make_function(closure.empty() ? 0 : 0x08);
      b.load_fast(stack_slot);
      for (int j : bound_locals) b.load_fast(local_slots[j]);
      b.build_tuple(static_cast<int>(bound_locals.size()));
      b.binary_op(0 /* NB_ADD */);
      b.call_function_ex(false);
      b.return_value();
    }
    const std::string name = code_name(code);
    PyObject* built = b.build(layout, name.c_str(), PyUnicode_AsUTF8(code->co_qualname));
    if (!built) fail("building the transformed code: " + take_python_error());
    return built;
  } catch (const CodegenError& e) {
    *error = e.message;
    PyErr_Clear();
    return nullptr;
  }
}

}  // namespace kiln::tracer
