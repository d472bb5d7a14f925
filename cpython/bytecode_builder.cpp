// The bytecode assembler; see Note [Bytecode builder].
#include "cpython/bytecode_builder.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "cpython/assembly_traits.h"
#include "cpython/bytecode_decoder.h"
#include "cpython/exception_table.h"

namespace kiln::cpython {

using base::PyRef;

namespace {

// Number of EXTENDED_ARG prefixes oparg needs.
int prefixes_for(int arg) {
  if (arg < 0) arg = 0;
  if (arg <= 0xff) return 0;
  if (arg <= 0xffff) return 1;
  if (arg <= 0xffffff) return 2;
  return 3;
}

// The pending Python error as text (cleared), for error messages.
std::string take_python_error() {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = "unknown Python error";
  if (value != nullptr) {
    PyRef str = PyRef::steal(PyObject_Str(value));
    const char* utf8 = str ? PyUnicode_AsUTF8(str.get()) : nullptr;
    if (utf8 != nullptr) text = utf8;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return text;
}

PopJumpCondition inverse(PopJumpCondition c) {
  switch (c) {
    case PopJumpCondition::False:
      return PopJumpCondition::True;
    case PopJumpCondition::True:
      return PopJumpCondition::False;
    case PopJumpCondition::None:
      return PopJumpCondition::NotNone;
    case PopJumpCondition::NotNone:
      return PopJumpCondition::None;
  }
  return c;
}

// co_positions() of code, one SourcePosition per code unit.
bool code_positions(PyCodeObject* code, std::vector<SourcePosition>* out) {
  PyRef iterable = PyRef::steal(PyObject_CallMethod(
      reinterpret_cast<PyObject*>(code), "co_positions", nullptr));
  if (!iterable) return false;
  PyRef iterator = PyRef::steal(PyObject_GetIter(iterable.get()));
  if (!iterator) return false;
  while (PyRef item = PyRef::steal(PyIter_Next(iterator.get()))) {
    int fields[4] = {-1, -1, -1, -1};
    for (int k = 0; k < 4 && k < PyTuple_Size(item.get()); ++k) {
      PyObject* field = PyTuple_GET_ITEM(item.get(), k);
      if (field != Py_None) fields[k] = static_cast<int>(PyLong_AsLong(field));
    }
    out->push_back({fields[0], fields[1], fields[2], fields[3]});
  }
  return !PyErr_Occurred();
}

}  // namespace

// ---------------------------------------------------------------------------
// CodeLayout

int CodeLayout::add(const std::string& name, uint8_t kind) {
  names.push_back(name);
  kinds.push_back(kind);
  return static_cast<int>(names.size()) - 1;
}

int CodeLayout::index_of(const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  return -1;
}

int CodeLayout::free_count() const {
  return static_cast<int>(
      std::count_if(kinds.begin(), kinds.end(),
                    [](uint8_t kind) { return (kind & kFastFree) != 0; }));
}

CodeLayout layout_of(PyCodeObject* code) {
  CodeLayout layout;
  PyObject* object = reinterpret_cast<PyObject*>(code);
  const auto int_attr = [&](const char* name) {
    PyRef value = PyRef::steal(PyObject_GetAttrString(object, name));
    const long result = value ? PyLong_AsLong(value.get()) : 0;
    PyErr_Clear();
    return static_cast<int>(result);
  };
  layout.argcount = int_attr("co_argcount");
  layout.posonlyargcount = int_attr("co_posonlyargcount");
  layout.kwonlyargcount = int_attr("co_kwonlyargcount");
  layout.flags = int_attr("co_flags");
  // CPython numbers co_varnames, then co_cellvars not already in
  // co_varnames (those are local and cell at once), then co_freevars.
  PyRef varnames = PyRef::steal(PyCode_GetVarnames(code));
  PyRef cellvars = PyRef::steal(PyCode_GetCellvars(code));
  PyRef freevars = PyRef::steal(PyCode_GetFreevars(code));
  if (!varnames || !cellvars || !freevars) {
    PyErr_Clear();
    return layout;
  }
  const auto utf8 = [](PyObject* name) {
    const char* text = PyUnicode_AsUTF8(name);
    if (text == nullptr) PyErr_Clear();
    return std::string(text != nullptr ? text : "");
  };
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(varnames.get()); ++i)
    layout.add(utf8(PyTuple_GET_ITEM(varnames.get(), i)), kFastLocal);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cellvars.get()); ++i) {
    const std::string name = utf8(PyTuple_GET_ITEM(cellvars.get(), i));
    const int existing = layout.index_of(name);
    if (existing >= 0)
      layout.kinds[static_cast<size_t>(existing)] |= kFastCell;
    else
      layout.add(name, kFastCell);
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(freevars.get()); ++i)
    layout.add(utf8(PyTuple_GET_ITEM(freevars.get(), i)), kFastFree);
  return layout;
}

// ---------------------------------------------------------------------------
// Emission

struct BytecodeBuilder::Real {
  int opcode = 0;
  int arg = 0;          // final oparg (jumps: computed by assemble)
  int target = -1;      // real index of the jump target, or -1
  int owner = -1;       // logical instruction it came from; -1: trampoline
  int prefixes = 0;     // EXTENDED_ARG count
  SourcePosition position;
};

BytecodeBuilder::BytecodeBuilder(PyCodeObject* like)
    : BytecodeBuilder(like, running_opcode_table()) {}

