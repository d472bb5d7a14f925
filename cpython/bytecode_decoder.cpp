// Bytecode decoding and listing; see Note [Decoding bytecode].
#include "cpython/bytecode_decoder.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

namespace kiln::cpython {
namespace {

// Owns one strong reference; the decoder's Python calls all return new ones.
class PyRef {
 public:
  explicit PyRef(PyObject* object) : object_(object) {}
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() { Py_XDECREF(object_); }
  PyObject* get() const { return object_; }

 private:
  PyObject* object_;
};

// Gives unknown opcodes a name with static storage, as Instruction::raw_name
// is a plain pointer that outlives the decoded stream.
const char* unknown_opcode_name(uint8_t opcode) {
  static const std::array<std::string, 256> names = [] {
    std::array<std::string, 256> result;
    for (size_t i = 0; i < result.size(); ++i)
      result[i] = "<opcode " + std::to_string(i) + ">";
    return result;
  }();
  return names[opcode].c_str();
}

void normalize_arg(const OpcodeTable& table, const OpcodeInfo& info,
                   Instruction& ins) {
  const uint32_t raw = static_cast<uint32_t>(ins.raw_arg);
  ins.op = info.op;
  ins.flags = info.flags;
  ins.arg = ins.raw_arg;
  switch (info.arg) {
    case ArgKind::Raw:
      break;
    case ArgKind::GlobalIndex:
      ins.arg = static_cast<int32_t>(raw >> 1);
      if (raw & 1) ins.flags |= kPushNull;
      break;
    case ArgKind::AttrIndex:
      ins.arg = static_cast<int32_t>(raw >> 1);
      if (raw & 1) ins.flags |= kMethod;
      break;
    case ArgKind::SuperAttrIndex:
      ins.arg = static_cast<int32_t>(raw >> 2);
      if (raw & 1) ins.flags |= kMethod;
      break;
    case ArgKind::CompareShift4:
      ins.arg = static_cast<int32_t>(raw >> 4);
      break;
    case ArgKind::Intrinsic1Op: {
      const IntrinsicInfo* intrinsic =
          raw < table.intrinsic1.size() ? &table.intrinsic1[raw] : nullptr;
      ins.op = intrinsic != nullptr && intrinsic->name != nullptr
                   ? intrinsic->op
                   : Op::Unsupported;
      // The ops that stand for a former opcode take no argument there.
      if (ins.op != Op::CallIntrinsic1 && ins.op != Op::Unsupported)
        ins.arg = 0;
      break;
    }
  }
}

// Python's str as UTF-8, or a placeholder for the impossible non-str.
std::string utf8(PyObject* text) {
  Py_ssize_t size = 0;
  const char* data =
      text != nullptr && PyUnicode_Check(text)
          ? PyUnicode_AsUTF8AndSize(text, &size)
          : nullptr;
  if (data == nullptr) {
    PyErr_Clear();
    return "<?>";
  }
  return std::string(data, static_cast<size_t>(size));
}

// repr() made independent of the run: code objects (whose repr holds an
// address) print as <code NAME> and frozensets (ordered by string hashes,
// which PYTHONHASHSEED randomizes) print their elements sorted.
std::string stable_repr(PyObject* value) {
  if (PyCode_Check(value)) {
    PyRef name(PyObject_GetAttrString(value, "co_name"));
    return "<code " + utf8(name.get()) + ">";
  }
  if (PyTuple_CheckExact(value)) {
    const Py_ssize_t size = PyTuple_GET_SIZE(value);
    std::string text = "(";
    for (Py_ssize_t i = 0; i < size; ++i) {
      if (i > 0) text += ", ";
      text += stable_repr(PyTuple_GET_ITEM(value, i));
    }
    return text + (size == 1 ? ",)" : ")");
  }
  if (PyFrozenSet_CheckExact(value)) {
    PyRef iterator(PyObject_GetIter(value));
    std::vector<std::string> items;
    while (iterator.get() != nullptr) {
      PyRef item(PyIter_Next(iterator.get()));
      if (item.get() == nullptr) break;
      items.push_back(stable_repr(item.get()));
    }
    PyErr_Clear();
    if (items.empty()) return "frozenset()";
    std::sort(items.begin(), items.end());
    std::string text = "frozenset({";
    for (size_t i = 0; i < items.size(); ++i)
      text += (i > 0 ? ", " : "") + items[i];
    return text + "})";
  }
  PyRef repr(PyObject_Repr(value));
  if (repr.get() == nullptr) {
    PyErr_Clear();
    return "<unrepresentable>";
  }
  return utf8(repr.get());
}

// The tables an instruction's argument indexes, fetched once per listing.
struct CodeNames {
  explicit CodeNames(PyCodeObject* code)
      : consts(PyObject_GetAttrString(reinterpret_cast<PyObject*>(code),
                                      "co_consts")),
        names(PyObject_GetAttrString(reinterpret_cast<PyObject*>(code),
                                     "co_names")) {
    PyErr_Clear();
    // CPython numbers fast locals, then cells that are not also arguments,
    // then free variables (co_varnames lists argument cells already).
    PyRef varnames(PyCode_GetVarnames(code));
    PyRef cellvars(PyCode_GetCellvars(code));
    PyRef freevars(PyCode_GetFreevars(code));
    PyErr_Clear();
    std::unordered_set<std::string> locals;
    for (PyObject* tuple : {varnames.get(), cellvars.get(), freevars.get()}) {
      if (tuple == nullptr || !PyTuple_Check(tuple)) continue;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) {
        std::string name = utf8(PyTuple_GET_ITEM(tuple, i));
        if (tuple == varnames.get()) {
          locals.insert(name);
        } else if (tuple == cellvars.get() && locals.count(name) != 0) {
          continue;
        }
        localsplus.push_back(std::move(name));
      }
    }
  }

