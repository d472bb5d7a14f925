// The bytecode assembler: builds runnable code objects for the running
// CPython (3.11 or 3.12) from version-neutral calls and from instructions
// copied out of existing code. See Note [Bytecode builder].
#pragma once

#include <Python.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpython/line_table.h"
#include "cpython/opcode_table.h"
#include "base/py_ref.h"

namespace kiln::cpython {

// Note [Bytecode builder]
// A BytecodeBuilder collects *logical* instructions: an opcode of the
// builder's table with its final oparg, or a version-neutral jump to a
// label. Labels are ints from new_label(); bind(label) attaches the label to
// the next instruction emitted (or to the end of the code). build() then
//   1. expands each jump into the opcodes its version and direction need
//      (3.11: JUMP_FORWARD/JUMP_BACKWARD, POP_JUMP_FORWARD_IF_X /
//      POP_JUMP_BACKWARD_IF_X; 3.12: backward conditional jumps become
//      POP_JUMP_IF_<not X> over a JUMP_BACKWARD, as CPython's compiler
//      does; FOR_ITER's exit goes through an END_FOR, see emit_jump),
//   2. sizes EXTENDED_ARG prefixes to a fixed point (sizes only grow),
//   3. writes co_code with zeroed CACHE entries, co_linetable (positions of
//      copied instructions are kept exactly, set_line gives line-only ones)
//      and co_exceptiontable,
//   4. computes co_stacksize by flow analysis over fall-through, jumps and
//      exception handlers with CPython's own stack effects
//      (PyCompile_OpcodeStackEffectWithJump), the algorithm of the
//      compiler's stackdepth(), so round-tripped code gets CPython's value,
//   5. makes the code object with `like.replace(...)`.
// Errors made while emitting (unknown opcode name, label bound twice, ...)
// are remembered; build() reports the first one as a Python exception.
// Every function here must be called with the GIL held.

// Note [Resume functions]
// How to continue a frame in CPython from instruction R of code C (what the
// tests in tests/cpp/cpython/test_bytecode_builder.cpp do):
//   - Layout: arguments are the stack values at R (bottom first, NULLs
//     left out) followed by the live locals; other locals of C that the
//     copied code names get plain local slots; C's cells (kFastCell, also
//     kFastLocal|kFastCell) become kFastFree and the function is made with
//     the original frame's cell objects as its closure, so functions that
//     captured them before the break share them; C's free variables stay
//     free. copy_from's local_map sends each old index to its new slot.
//   - Prologue: copy_free_vars(layout.free_count()) if there are free
//     variables, make_cell for new cells only (never for the shared ones),
//     resume(), then rebuild the stack exactly as it was at R: load_fast of
//     each stack argument and push_null() where the stack held a NULL
//     (below a callable: [NULL, callable, args...]); then a JUMP to R's
//     label (or fall into the copy when it starts at R). Copied exception
//     table depths and the stack analysis rely on the same stack depth.
//   - Body: copy_from(C, from, to, ...) with `from` at or before the loop
//     heads that R is inside (copy the whole code if unsure: unreachable
//     copied code costs nothing), then bind_at(entry, labels[R - from]).
//     A loop's iterator is just a stack value: the prologue's load_fast puts
//     it back and the copied FOR_ITER/END_FOR (3.12) work unchanged.
//   - R must not fall between KW_NAMES and its CALL (KW_NAMES stores the
//     names in the evaluation loop, not on the stack); resume at the
//     KW_NAMES instead. On 3.11 prefer PRECALL over its CALL.
//   - On 3.12 LOAD_FAST does not check for unbound locals: pass every local
//     the copied code may read or turn on check_unbound_locals().

// Kinds of _co_localspluskinds (CO_FAST_* in CPython's pycore_code.h, the
// same numbers on 3.11 and 3.12).
inline constexpr uint8_t kFastLocal = 0x20;
inline constexpr uint8_t kFastCell = 0x40;
inline constexpr uint8_t kFastFree = 0x80;

// Where locals live in a code object: its localsplus names and kinds (as
// co_localsplusnames / _co_localspluskinds) and its signature. CPython can
// only represent the order [locals (kFastLocal, or kFastLocal|kFastCell for
// a local that is also a cell, e.g. a captured argument)...] [cells
// (kFastCell)...] [free variables (kFastFree)...]; arguments are the first
// locals, in the order argcount, kwonlyargcount, *args, **kwargs.
struct CodeLayout {
  int argcount = 0;
  int posonlyargcount = 0;
  int kwonlyargcount = 0;
  int flags = CO_OPTIMIZED | CO_NEWLOCALS;  // co_flags (CO_VARARGS, ...)
  std::vector<std::string> names;  // localsplus names, UTF-8
  std::vector<uint8_t> kinds;      // kFast* bits, parallel to names