BytecodeBuilder::BytecodeBuilder(PyCodeObject* like, const OpcodeTable& table)
    : table_(&table),
      like_(PyRef::borrow(reinterpret_cast<PyObject*>(like))),
      const_index_(PyRef::steal(PyDict_New())),
      name_index_(PyRef::steal(PyDict_New())) {
  assembly_traits(table);  // fails early for a table without traits
  PyRef first = PyRef::steal(
      PyObject_GetAttrString(reinterpret_cast<PyObject*>(like), "co_firstlineno"));
  first_line_ = first ? static_cast<int>(PyLong_AsLong(first.get())) : 1;
  PyErr_Clear();
  set_line(first_line_);
  add_const(Py_None);
}

void BytecodeBuilder::fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

int BytecodeBuilder::new_label() {
  label_positions_.push_back(-1);
  return static_cast<int>(label_positions_.size()) - 1;
}

void BytecodeBuilder::bind(int label) {
  if (label < 0 || static_cast<size_t>(label) >= label_positions_.size()) {
    fail("bind of unknown label " + std::to_string(label));
    return;
  }
  if (label_positions_[static_cast<size_t>(label)] >= 0) {
    fail("label " + std::to_string(label) + " bound twice");
    return;
  }
  label_positions_[static_cast<size_t>(label)] = size();
}

void BytecodeBuilder::bind_at(int label, int bound_label) {
  if (bound_label < 0 || static_cast<size_t>(bound_label) >= label_positions_.size() ||
      label_positions_[static_cast<size_t>(bound_label)] < 0) {
    fail("bind_at to unbound label " + std::to_string(bound_label));
    return;
  }
  if (label < 0 || static_cast<size_t>(label) >= label_positions_.size()) {
    fail("bind_at of unknown label " + std::to_string(label));
    return;
  }
  if (label_positions_[static_cast<size_t>(label)] >= 0) {
    fail("label " + std::to_string(label) + " bound twice");
    return;
  }
  label_positions_[static_cast<size_t>(label)] =
      label_positions_[static_cast<size_t>(bound_label)];
}

void BytecodeBuilder::set_line(int line) {
  position_ = line < 0 ? SourcePosition{} : SourcePosition{line, line, -1, -1};
}

void BytecodeBuilder::set_position(const SourcePosition& position) {
  position_ = position;
}

int BytecodeBuilder::add_const(PyObject* value) {
  // Exact ints, strs and bytes are equal exactly when their values are;
  // anything else (floats with -0.0 and nan, tuples holding those, ...)
  // only dedups with itself.
  PyRef key;
  if (PyLong_CheckExact(value) || PyUnicode_CheckExact(value) ||
      PyBytes_CheckExact(value)) {
    key = PyRef::steal(PyTuple_Pack(2, reinterpret_cast<PyObject*>(Py_TYPE(value)), value));
  } else {
    key = PyRef::steal(PyLong_FromVoidPtr(value));
  }
  if (!key) {
    fail("add_const: " + take_python_error());
    return 0;
  }
  if (PyObject* found = PyDict_GetItemWithError(const_index_.get(), key.get()))
    return static_cast<int>(PyLong_AsLong(found));
  PyErr_Clear();
  const int index = static_cast<int>(consts_.size());
  consts_.push_back(PyRef::borrow(value));
  PyRef number = PyRef::steal(PyLong_FromLong(index));
  if (!number || PyDict_SetItem(const_index_.get(), key.get(), number.get()) < 0)
    fail("add_const: " + take_python_error());
  return index;
}

int BytecodeBuilder::add_name(PyObject* name) {
  if (name == nullptr || !PyUnicode_Check(name)) {
    fail("add_name of a non-str");
    return 0;
  }
  if (PyObject* found = PyDict_GetItemWithError(name_index_.get(), name))
    return static_cast<int>(PyLong_AsLong(found));
  PyErr_Clear();
  const int index = static_cast<int>(names_.size());
  names_.push_back(PyRef::borrow(name));
  PyRef number = PyRef::steal(PyLong_FromLong(index));
  if (!number || PyDict_SetItem(name_index_.get(), name, number.get()) < 0)
    fail("add_name: " + take_python_error());
  return index;
}

int BytecodeBuilder::add_name(const char* name) {
  PyObject* raw = PyUnicode_FromString(name);
  if (raw == nullptr) {
    fail("add_name: " + take_python_error());
    return 0;
  }
  PyUnicode_InternInPlace(&raw);
  PyRef text = PyRef::steal(raw);
  return add_name(text.get());
}

void BytecodeBuilder::check_unbound_locals(bool enable) {
  check_unbound_ = enable;
}

void BytecodeBuilder::add(int opcode, int arg) {
  if (opcode < 0 || opcode > 255 || table_->ops[static_cast<size_t>(opcode)].name == nullptr) {
    fail("emit of an opcode this Python lacks (" + std::to_string(opcode) + ")");
    return;
  }
  if (arg < 0) {
    fail("negative oparg for " +
         std::string(table_->ops[static_cast<size_t>(opcode)].name));
    return;
  }
  Logical ins;
  ins.opcode = opcode;
  ins.arg = opcode >= table_->have_argument ? arg : 0;
  ins.position = position_;
  instructions_.push_back(ins);
}

void BytecodeBuilder::add_jump(JumpKind kind, int opcode, int label) {
  if (label < 0 || static_cast<size_t>(label) >= label_positions_.size()) {
    fail("jump to unknown label " + std::to_string(label));
    return;
  }
  Logical ins;
  ins.opcode = opcode;
  ins.jump = kind;
  ins.label = label;
  ins.position = position_;
  instructions_.push_back(ins);
}