  std::string item(const PyRef& tuple, int32_t index) const {
    if (tuple.get() == nullptr || !PyTuple_Check(tuple.get()) || index < 0 ||
        index >= PyTuple_GET_SIZE(tuple.get()))
      return "<index " + std::to_string(index) + ">";
    PyObject* value = PyTuple_GET_ITEM(tuple.get(), index);
    return &tuple == &names ? utf8(value) : stable_repr(value);
  }

  std::string local(int32_t index) const {
    if (index < 0 || static_cast<size_t>(index) >= localsplus.size())
      return "<local " + std::to_string(index) + ">";
    return localsplus[static_cast<size_t>(index)];
  }

  PyRef consts;
  PyRef names;
  std::vector<std::string> localsplus;
};

std::string operand_text(const OpcodeTable& table, const Instruction& ins,
                         const CodeNames& code_names) {
  static constexpr const char* kCompareOps[] = {"<", "<=", "==",
                                                "!=", ">", ">="};
  static constexpr const char* kBinaryOps[] = {
      "+",  "&",   "//",  "<<",  "@",   "*",   "%",  "|",  "**",
      ">>", "-",   "/",   "^",   "+=",  "&=",  "//=", "<<=", "@=",
      "*=", "%=",  "|=",  "**=", ">>=", "-=",  "/=",  "^="};
  static constexpr const char* kConversions[] = {"", "str", "repr", "ascii"};
  static constexpr const char* kFunctionFlags[] = {"defaults", "kwdefaults",
                                                   "annotations", "closure"};
  const OpcodeInfo& info = table.ops[ins.raw_opcode];
  const auto in_range = [](int32_t value, const auto& list) {
    return value >= 0 && static_cast<size_t>(value) < std::size(list);
  };
  switch (info.operand) {
    case Operand::None:
      return ins.raw_opcode >= table.have_argument ? std::to_string(ins.raw_arg)
                                                   : "";
    case Operand::Const:
      return code_names.item(code_names.consts, ins.arg);
    case Operand::Name: {
      std::string text = code_names.item(code_names.names, ins.arg);
      if (ins.flags & kPushNull) return "NULL + " + text;
      if (ins.flags & kMethod) return "NULL|self + " + text;
      return text;
    }
    case Operand::Local:
    case Operand::Free:
      return code_names.local(ins.arg);
    case Operand::Compare:
      return in_range(ins.arg, kCompareOps) ? kCompareOps[ins.arg]
                                            : std::to_string(ins.raw_arg);
    case Operand::JumpForward:
    case Operand::JumpBackward:
      return ins.target >= 0 ? "to " + std::to_string(ins.target) : "to ?";
    case Operand::BinaryOp:
      return in_range(ins.arg, kBinaryOps) ? kBinaryOps[ins.arg]
                                           : std::to_string(ins.raw_arg);
    case Operand::FormatValue: {
      std::string text = kConversions[ins.raw_arg & 3];
      if (ins.raw_arg & 4) text += text.empty() ? "with format" : ", with format";
      return text;
    }
    case Operand::MakeFunction: {
      std::string text;
      for (size_t bit = 0; bit < std::size(kFunctionFlags); ++bit) {
        if ((ins.raw_arg & (1 << bit)) == 0) continue;
        if (!text.empty()) text += ", ";
        text += kFunctionFlags[bit];
      }
      return text;
    }
    case Operand::Intrinsic1:
    case Operand::Intrinsic2: {
      const auto& intrinsics = info.operand == Operand::Intrinsic1
                                   ? table.intrinsic1
                                   : table.intrinsic2;
      if (in_range(ins.raw_arg, intrinsics) &&
          intrinsics[static_cast<size_t>(ins.raw_arg)].name != nullptr)
        return intrinsics[static_cast<size_t>(ins.raw_arg)].name;
      return std::to_string(ins.raw_arg);
    }
  }
  return std::to_string(ins.raw_arg);
}

}  // namespace