  // Appends a localsplus slot and returns its index.
  int add(const std::string& name, uint8_t kind);
  // The localsplus index of `name`, or -1.
  int index_of(const std::string& name) const;
  // Number of free variables (the closure's length).
  int free_count() const;
};

// The layout of an existing code object. On 3.12, the CO_FAST_HIDDEN bit of
// inlined comprehension temporaries is not visible and not kept.
CodeLayout layout_of(PyCodeObject* code);

// Builds one code object; see Note [Bytecode builder]. Holds references to
// `like` and to every constant and name added; not copyable.
class BytecodeBuilder {
 public:
  // A builder for the running CPython; co_filename and co_firstlineno come
  // from `like` (borrowed, a new reference is kept). co_consts[0] is None, so
  // functions made from the code get __doc__ None.
  explicit BytecodeBuilder(PyCodeObject* like);
  // A builder for another version's table: only assemble() works (tests use
  // it to check 3.12 encodings from a 3.11 process and vice versa).
  BytecodeBuilder(PyCodeObject* like, const OpcodeTable& table);
  BytecodeBuilder(const BytecodeBuilder&) = delete;
  BytecodeBuilder& operator=(const BytecodeBuilder&) = delete;

  // A fresh, unbound label.
  int new_label();
  // Binds `label` to the next instruction emitted (or to the end of code).
  void bind(int label);
  // Binds `label` where `bound_label` is bound, e.g. to a label copy_from
  // returned, so that a prologue emitted before the copy can jump into it.
  void bind_at(int label, int bound_label);
  // Line of the instructions emitted from now on; -1 for none. Starts at
  // like's co_firstlineno.
  void set_line(int line);
  // Full position (with columns) of the instructions emitted from now on.
  void set_position(const SourcePosition& position);
  // co_consts index of `value` (borrowed; a reference is kept). Dedups by
  // identity, and exact ints, strs and bytes by value.
  int add_const(PyObject* value);
  // co_names index of the str `name` (borrowed; a reference is kept).
  int add_name(PyObject* name);
  // Same, from UTF-8.
  int add_name(const char* name);
  // On 3.12, load_fast() and LOAD_FASTs copied by copy_from() become
  // LOAD_FAST_CHECK, which raises UnboundLocalError where LOAD_FAST would
  // crash on an unbound local. No effect on 3.11, whose LOAD_FAST checks.
  void check_unbound_locals(bool enable);

  // Raw emission: opcode by the table's name, `arg` its final oparg. Jump
  // opcodes must go through emit_jump; EXTENDED_ARG and CACHE are added by
  // build().
  void emit(const char* opname, int arg = 0);
  // A jump to `label`. Kinds: "JUMP", "JUMP_NO_INTERRUPT",
  // "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE",
  // "POP_JUMP_IF_NOT_NONE", "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"
  // (3.12: COPY 1 + POP_JUMP + POP_TOP), "FOR_ITER" (label: where the
  // exhausted loop continues, iterator popped; on 3.12, when the label is
  // bound to an END_FOR the FOR_ITER uses it as CPython does, otherwise an
  // END_FOR + jump to the label is appended after the code). Any direction.
  void emit_jump(const char* kind, int label);

  // Version-neutral helpers.
  void resume();                          // RESUME 0
  void nop();                             // NOP
  void load_fast(int localsplus_index);   // see check_unbound_locals
  void store_fast(int localsplus_index);
  void load_deref(int localsplus_index);
  void store_deref(int localsplus_index);
  void load_closure(int localsplus_index);
  void make_cell(int localsplus_index);
  void copy_free_vars(int n);
  void load_const(PyObject* value);       // borrowed
  // LOAD_GLOBAL of the str `name` (borrowed), pushing NULL first if asked.
  void load_global(PyObject* name, bool push_null);
  // Plain attribute load of the str `name` (borrowed).
  void load_attr(PyObject* name);
  // Method load of `name` (borrowed): pushes [method, self] or [NULL, attr]
  // (3.11 LOAD_METHOD, 3.12 LOAD_ATTR with the low bit).
  void load_method(PyObject* name);
  void push_null();
  // CALL with stack [NULL|method, callable|self, argc args]; 3.11 gets
  // PRECALL first.
  void call(int argc);
  // KW_NAMES (of the tuple of str `kwnames_tuple`, borrowed) + call(argc);
  // the last len(kwnames) of the argc arguments are the keyword ones.
  void call_kw(int argc, PyObject* kwnames_tuple);
  // CALL_FUNCTION_EX with stack [NULL, callable, args tuple, (kwargs dict)].
  void call_function_ex(bool has_kwargs);
  void build_tuple(int n);
  void build_list(int n);
  void build_map(int n);
  void unpack_sequence(int n);
  void pop_top();
  void copy(int n);
  void swap(int n);
  void get_iter();
  // COMPARE_OP of a Py_LT..Py_GE code, encoded as the version wants.
  void compare_op(int py_compare_op);
  // BINARY_OP of an NB_* code (the same on 3.11 and 3.12).
  void binary_op(int nb_op);
  void return_value();
  // Returns `value` (borrowed): 3.12 RETURN_CONST, 3.11 LOAD_CONST +
  // RETURN_VALUE.
  void return_const(PyObject* value);
  // MAKE_FUNCTION with the code object on top (flags' values below it).
  void make_function(int flags);