void BytecodeBuilder::emit(const char* opname, int arg) {
  const int opcode = opcode_by_name(*table_, opname);
  if (opcode < 0) {
    fail(std::string("emit of unknown opcode ") + opname);
    return;
  }
  const OpcodeInfo& info = table_->ops[static_cast<size_t>(opcode)];
  if (info.operand == Operand::JumpForward ||
      info.operand == Operand::JumpBackward) {
    fail(std::string("emit of jump opcode ") + opname + "; use emit_jump");
    return;
  }
  if (opcode == table_->extended_arg || opcode == table_->cache) {
    fail(std::string("emit of ") + opname + ", which build() adds itself");
    return;
  }
  add(opcode, arg);
}

void BytecodeBuilder::emit_jump(const char* kind, int label) {
  static const struct {
    const char* name;
    JumpKind kind;
  } kKinds[] = {
      {"JUMP", JumpKind::Jump},
      {"JUMP_NO_INTERRUPT", JumpKind::JumpNoInterrupt},
      {"POP_JUMP_IF_FALSE", JumpKind::PopJumpIfFalse},
      {"POP_JUMP_IF_TRUE", JumpKind::PopJumpIfTrue},
      {"POP_JUMP_IF_NONE", JumpKind::PopJumpIfNone},
      {"POP_JUMP_IF_NOT_NONE", JumpKind::PopJumpIfNotNone},
      {"JUMP_IF_FALSE_OR_POP", JumpKind::JumpIfFalseOrPop},
      {"JUMP_IF_TRUE_OR_POP", JumpKind::JumpIfTrueOrPop},
      {"FOR_ITER", JumpKind::ForIter},
  };
  for (const auto& entry : kKinds) {
    if (std::strcmp(entry.name, kind) == 0) {
      add_jump(entry.kind, -1, label);
      return;
    }
  }
  fail(std::string("emit_jump of unknown kind ") + kind);
}

void BytecodeBuilder::resume() { add(assembly_traits(*table_).resume, 0); }
void BytecodeBuilder::nop() { add(assembly_traits(*table_).nop, 0); }

void BytecodeBuilder::load_fast(int index) {
  const AssemblyTraits& t = assembly_traits(*table_);
  add(check_unbound_ && t.load_fast_check >= 0 ? t.load_fast_check
                                                : t.load_fast,
      index);
}
void BytecodeBuilder::store_fast(int index) {
  add(assembly_traits(*table_).store_fast, index);
}
void BytecodeBuilder::load_deref(int index) {
  add(assembly_traits(*table_).load_deref, index);
}
void BytecodeBuilder::store_deref(int index) {
  add(assembly_traits(*table_).store_deref, index);
}
void BytecodeBuilder::load_closure(int index) {
  add(assembly_traits(*table_).load_closure, index);
}
void BytecodeBuilder::make_cell(int index) {
  add(assembly_traits(*table_).make_cell, index);
}
void BytecodeBuilder::copy_free_vars(int n) {
  add(assembly_traits(*table_).copy_free_vars, n);
}
void BytecodeBuilder::load_const(PyObject* value) {
  add(assembly_traits(*table_).load_const, add_const(value));
}
void BytecodeBuilder::load_global(PyObject* name, bool push_null) {
  const AssemblyTraits& t = assembly_traits(*table_);
  add(t.load_global, t.load_global_arg(add_name(name), push_null));
}
void BytecodeBuilder::load_attr(PyObject* name) {
  const AssemblyTraits& t = assembly_traits(*table_);
  add(t.load_attr, t.load_attr_arg(add_name(name)));
}
void BytecodeBuilder::load_method(PyObject* name) {
  const AssemblyTraits& t = assembly_traits(*table_);
  const int index = add_name(name);
  if (t.load_method >= 0)
    add(t.load_method, index);
  else
    add(t.load_attr, t.load_attr_arg(index) | 1);
}
void BytecodeBuilder::push_null() { add(assembly_traits(*table_).push_null, 0); }
void BytecodeBuilder::call(int argc) {
  const AssemblyTraits& t = assembly_traits(*table_);
  if (t.precall >= 0) add(t.precall, argc);
  add(t.call, argc);
}
void BytecodeBuilder::call_kw(int argc, PyObject* kwnames_tuple) {
  add(assembly_traits(*table_).kw_names, add_const(kwnames_tuple));
  call(argc);
}
void BytecodeBuilder::call_function_ex(bool has_kwargs) {
  add(assembly_traits(*table_).call_function_ex, has_kwargs ? 1 : 0);
}
void BytecodeBuilder::build_tuple(int n) {
  add(assembly_traits(*table_).build_tuple, n);
}
void BytecodeBuilder::build_list(int n) {
  add(assembly_traits(*table_).build_list, n);
}
void BytecodeBuilder::build_map(int n) {
  add(assembly_traits(*table_).build_map, n);
}
void BytecodeBuilder::unpack_sequence(int n) {
  add(assembly_traits(*table_).unpack_sequence, n);
}
void BytecodeBuilder::pop_top() { add(assembly_traits(*table_).pop_top, 0); }
void BytecodeBuilder::copy(int n) { add(assembly_traits(*table_).copy, n); }
void BytecodeBuilder::swap(int n) { add(assembly_traits(*table_).swap, n); }
void BytecodeBuilder::get_iter() { add(assembly_traits(*table_).get_iter, 0); }
void BytecodeBuilder::compare_op(int py_compare_op) {
  const AssemblyTraits& t = assembly_traits(*table_);
  add(t.compare_op, t.compare_arg(py_compare_op));
}
void BytecodeBuilder::binary_op(int nb_op) {
  add(assembly_traits(*table_).binary_op, nb_op);
}
void BytecodeBuilder::return_value() {
  add(assembly_traits(*table_).return_value, 0);
}
void BytecodeBuilder::return_const(PyObject* value) {
  const AssemblyTraits& t = assembly_traits(*table_);
  const int index = add_const(value);
  if (t.return_const >= 0) {
    add(t.return_const, index);
  } else {
    add(t.load_const, index);
    add(t.return_value, 0);
  }
}
void BytecodeBuilder::make_function(int flags) {
  add(assembly_traits(*table_).make_function, flags);
}