const OpcodeTable& opcode_table(int python_minor) {
  switch (python_minor) {
    case 11:
      return opcode_table_311();
    case 12:
      return opcode_table_312();
    default:
      throw std::invalid_argument("kiln has no opcode table for Python 3." +
                                  std::to_string(python_minor));
  }
}

const OpcodeTable& running_opcode_table() {
  // The build's headers fix PyCodeObject's layout and the C API, so the
  // interpreter kiln runs in is necessarily the one it was compiled for.
  return opcode_table(PY_MINOR_VERSION);
}

std::vector<Instruction> decode_code_units(const OpcodeTable& table,
                                           const uint8_t* bytes, size_t size) {
  const size_t units = size / 2;
  std::vector<Instruction> out;
  // Instruction index of every code unit an instruction starts with,
  // including its EXTENDED_ARG prefixes, which jumps may target.
  std::vector<int32_t> index_of_unit(units, -1);
  std::vector<int64_t> target_unit;  // parallel to out; -1 when not a jump
  size_t unit = 0;
  while (unit < units) {
    const size_t first_unit = unit;
    uint32_t raw_arg = 0;
    uint8_t opcode = bytes[2 * unit];
    // A trailing EXTENDED_ARG has nothing to extend and stays an instruction.
    while (opcode == table.extended_arg && unit + 1 < units) {
      raw_arg = (raw_arg | bytes[2 * unit + 1]) << 8;
      ++unit;
      opcode = bytes[2 * unit];
    }
    raw_arg |= bytes[2 * unit + 1];
    const OpcodeInfo& info = table.ops[opcode];

    Instruction ins;
    ins.index = static_cast<int32_t>(out.size());
    ins.offset = static_cast<int32_t>(2 * unit);
    ins.raw_opcode = opcode;
    ins.raw_arg = static_cast<int32_t>(raw_arg);
    ins.raw_name = info.name != nullptr ? info.name : unknown_opcode_name(opcode);
    normalize_arg(table, info, ins);

    // Relative jumps count from the end of the instruction's caches.
    const int64_t next = static_cast<int64_t>(unit + 1 + info.cache_entries);
    int64_t jump_to = -1;
    if (info.operand == Operand::JumpForward) jump_to = next + raw_arg;
    if (info.operand == Operand::JumpBackward) jump_to = next - raw_arg;
    target_unit.push_back(jump_to);

    for (size_t u = first_unit; u <= unit; ++u) index_of_unit[u] = ins.index;
    out.push_back(ins);
    unit = static_cast<size_t>(next);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t to = target_unit[i];
    if (to >= 0 && static_cast<size_t>(to) < units)
      out[i].target = index_of_unit[static_cast<size_t>(to)];
  }
  return out;
}

std::vector<Instruction> decode_bytecode(PyCodeObject* code) {
  PyRef bytes(PyCode_GetCode(code));
  if (bytes.get() == nullptr || !PyBytes_Check(bytes.get())) {
    PyErr_Clear();
    return {};
  }
  std::vector<Instruction> out = decode_code_units(
      running_opcode_table(),
      reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes.get())),
      static_cast<size_t>(PyBytes_GET_SIZE(bytes.get())));
  for (Instruction& ins : out) ins.line = PyCode_Addr2Line(code, ins.offset);
  return out;
}

// One line per instruction, CACHE excepted:
//   "  <index>  <RAW_NAME> <argument>\n"
// with the index right-aligned to the widest one, the name padded to 20
// columns when an argument follows (as dis does), and the argument resolved
// to a name, a constant's repr, "to <index>" or an operator. Nothing in it
// depends on addresses or byte offsets, so it is stable across runs.
std::string format_bytecode(PyCodeObject* code) {
  const OpcodeTable& table = running_opcode_table();
  const std::vector<Instruction> instructions = decode_bytecode(code);
  const CodeNames code_names(code);
  const size_t width =
      std::to_string(instructions.empty() ? 0 : instructions.size() - 1).size();
  std::string text;
  for (const Instruction& ins : instructions) {
    if (ins.raw_opcode == table.cache) continue;
    const std::string index = std::to_string(ins.index);
    text += "  " + std::string(width - index.size(), ' ') + index + "  ";
    text += ins.raw_name;
    const std::string argument = operand_text(table, ins, code_names);
    if (!argument.empty()) {
      const size_t name_size = std::string_view(ins.raw_name).size();
      text += std::string(name_size < 20 ? 20 - name_size : 0, ' ');
      text += " " + argument;
    }
    text += "\n";
  }
  return text;
}

bool has_exception_table(PyCodeObject* code) {
  PyRef table(PyObject_GetAttrString(reinterpret_cast<PyObject*>(code),
                                     "co_exceptiontable"));
  if (table.get() == nullptr || !PyBytes_Check(table.get())) {
    PyErr_Clear();
    return false;
  }
  return PyBytes_GET_SIZE(table.get()) > 0;
}

}  // namespace kiln::cpython