  // Copies decoded instructions [from, to) of `source` (decode_bytecode
  // indices) with their raw opcodes and args, except that: jumps into the
  // range go to labels, jumps out of it to outside_target_label(index)
  // (a label; null function or a negative result fails; for FOR_ITER the
  // index is where the exhausted loop continues, on 3.12 the instruction
  // after its END_FOR); localsplus indices go through local_map (old index
  // -> new; an unmapped used index fails); consts and names are re-interned
  // here; positions are kept; source exception-table entries overlapping
  // the range are carried over (clipped), handlers remapped like jumps.
  // If `labels` is given it receives the label bound to each copied
  // instruction (labels[i - from]) and, last, one bound after the range.
  // Returns false with *error set (no Python error) if the range can't be
  // copied; instructions already emitted stay.
  bool copy_from(PyCodeObject* source, int from, int to,
                 const std::vector<int>& local_map,
                 const std::function<int(int)>& outside_target_label,
                 std::string* error, std::vector<int>* labels = nullptr);

  // Makes the instructions from start_label up to (not including)
  // end_label jump to handler_label on an exception, with the stack cut to
  // `depth` and, if lasti, the raising offset pushed below the exception.
  // Where entries overlap the one added later wins (add outer ones first).
  void add_exception_entry(int start_label, int end_label, int handler_label,
                           int depth, bool lasti);

  // Number of logical instructions emitted so far.
  int size() const { return static_cast<int>(instructions_.size()); }
  // The first error made while emitting, or "".
  const std::string& error() const { return error_; }

  // What assemble() produces.
  struct Assembled {
    std::string code;            // co_code
    std::string linetable;       // co_linetable
    std::string exceptiontable;  // co_exceptiontable
    int stacksize = -1;          // -1 unless the table is the running one
    std::vector<int> offsets;    // code-unit offset of each logical instruction
  };
  // Steps 1-4 of Note [Bytecode builder]; false with *error set (no Python
  // error) on failure.
  bool assemble(Assembled* out, std::string* error) const;

  // Assembles and makes the code object with `layout` (its names become
  // co_varnames/co_cellvars/co_freevars), name and qualname (null: name).
  // Returns a new reference, or null with a Python exception set.
  PyObject* build(const CodeLayout& layout, const char* name,
                  const char* qualname = nullptr);

 private:
  // Version-neutral jump kinds.
  enum class JumpKind : uint8_t {
    None,
    Jump,
    JumpNoInterrupt,
    PopJumpIfFalse,
    PopJumpIfTrue,
    PopJumpIfNone,
    PopJumpIfNotNone,
    JumpIfFalseOrPop,
    JumpIfTrueOrPop,
    ForIter,
    ForwardOnly,  // another forward-only jump opcode (SEND), copied raw
  };
  struct Logical {
    int opcode = 0;           // the opcode (for jumps: ForwardOnly's opcode)
    int arg = 0;              // final oparg; unused for jumps
    JumpKind jump = JumpKind::None;
    int label = -1;           // jump target
    SourcePosition position;
  };
  struct ExceptionEntry {
    int start_label, end_label, handler_label, depth;
    bool lasti;
  };
  struct Real;  // an expanded instruction, defined in the .cpp

  void fail(const std::string& message);
  void add(int opcode, int arg);
  void add_jump(JumpKind kind, int opcode, int label);
  bool expand(std::vector<Real>* out, std::vector<int>* first_real,
              std::string* error) const;

  const OpcodeTable* table_;
  base::PyRef like_;
  int first_line_ = -1;
  SourcePosition position_;
  bool check_unbound_ = false;
  std::vector<Logical> instructions_;
  std::vector<int> label_positions_;  // logical index, or -1 while unbound
  std::vector<ExceptionEntry> exception_entries_;
  std::vector<base::PyRef> consts_;
  std::vector<base::PyRef> names_;
  base::PyRef const_index_;  // dict: dedup key -> index
  base::PyRef name_index_;   // dict: str -> index
  std::string error_;
};

}  // namespace kiln::cpython