void BytecodeBuilder::add_exception_entry(int start_label, int end_label,
                                          int handler_label, int depth,
                                          bool lasti) {
  for (int label : {start_label, end_label, handler_label}) {
    if (label < 0 || static_cast<size_t>(label) >= label_positions_.size()) {
      fail("exception entry with unknown label " + std::to_string(label));
      return;
    }
  }
  if (depth < 0) {
    fail("exception entry with negative depth");
    return;
  }
  exception_entries_.push_back(
      {start_label, end_label, handler_label, depth, lasti});
}

// ---------------------------------------------------------------------------
// Copying

bool BytecodeBuilder::copy_from(
    PyCodeObject* source, int from, int to, const std::vector<int>& local_map,
    const std::function<int(int)>& outside_target_label, std::string* error,
    std::vector<int>* labels_out) {
  const SourcePosition saved_position = position_;
  const auto failed = [&](const std::string& message) {
    position_ = saved_position;
    *error = message;
    return false;
  };
  if (table_ != &running_opcode_table())
    return failed("copy_from needs a builder for the running Python");
  const AssemblyTraits& t = assembly_traits(*table_);
  const std::vector<Instruction> source_ins = decode_bytecode(source);
  const int count = static_cast<int>(source_ins.size());
  if (from < 0 || to > count || from > to)
    return failed("copy_from range [" + std::to_string(from) + ", " +
                  std::to_string(to) + ") outside the " +
                  std::to_string(count) + " instructions");

  PyObject* object = reinterpret_cast<PyObject*>(source);
  PyRef consts = PyRef::steal(PyObject_GetAttrString(object, "co_consts"));
  PyRef names = PyRef::steal(PyObject_GetAttrString(object, "co_names"));
  PyRef table_bytes =
      PyRef::steal(PyObject_GetAttrString(object, "co_exceptiontable"));
  std::vector<SourcePosition> positions;
  if (!consts || !names || !table_bytes || !PyBytes_Check(table_bytes.get()) ||
      !code_positions(source, &positions))
    return failed("copy_from: cannot read the source code object: " +
                  take_python_error());

  std::vector<int> labels(static_cast<size_t>(to - from) + 1);
  for (int& label : labels) label = new_label();
  const auto label_of = [&](int index) { return labels[static_cast<size_t>(index - from)]; };
  // Jump and handler targets: a copied instruction, or the caller's label.
  const auto target_label = [&](int index, int ask_index, int* label) {
    if (index >= from && index < to) {
      *label = label_of(index);
      return true;
    }
    *label = outside_target_label ? outside_target_label(ask_index) : -1;
    return *label >= 0;
  };
  const auto local = [&](const Instruction& ins, int* index) {
    const int old_index = ins.raw_arg;
    if (old_index < 0 || static_cast<size_t>(old_index) >= local_map.size() ||
        local_map[static_cast<size_t>(old_index)] < 0)
      return false;
    *index = local_map[static_cast<size_t>(old_index)];
    return true;
  };

  for (int i = from; i < to; ++i) {
    const Instruction& ins = source_ins[static_cast<size_t>(i)];
    const OpcodeInfo& info = table_->ops[ins.raw_opcode];
    const std::string where = std::string(ins.raw_name) + " at instruction " +
                              std::to_string(i);
    bind(label_of(i));
    const size_t unit = static_cast<size_t>(ins.offset / 2);
    position_ = unit < positions.size() ? positions[unit] : SourcePosition{};
    if (info.name == nullptr || ins.raw_opcode == table_->extended_arg ||
        ins.raw_opcode == table_->cache)
      return failed("copy_from: cannot copy " + where);

    if (info.operand == Operand::JumpForward ||
        info.operand == Operand::JumpBackward) {
      if (ins.target < 0) return failed("copy_from: " + where + " jumps outside the code");
      JumpKind kind = JumpKind::ForwardOnly;
      int ask_index = ins.target;
      switch (ins.op) {
        case Op::Jump:
          kind = ins.raw_opcode == t.jump_backward_no_interrupt
                     ? JumpKind::JumpNoInterrupt
                     : JumpKind::Jump;
          break;
        case Op::PopJumpIfFalse: kind = JumpKind::PopJumpIfFalse; break;
        case Op::PopJumpIfTrue: kind = JumpKind::PopJumpIfTrue; break;
        case Op::PopJumpIfNone: kind = JumpKind::PopJumpIfNone; break;
        case Op::PopJumpIfNotNone: kind = JumpKind::PopJumpIfNotNone; break;
        case Op::JumpIfFalseOrPop: kind = JumpKind::JumpIfFalseOrPop; break;
        case Op::JumpIfTrueOrPop: kind = JumpKind::JumpIfTrueOrPop; break;
        case Op::ForIter:
          kind = JumpKind::ForIter;
          // 3.12: dis's target is the END_FOR the exhausted loop skips.
          if (source_ins[static_cast<size_t>(ins.target)].op == Op::EndFor)
            ask_index = ins.target + 1;
          break;
        default:
          if (info.operand == Operand::JumpBackward)
            return failed("copy_from: cannot copy backward " + where);
          break;
      }
      int label = -1;
      if (!target_label(ins.target, ask_index, &label))
        return failed("copy_from: no label for the target " +
                      std::to_string(ask_index) + " of " + where);
      add_jump(kind, kind == JumpKind::ForwardOnly ? ins.raw_opcode : -1, label);
      continue;
    }

    int arg = ins.raw_arg;
    int opcode = ins.raw_opcode;
    switch (info.operand) {
      case Operand::Const: {
        if (ins.raw_arg >= PyTuple_GET_SIZE(consts.get()))
          return failed("copy_from: bad const index in " + where);
        arg = add_const(PyTuple_GET_ITEM(consts.get(), ins.raw_arg));
        break;
      }
      case Operand::Name: {
        int shift = 0;
        if (info.arg == ArgKind::GlobalIndex || info.arg == ArgKind::AttrIndex)
          shift = 1;
        if (info.arg == ArgKind::SuperAttrIndex) shift = 2;
        const int index = ins.raw_arg >> shift;
        if (index >= PyTuple_GET_SIZE(names.get()))
          return failed("copy_from: bad name index in " + where);
        const int low_bits = ins.raw_arg & ((1 << shift) - 1);
        arg = (add_name(PyTuple_GET_ITEM(names.get(), index)) << shift) | low_bits;
        break;
      }
      case Operand::Local:
      case Operand::Free:
        if (!local(ins, &arg))
          return failed("copy_from: local_map has no slot for local " +
                        std::to_string(ins.raw_arg) + " of " + where);
        if (check_unbound_ && opcode == t.load_fast && t.load_fast_check >= 0)
          opcode = t.load_fast_check;
        break;
      default:
        break;
    }
    add(opcode, arg);
  }
  bind(labels.back());
  position_ = saved_position;

  // Exception entries: code units -> instruction indices.
  std::vector<ExceptionTableEntry> entries;
  if (!decode_exception_table(
          reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table_bytes.get())),
          static_cast<size_t>(PyBytes_GET_SIZE(table_bytes.get())), &entries))
    return failed("copy_from: malformed exception table");
  std::vector<int> index_of_unit;
  for (const Instruction& ins : source_ins) {
    const size_t end = static_cast<size_t>(
        ins.offset / 2 + 1 + table_->ops[ins.raw_opcode].cache_entries);
    while (index_of_unit.size() < end) index_of_unit.push_back(ins.index);
  }
  const auto index_at = [&](int unit) {
    return unit >= 0 && static_cast<size_t>(unit) < index_of_unit.size()
               ? index_of_unit[static_cast<size_t>(unit)]
               : count;
  };
  for (const ExceptionTableEntry& entry : entries) {
    const int start = std::max(index_at(entry.start), from);
    const int end = std::min(index_at(entry.end), to);
    if (start >= end) continue;
    const int handler = index_at(entry.target);
    int handler_label = -1;
    if (!target_label(handler, handler, &handler_label))
      return failed("copy_from: no label for exception handler " +
                    std::to_string(handler));
    add_exception_entry(label_of(start), label_of(end), handler_label,
                        entry.depth, entry.lasti);
  }
  if (labels_out != nullptr) *labels_out = std::move(labels);
  if (!error_.empty()) return failed(error_);
  return true;
}

// ---------------------------------------------------------------------------
// Assembly

bool BytecodeBuilder::expand(std::vector<Real>* out, std::vector<int>* first_real,
                             std::string* error) const {
  const AssemblyTraits& t = assembly_traits(*table_);
  const int count = size();
  const auto position_of = [&](int label) {
    return label_positions_[static_cast<size_t>(label)];
  };
  // Jump targets: logical index of the label, checked.
  for (int i = 0; i < count; ++i) {
    const Logical& ins = instructions_[static_cast<size_t>(i)];
    if (ins.jump == JumpKind::None) continue;
    const int target = position_of(ins.label);
    if (target < 0) {
      *error = "jump to unbound label " + std::to_string(ins.label);
      return false;
    }
    if (target >= count) {
      *error = "jump to the end of the code (label " +
               std::to_string(ins.label) + ")";
      return false;
    }
  }
  const auto backward = [&](int i) {
    const Logical& ins = instructions_[static_cast<size_t>(i)];
    return ins.jump != JumpKind::None && position_of(ins.label) <= i;
  };
  const auto condition = [](JumpKind kind) {
    switch (kind) {
      case JumpKind::PopJumpIfTrue:
      case JumpKind::JumpIfTrueOrPop:
        return PopJumpCondition::True;
      case JumpKind::PopJumpIfNone:
        return PopJumpCondition::None;
      case JumpKind::PopJumpIfNotNone:
        return PopJumpCondition::NotNone;
      default:
        return PopJumpCondition::False;
    }
  };
  // 3.12: FOR_ITER may jump straight to a label bound to an END_FOR.
  const auto for_iter_direct = [&](int i) {
    if (backward(i)) return false;
    if (t.end_for < 0) return true;
    const Logical& target = instructions_[static_cast<size_t>(
        position_of(instructions_[static_cast<size_t>(i)].label))];
    return target.jump == JumpKind::None && target.opcode == t.end_for;
  };

  // Pass 1: how many real instructions each logical one becomes.
  first_real->assign(static_cast<size_t>(count) + 1, 0);
  int total = 0;
  for (int i = 0; i < count; ++i) {
    const Logical& ins = instructions_[static_cast<size_t>(i)];
    (*first_real)[static_cast<size_t>(i)] = total;
    int n = 1;
    switch (ins.jump) {
      case JumpKind::PopJumpIfFalse:
      case JumpKind::PopJumpIfTrue:
      case JumpKind::PopJumpIfNone:
      case JumpKind::PopJumpIfNotNone:
        if (backward(i) &&
            t.pop_jump_backward[static_cast<size_t>(condition(ins.jump))] < 0)
          n = 2;
        break;
      case JumpKind::JumpIfFalseOrPop:
      case JumpKind::JumpIfTrueOrPop: {
        const int native = ins.jump == JumpKind::JumpIfFalseOrPop
                               ? t.jump_if_false_or_pop
                               : t.jump_if_true_or_pop;
        n = backward(i) ? 4 : native >= 0 ? 1 : 3;
        break;
      }
      case JumpKind::ForwardOnly:
        if (backward(i)) {
          *error = std::string("backward ") +
                   table_->ops[static_cast<size_t>(ins.opcode)].name +
                   " cannot be encoded";
          return false;
        }
        break;
      default:
        break;
    }
    total += n;
  }
  (*first_real)[static_cast<size_t>(count)] = total;

  // Pass 2: the real instructions, trampolines after them.
  out->clear();
  std::vector<Real> trampolines;
  for (int i = 0; i < count; ++i) {
    const Logical& ins = instructions_[static_cast<size_t>(i)];
    const int target = ins.jump == JumpKind::None
                           ? -1
                           : (*first_real)[static_cast<size_t>(position_of(ins.label))];
    const int next = (*first_real)[static_cast<size_t>(i) + 1];
    const auto real = [&](int opcode, int arg, int to) {
      Real r;
      r.opcode = opcode;
      r.arg = arg;
      r.target = to;
      r.owner = i;
      r.position = ins.position;
      out->push_back(r);
    };
    const int jump = backward(i) ? t.jump_backward : t.jump_forward;
    switch (ins.jump) {
      case JumpKind::None:
        real(ins.opcode, ins.arg, -1);
        break;
      case JumpKind::Jump:
        real(jump, 0, target);
        break;
      case JumpKind::JumpNoInterrupt:
        real(backward(i) ? t.jump_backward_no_interrupt : t.jump_forward, 0, target);
        break;
      case JumpKind::PopJumpIfFalse:
      case JumpKind::PopJumpIfTrue:
      case JumpKind::PopJumpIfNone:
      case JumpKind::PopJumpIfNotNone: {
        const PopJumpCondition c = condition(ins.jump);
        if (!backward(i)) {
          real(t.pop_jump_forward[static_cast<size_t>(c)], 0, target);
        } else if (t.pop_jump_backward[static_cast<size_t>(c)] >= 0) {
          real(t.pop_jump_backward[static_cast<size_t>(c)], 0, target);
        } else {
          real(t.pop_jump_forward[static_cast<size_t>(inverse(c))], 0, next);
          real(t.jump_backward, 0, target);
        }
        break;
      }
      case JumpKind::JumpIfFalseOrPop:
      case JumpKind::JumpIfTrueOrPop: {
        const PopJumpCondition c = condition(ins.jump);
        const int native = ins.jump == JumpKind::JumpIfFalseOrPop
                               ? t.jump_if_false_or_pop
                               : t.jump_if_true_or_pop;
        if (!backward(i) && native >= 0) {
          real(native, 0, target);
        } else if (!backward(i)) {
          real(t.copy, 1, -1);
          real(t.pop_jump_forward[static_cast<size_t>(c)], 0, target);
          real(t.pop_top, 0, -1);
        } else {
          real(t.copy, 1, -1);
          real(t.pop_jump_forward[static_cast<size_t>(inverse(c))], 0, next - 1);
          real(t.jump_backward, 0, target);
          real(t.pop_top, 0, -1);
        }
        break;
      }
      case JumpKind::ForIter: {
        if (for_iter_direct(i)) {
          real(t.for_iter, 0, target);
          break;
        }
        real(t.for_iter, 0, total + static_cast<int>(trampolines.size()));
        Real r;
        r.position = ins.position;
        if (t.end_for >= 0) {
          r.opcode = t.end_for;
          trampolines.push_back(r);
        }
        r.opcode = t.jump_backward_no_interrupt;
        r.target = target;
        trampolines.push_back(r);
        break;
      }
      case JumpKind::ForwardOnly:
        real(ins.opcode, 0, target);
        break;
    }
  }
  out->insert(out->end(), trampolines.begin(), trampolines.end());
  return true;
}

bool BytecodeBuilder::assemble(Assembled* result, std::string* error) const {
  if (!error_.empty()) {
    *error = error_;
    return false;
  }
  const AssemblyTraits& t = assembly_traits(*table_);
  const int count = size();
  std::vector<Real> reals;
  std::vector<int> first_real;
  if (!expand(&reals, &first_real, error)) return false;
  const size_t n = reals.size();

  // EXTENDED_ARG fixed point: offsets move as prefixes are added; sizes
  // only grow, so this ends.
  const auto units_of = [&](const Real& r) {
    return r.prefixes + 1 + table_->ops[static_cast<size_t>(r.opcode)].cache_entries;
  };
  std::vector<int> offsets(n + 1, 0);
  for (Real& r : reals) r.prefixes = r.target >= 0 ? 0 : prefixes_for(r.arg);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) offsets[r + 1] = offsets[r] + units_of(reals[r]);
    for (size_t r = 0; r < n; ++r) {
      Real& real = reals[r];
      if (real.target < 0) continue;
      const int end = offsets[r + 1];
      const int target = offsets[static_cast<size_t>(real.target)];
      const bool back = table_->ops[static_cast<size_t>(real.opcode)].operand ==
                        Operand::JumpBackward;
      real.arg = back ? end - target : target - end;
      if (real.arg < 0) {
        *error = std::string("internal error: ") +
                 table_->ops[static_cast<size_t>(real.opcode)].name +
                 " jumps the wrong way";
        return false;
      }
      const int need = prefixes_for(real.arg);
      if (need > real.prefixes) {
        real.prefixes = need;
        changed = true;
      }
    }
  }

  // co_code and the location table.
  std::string code;
  std::vector<PositionRun> runs;
  for (const Real& r : reals) {
    for (int k = r.prefixes; k > 0; --k) {
      code.push_back(static_cast<char>(table_->extended_arg));
      code.push_back(static_cast<char>((r.arg >> (8 * k)) & 0xff));
    }
    code.push_back(static_cast<char>(r.opcode));
    code.push_back(static_cast<char>(r.arg & 0xff));
    const int caches = table_->ops[static_cast<size_t>(r.opcode)].cache_entries;
    for (int c = 0; c < caches; ++c) {
      code.push_back(static_cast<char>(table_->cache));
      code.push_back(0);
    }
    runs.push_back({r.position, units_of(r)});
  }

  // The handler of every logical instruction (the entry added last wins),
  // then runs of real instructions sharing one.
  std::vector<int> handler_of(static_cast<size_t>(count), -1);
  for (size_t e = 0; e < exception_entries_.size(); ++e) {
    const ExceptionEntry& entry = exception_entries_[e];
    const int start = label_positions_[static_cast<size_t>(entry.start_label)];
    const int end = label_positions_[static_cast<size_t>(entry.end_label)];
    const int handler = label_positions_[static_cast<size_t>(entry.handler_label)];
    if (start < 0 || end < 0 || handler < 0) {
      *error = "exception entry with an unbound label";
      return false;
    }
    if (handler >= count) {
      *error = "exception handler at the end of the code";
      return false;
    }
    if (end < start) {
      *error = "exception entry ends before it starts";
      return false;
    }
    for (int i = start; i < end; ++i) handler_of[static_cast<size_t>(i)] = static_cast<int>(e);
  }
  const auto real_handler = [&](size_t r) {
    return reals[r].owner < 0 ? -1 : handler_of[static_cast<size_t>(reals[r].owner)];
  };
  const auto handler_target = [&](int e) {
    const ExceptionEntry& entry = exception_entries_[static_cast<size_t>(e)];
    return first_real[static_cast<size_t>(
        label_positions_[static_cast<size_t>(entry.handler_label)])];
  };
  std::vector<ExceptionTableEntry> table;
  for (size_t r = 0; r < n; ++r) {
    const int e = real_handler(r);
    if (e < 0) continue;
    const ExceptionEntry& entry = exception_entries_[static_cast<size_t>(e)];
    const ExceptionTableEntry item{offsets[r], offsets[r + 1],
                                   offsets[static_cast<size_t>(handler_target(e))],
                                   entry.depth, entry.lasti};
    if (!table.empty() && table.back().end == item.start &&
        table.back().target == item.target && table.back().depth == item.depth &&
        table.back().lasti == item.lasti) {
      table.back().end = item.end;
    } else {
      table.push_back(item);
    }
  }

  // Stack depth: CPython's stackdepth() over the real instructions.
  int max_depth = 0;
  if (table_ == &running_opcode_table()) {
    std::vector<int> depth_at(n, -1);
    std::vector<std::pair<size_t, int>> work{{0, 0}};
    const auto describe = [&](size_t r) {
      return std::string(table_->ops[static_cast<size_t>(reals[r].opcode)].name) +
             " (instruction " + std::to_string(reals[r].owner) + ", offset " +
             std::to_string(2 * offsets[r]) + ")";
    };
    const auto effect = [&](size_t r, int jump, int* out) {
      const int value = PyCompile_OpcodeStackEffectWithJump(
          reals[r].opcode, reals[r].arg, jump);
      if (PyErr_Occurred()) PyErr_Clear();
      if (value == PY_INVALID_STACK_EFFECT) {
        *error = "no stack effect for " + describe(r);
        return false;
      }
      // CPython says 0 (its compiler adds the generator prefix after
      // computing the depth), but the frame goes on with the sent value
      // pushed, which the POP_TOP after RETURN_GENERATOR removes.
      *out = reals[r].opcode == t.return_generator ? 1 : value;
      return true;
    };
    while (!work.empty() && n > 0) {
      auto [r, depth] = work.back();
      work.pop_back();
      for (;;) {
        if (r >= n) {
          *error = "execution falls off the end of the code";
          return false;
        }
        if (depth_at[r] >= 0) {
          if (depth_at[r] != depth) {
            *error = "stack depth " + std::to_string(depth) + " vs " +
                     std::to_string(depth_at[r]) + " at " + describe(r);
            return false;
          }
          break;
        }
        depth_at[r] = depth;
        if (const int e = real_handler(r); e >= 0) {
          const ExceptionEntry& entry = exception_entries_[static_cast<size_t>(e)];
          if (entry.depth > depth) {
            *error = "exception entry depth " + std::to_string(entry.depth) +
                     " above the stack depth " + std::to_string(depth) +
                     " at " + describe(r);
            return false;
          }
          const int handler_depth = entry.depth + 1 + (entry.lasti ? 1 : 0);
          max_depth = std::max(max_depth, handler_depth);
          work.push_back({static_cast<size_t>(handler_target(e)), handler_depth});
        }
        int fall = 0;
        if (!effect(r, 0, &fall)) return false;
        const int new_depth = depth + fall;
        if (new_depth < 0) {
          *error = "stack underflow at " + describe(r);
          return false;
        }
        max_depth = std::max(max_depth, new_depth);
        if (reals[r].target >= 0) {
          int jumped = 0;
          if (!effect(r, 1, &jumped)) return false;
          const int target_depth = depth + jumped;
          if (target_depth < 0) {
            *error = "stack underflow at the target of " + describe(r);
            return false;
          }
          max_depth = std::max(max_depth, target_depth);
          work.push_back({static_cast<size_t>(reals[r].target), target_depth});
        }
        if (t.is_terminator(reals[r].opcode)) break;
        depth = new_depth;
        ++r;
      }
    }
  } else {
    max_depth = -1;
  }

  result->code = std::move(code);
  result->linetable = encode_location_table(runs, first_line_);
  result->exceptiontable = encode_exception_table(table);
  result->stacksize = max_depth;
  result->offsets.assign(static_cast<size_t>(count), 0);
  for (int i = 0; i < count; ++i)
    result->offsets[static_cast<size_t>(i)] =
        offsets[static_cast<size_t>(first_real[static_cast<size_t>(i)])];
  return true;
}

// ---------------------------------------------------------------------------
// Building

PyObject* BytecodeBuilder::build(const CodeLayout& layout, const char* name,
                                 const char* qualname) {
  const auto fail_with = [](const std::string& message) -> PyObject* {
    PyErr_SetString(PyExc_SystemError,
                    ("kiln bytecode builder: " + message).c_str());
    return nullptr;
  };
  if (table_ != &running_opcode_table())
    return fail_with("build needs a builder for the running Python");
  Assembled assembled;
  std::string error;
  if (!assemble(&assembled, &error)) return fail_with(error);

  // localsplus -> co_varnames, co_cellvars, co_freevars; see CodeLayout.
  if (layout.names.size() != layout.kinds.size())
    return fail_with("layout names and kinds differ in length");
  std::vector<const std::string*> varnames, cellvars, freevars;
  std::vector<const std::string*> local_cells;
  std::unordered_set<std::string> seen;
  int phase = 0;  // 0 locals, 1 cells, 2 free variables
  for (size_t i = 0; i < layout.names.size(); ++i) {
    const std::string& local = layout.names[i];
    const uint8_t kind = layout.kinds[i] & (kFastLocal | kFastCell | kFastFree);
    if (!seen.insert(local).second)
      return fail_with("layout names '" + local + "' twice");
    int kind_phase = -1;
    if (kind == kFastLocal || kind == (kFastLocal | kFastCell)) kind_phase = 0;
    if (kind == kFastCell) kind_phase = 1;
    if (kind == kFastFree) kind_phase = 2;
    if (kind_phase < 0)
      return fail_with("layout slot '" + local + "' has kind " + std::to_string(kind));
    if (kind_phase < phase)
      return fail_with("layout slot '" + local +
                       "' is out of order (locals, then cells, then free variables)");
    phase = kind_phase;
    if (kind_phase == 0) varnames.push_back(&local);
    if (kind == (kFastLocal | kFastCell)) local_cells.push_back(&local);
    if (kind_phase == 1) cellvars.push_back(&local);
    if (kind_phase == 2) freevars.push_back(&local);
  }
  cellvars.insert(cellvars.begin(), local_cells.begin(), local_cells.end());
  const int needed_args = layout.argcount + layout.kwonlyargcount +
                          ((layout.flags & CO_VARARGS) ? 1 : 0) +
                          ((layout.flags & CO_VARKEYWORDS) ? 1 : 0);
  if (needed_args > static_cast<int>(varnames.size()))
    return fail_with("layout has " + std::to_string(varnames.size()) +
                     " locals for " + std::to_string(needed_args) + " arguments");

  const auto tuple_of = [](const std::vector<const std::string*>& items) {
    PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
    for (size_t i = 0; tuple && i < items.size(); ++i) {
      PyObject* text = PyUnicode_FromStringAndSize(
          items[i]->data(), static_cast<Py_ssize_t>(items[i]->size()));
      if (text == nullptr) return PyRef();
      PyUnicode_InternInPlace(&text);
      PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), text);
    }
    return tuple;
  };
  const auto tuple_of_refs = [](const std::vector<PyRef>& items) {
    PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
    for (size_t i = 0; tuple && i < items.size(); ++i) {
      Py_INCREF(items[i].get());
      PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), items[i].get());
    }
    return tuple;
  };
  const auto bytes_of = [](const std::string& data) {
    return PyRef::steal(PyBytes_FromStringAndSize(
        data.data(), static_cast<Py_ssize_t>(data.size())));
  };
  const auto number = [](long value) { return PyRef::steal(PyLong_FromLong(value)); };
  const auto text = [](const char* value) {
    return PyRef::steal(PyUnicode_FromString(value));
  };

  PyRef kwargs = PyRef::steal(PyDict_New());
  if (!kwargs) return nullptr;
  const std::pair<const char*, PyRef> items[] = {
      {"co_argcount", number(layout.argcount)},
      {"co_posonlyargcount", number(layout.posonlyargcount)},
      {"co_kwonlyargcount", number(layout.kwonlyargcount)},
      {"co_nlocals", number(static_cast<long>(varnames.size()))},
      {"co_stacksize", number(assembled.stacksize)},
      {"co_flags", number(layout.flags)},
      {"co_firstlineno", number(first_line_)},
      {"co_code", bytes_of(assembled.code)},
      {"co_consts", tuple_of_refs(consts_)},
      {"co_names", tuple_of_refs(names_)},
      {"co_varnames", tuple_of(varnames)},
      {"co_cellvars", tuple_of(cellvars)},
      {"co_freevars", tuple_of(freevars)},
      {"co_name", text(name)},
      {"co_qualname", text(qualname != nullptr ? qualname : name)},
      {"co_linetable", bytes_of(assembled.linetable)},
      {"co_exceptiontable", bytes_of(assembled.exceptiontable)},
  };
  for (const auto& [key, value] : items) {
    if (!value || PyDict_SetItemString(kwargs.get(), key, value.get()) < 0)
      return nullptr;
  }
  PyRef replace = PyRef::steal(PyObject_GetAttrString(like_.get(), "replace"));
  PyRef empty = PyRef::steal(PyTuple_New(0));
  if (!replace || !empty) return nullptr;
  return PyObject_Call(replace.get(), empty.get(), kwargs.get());
}

}  // namespace kiln::cpython
