// Tests of the bytecode decoder and the per-version opcode tables. They run in
// the embedded interpreter (3.11 in CI); the other version is covered by the
// checked-in references from gen_opcode_reference.py: opcodes_3NN.txt for the
// tables and decode_samples_3NN.txt for decoding that version's bytecode.
#include <Python.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cpython/bytecode_decoder.h"
#include "cpython/instruction.h"
#include "cpython/opcode_table.h"

namespace kiln::cpython {
namespace {

struct PyDecRef {
  void operator()(PyObject* object) const { Py_XDECREF(object); }
};
using PyPtr = std::unique_ptr<PyObject, PyDecRef>;

// Takes the pending Python exception as text, so failures say what broke.
std::string take_python_error() {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = "<no Python error>";
  if (value != nullptr) {
    PyPtr str(PyObject_Str(value));
    const char* utf8 = str ? PyUnicode_AsUTF8(str.get()) : nullptr;
    text = utf8 != nullptr ? utf8 : "<unprintable Python error>";
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return text;
}

// Runs source in a fresh module namespace and returns that namespace.
PyPtr run_module(const std::string& source) {
  PyPtr globals(PyDict_New());
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyPtr result(PyRun_String(source.c_str(), Py_file_input, globals.get(),
                            globals.get()));
  if (!result) ADD_FAILURE() << "Python failed: " << take_python_error();
  return globals;
}

// Compiles source and returns the code object of its function f.
PyPtr compile_function(const std::string& source) {
  PyPtr globals = run_module(source);
  PyObject* function = PyDict_GetItemString(globals.get(), "f");
  if (function == nullptr) {
    ADD_FAILURE() << "source defines no f:\n" << source;
    return nullptr;
  }
  return PyPtr(PyObject_GetAttrString(function, "__code__"));
}

PyCodeObject* as_code(const PyPtr& object) {
  return reinterpret_cast<PyCodeObject*>(object.get());
}

// co_names of a code object as strings.
std::vector<std::string> code_names(const PyPtr& code) {
  PyPtr names(PyObject_GetAttrString(code.get(), "co_names"));
  std::vector<std::string> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names.get()); ++i)
    out.push_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names.get(), i)));
  return out;
}

// repr() of co_consts[index].
std::string const_repr(const PyPtr& code, int index) {
  PyPtr consts(PyObject_GetAttrString(code.get(), "co_consts"));
  PyPtr repr(PyObject_Repr(PyTuple_GetItem(consts.get(), index)));
  return PyUnicode_AsUTF8(repr.get());
}

// What dis says about one instruction, with EXTENDED_ARG and CACHE folded
// away the way kiln folds them. arg is -1 where dis has none; line is
// kNoLine where the source of the expectation has no line numbers.
struct Expected {
  int offset;
  std::string name;
  int arg;
  int target;
  int line;
};
constexpr int kNoLine = -1000;

void expect_matches_dis(const std::vector<Instruction>& got,
                        const std::vector<Expected>& want,
                        const std::string& label) {
  ASSERT_EQ(got.size(), want.size()) << label;
  for (size_t i = 0; i < got.size(); ++i) {
    const Instruction& ins = got[i];
    const Expected& exp = want[i];
    SCOPED_TRACE(label + " instruction " + std::to_string(i) + " " + exp.name);
    EXPECT_EQ(ins.index, static_cast<int>(i));
    EXPECT_EQ(ins.offset, exp.offset);
    EXPECT_STREQ(ins.raw_name, exp.name.c_str());
    EXPECT_EQ(ins.raw_arg, exp.arg < 0 ? 0 : exp.arg);
    EXPECT_EQ(ins.target, exp.target);
    if (exp.line != kNoLine) {
      EXPECT_EQ(ins.line, exp.line);
    }
  }
}

// dis.get_instructions of a live code object, folded like Expected says.
constexpr const char* kDisFactsSource = R"(
import dis
def dis_facts(code):
    instructions = list(dis.get_instructions(code))
    index_at, index = {}, 0
    for i in instructions:
        index_at[i.offset] = index
        if i.opname != "EXTENDED_ARG":
            index += 1
    facts = []
    for i in instructions:
        if i.opname == "EXTENDED_ARG":
            continue
        jump = i.opcode in dis.hasjrel or i.opcode in dis.hasjabs
        line = i.positions.lineno
        facts.append((i.offset, i.opname, -1 if i.arg is None else i.arg,
                      index_at[i.argval] if jump else -1,
                      -1 if line is None else line, i.argrepr))
    return facts
)";

struct DisFact {
  Expected expected;
  std::string argrepr;
};

std::vector<DisFact> live_dis(const PyPtr& code) {
  static PyObject* dis_facts = [] {
    PyPtr globals = run_module(kDisFactsSource);
    PyObject* function = PyDict_GetItemString(globals.get(), "dis_facts");
    Py_XINCREF(function);
    return function;  // kept for the whole test run
  }();
  std::vector<DisFact> out;
  PyPtr facts(PyObject_CallOneArg(dis_facts, code.get()));
  if (!facts) {
    ADD_FAILURE() << take_python_error();
    return out;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(facts.get()); ++i) {
    PyObject* fact = PyList_GET_ITEM(facts.get(), i);
    const auto number = [&](int k) {
      return static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(fact, k)));
    };
    const auto text = [&](int k) {
      return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(fact, k)));
    };
    out.push_back(
        {{number(0), text(1), number(2), number(3), number(4)}, text(5)});
  }
  return out;
}

std::vector<Expected> expectations(const std::vector<DisFact>& facts) {
  std::vector<Expected> out;
  for (const DisFact& fact : facts) out.push_back(fact.expected);
  return out;
}

// The reference files live beside this source file; CMake names the source
// tree, and __FILE__ serves builds outside it.
std::filesystem::path data_dir() {
#ifdef KILN_SOURCE_DIR
  return std::filesystem::path(KILN_SOURCE_DIR) / "tests/cpp/cpython";
#else
  return std::filesystem::path(__FILE__).parent_path();
#endif
}

// One function of decode_samples_3NN.txt.
struct Sample {
  std::vector<std::string> names;
  std::vector<uint8_t> code;
  std::vector<Expected> expected;
};

std::map<std::string, Sample> load_samples(int minor) {
  const auto path = data_dir() / ("decode_samples_3" + std::to_string(minor) + ".txt");
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::map<std::string, Sample> samples;
  Sample* current = nullptr;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string head;
    fields >> head;
    if (head.empty() || head[0] == '#' || head == "end") continue;
    if (head == "sample") {
      std::string key;
      fields >> key;
      current = &samples[key];
    } else if (head == "names") {
      for (std::string name; fields >> name;) current->names.push_back(name);
    } else if (head == "code") {
      std::string hex;
      fields >> hex;
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        current->code.push_back(
            static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    } else {
      Expected exp{};
      fields >> exp.offset >> exp.name >> exp.arg >> exp.target;
      exp.line = kNoLine;
      current->expected.push_back(exp);
    }
  }
  return samples;
}

std::vector<Instruction> decode_sample(int minor, const Sample& sample) {
  return decode_code_units(opcode_table(minor), sample.code.data(),
                           sample.code.size());
}

std::vector<Instruction> without_nops(const std::vector<Instruction>& in) {
  std::vector<Instruction> out;
  for (const Instruction& ins : in)
    if (ins.op != Op::Nop && ins.op != Op::Resume && ins.op != Op::CallSetup) out.push_back(ins);
  return out;
}

std::vector<Op> ops_of(const std::vector<Instruction>& in) {
  std::vector<Op> out;
  for (const Instruction& ins : in) out.push_back(ins.op);
  return out;
}

std::string ops_text(const std::vector<Op>& ops) {
  std::string text;
  for (Op op : ops) text += std::string(op_name(op)) + " ";
  return text;
}

// The first instruction named raw_name, skipping `skip` earlier ones.
const Instruction* find_raw(const std::vector<Instruction>& in,
                            const std::string& raw_name, int skip = 0) {
  for (const Instruction& ins : in)
    if (ins.raw_name == raw_name && skip-- == 0) return &ins;
  return nullptr;
}

int index_of(const std::vector<std::string>& names, const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? -1 : static_cast<int>(it - names.begin());
}

// ---------------------------------------------------------------------------
// Op names and tables

TEST(InstructionTest, OpNamesComeFromTheOpList) {
  EXPECT_STREQ(op_name(Op::LoadFast), "LoadFast");
  EXPECT_STREQ(op_name(Op::GetLen), "GetLen");
  std::set<std::string> names;
#define KILN_TEST_OP(name, doc) \
  EXPECT_STREQ(op_name(Op::name), #name); \
  names.insert(op_name(Op::name));
  KILN_OP_LIST(KILN_TEST_OP)
#undef KILN_TEST_OP
  EXPECT_GT(names.size(), 60u);
}

// Compares a table with an opcodes_3NN.txt reference, number by number.
void check_table_against_reference(int minor) {
  const OpcodeTable& table = opcode_table(minor);
  EXPECT_EQ(table.minor, minor);
  const auto path = data_dir() / ("opcodes_3" + std::to_string(minor) + ".txt");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::map<int, std::pair<std::string, std::pair<int, std::string>>> reference;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (line.rfind("# have_argument ", 0) == 0) {
      EXPECT_EQ(table.have_argument, std::stoi(line.substr(16)));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    int number = 0, caches = 0;
    std::string name, categories;
    fields >> number >> name >> caches >> categories;
    reference[number] = {name, {caches, "," + categories + ","}};
  }
  ASSERT_GT(reference.size(), 100u);
  for (int number = 0; number < 256; ++number) {
    const OpcodeInfo& info = table.ops[number];
    SCOPED_TRACE("3." + std::to_string(minor) + " opcode " + std::to_string(number));
    auto it = reference.find(number);
    if (it == reference.end()) {
      EXPECT_EQ(info.name, nullptr);
      EXPECT_EQ(info.op, Op::Unsupported);
      continue;
    }
    const std::string& name = it->second.first;
    const std::string& cats = it->second.second.second;
    const auto has = [&](const char* cat) {
      return cats.find("," + std::string(cat) + ",") != std::string::npos;
    };
    ASSERT_NE(info.name, nullptr) << name;
    EXPECT_EQ(std::string(info.name), name);
    EXPECT_EQ(info.cache_entries, it->second.second.first) << name;
    EXPECT_EQ(info.operand == Operand::Const, has("const")) << name;
    EXPECT_EQ(info.operand == Operand::Name, has("name")) << name;
    EXPECT_EQ(info.operand == Operand::Local, has("local")) << name;
    EXPECT_EQ(info.operand == Operand::Free, has("free")) << name;
    EXPECT_EQ(info.operand == Operand::Compare, has("compare")) << name;
    EXPECT_FALSE(has("jabs")) << name << ": absolute jumps are not decoded";
    const bool backward = name.find("JUMP_BACKWARD") != std::string::npos;
    EXPECT_EQ(info.operand == Operand::JumpForward, has("jrel") && !backward)
        << name;
    EXPECT_EQ(info.operand == Operand::JumpBackward, has("jrel") && backward)
        << name;
    if (name.rfind("INSTRUMENTED_", 0) == 0) {
      EXPECT_EQ(info.op, Op::Unsupported);
    }
  }
  EXPECT_STREQ(table.ops[table.extended_arg].name, "EXTENDED_ARG");
  EXPECT_STREQ(table.ops[table.cache].name, "CACHE");
}

TEST(OpcodeTableTest, Table311MatchesReference) {
  check_table_against_reference(11);
}

TEST(OpcodeTableTest, Table312MatchesReference) {
  check_table_against_reference(12);
}

TEST(OpcodeTableTest, RunningTableMatchesLiveDis) {
  PyPtr globals = run_module(
      "import dis, opcode\n"
      "names = list(dis.opname)\n"
      "caches = list(opcode._inline_cache_entries)\n"
      "jrel = set(dis.hasjrel)\n"
      "have_argument = dis.HAVE_ARGUMENT\n");
  const OpcodeTable& table = running_opcode_table();
  PyObject* names = PyDict_GetItemString(globals.get(), "names");
  PyObject* caches = PyDict_GetItemString(globals.get(), "caches");
  PyObject* jrel = PyDict_GetItemString(globals.get(), "jrel");
  ASSERT_NE(names, nullptr);
  EXPECT_EQ(table.have_argument,
            PyLong_AsLong(PyDict_GetItemString(globals.get(), "have_argument")));
  for (int number = 0; number < 256; ++number) {
    SCOPED_TRACE("opcode " + std::to_string(number));
    const std::string dis_name = PyUnicode_AsUTF8(PyList_GET_ITEM(names, number));
    const OpcodeInfo& info = table.ops[number];
    if (dis_name[0] == '<') {
      EXPECT_EQ(info.name, nullptr) << dis_name;
      continue;
    }
    ASSERT_NE(info.name, nullptr) << dis_name;
    EXPECT_EQ(dis_name, info.name);
    EXPECT_EQ(info.cache_entries, PyLong_AsLong(PyList_GET_ITEM(caches, number)));
    PyPtr key(PyLong_FromLong(number));
    const bool is_jrel = PySet_Contains(jrel, key.get()) == 1;
    EXPECT_EQ(is_jrel, info.operand == Operand::JumpForward ||
                           info.operand == Operand::JumpBackward);
  }
}

TEST(OpcodeTableTest, EveryOpIsProducedBySomeOpcode) {
  std::set<Op> produced;
  for (int minor : {11, 12}) {
    const OpcodeTable& table = opcode_table(minor);
    for (const OpcodeInfo& info : table.ops) produced.insert(info.op);
    for (const IntrinsicInfo& info : table.intrinsic1) produced.insert(info.op);
  }
#define KILN_TEST_OP(name, doc) EXPECT_EQ(produced.count(Op::name), 1u) << #name;
  KILN_OP_LIST(KILN_TEST_OP)
#undef KILN_TEST_OP
}

TEST(OpcodeTableTest, VersionSpecificMappings) {
  const OpcodeTable& t11 = opcode_table(11);
  const OpcodeTable& t12 = opcode_table(12);
  const auto by_name = [](const OpcodeTable& table, const std::string& name) {
    for (const OpcodeInfo& info : table.ops)
      if (info.name != nullptr && name == info.name) return info;
    ADD_FAILURE() << "no opcode " << name << " in 3." << table.minor;
    return OpcodeInfo{};
  };
  EXPECT_EQ(by_name(t11, "LOAD_METHOD").op, Op::LoadAttr);
  EXPECT_EQ(by_name(t11, "LOAD_METHOD").flags, kMethod);
  EXPECT_EQ(by_name(t11, "PRECALL").op, Op::CallSetup);
  EXPECT_EQ(by_name(t11, "RESUME").op, Op::Resume);
  EXPECT_EQ(by_name(t11, "POP_JUMP_BACKWARD_IF_FALSE").op, Op::PopJumpIfFalse);
  EXPECT_EQ(by_name(t11, "JUMP_BACKWARD_NO_INTERRUPT").op, Op::Jump);
  EXPECT_EQ(by_name(t11, "LOAD_NAME").op, Op::Unsupported);
  EXPECT_EQ(by_name(t11, "PUSH_EXC_INFO").op, Op::PushExcInfo);
  EXPECT_EQ(by_name(t11, "LOAD_BUILD_CLASS").op, Op::Unsupported);
  EXPECT_EQ(by_name(t12, "LOAD_FAST_CHECK").op, Op::LoadFast);
  EXPECT_EQ(by_name(t12, "LOAD_SUPER_ATTR").op, Op::LoadSuperAttr);
  EXPECT_EQ(by_name(t11, "MATCH_CLASS").op, Op::MatchClass);
  EXPECT_EQ(by_name(t12, "INSTRUMENTED_CALL").op, Op::Unsupported);
  EXPECT_EQ(by_name(t12, "END_FOR").op, Op::EndFor);
  EXPECT_EQ(t12.intrinsic1[6].op, Op::ListToTuple);
  EXPECT_EQ(t12.intrinsic1[5].op, Op::UnaryPositive);
  EXPECT_EQ(t12.intrinsic1[1].op, Op::CallIntrinsic1);
  EXPECT_THROW(opcode_table(10), std::invalid_argument);
  EXPECT_THROW(opcode_table(13), std::invalid_argument);
}

// ---------------------------------------------------------------------------
// Decoding checked-in bytecode of both versions

void check_samples_against_dis(int minor) {
  const auto samples = load_samples(minor);
  ASSERT_GE(samples.size(), 9u);
  for (const auto& [key, sample] : samples)
    expect_matches_dis(decode_sample(minor, sample), sample.expected,
                       "3." + std::to_string(minor) + " sample " + key);
}

TEST(DecodeSamplesTest, Python311BytecodeMatchesDis) {
  check_samples_against_dis(11);
}

TEST(DecodeSamplesTest, Python312BytecodeMatchesDis) {
  check_samples_against_dis(12);
}

class BothVersions : public ::testing::TestWithParam<int> {
 protected:
  std::vector<Instruction> decode(const std::string& key) {
    samples_ = load_samples(GetParam());
    const auto it = samples_.find(key);
    EXPECT_NE(it, samples_.end()) << key;
    if (it == samples_.end()) return {};
    names_ = it->second.names;
    return decode_sample(GetParam(), it->second);
  }
  int name_index(const std::string& name) { return index_of(names_, name); }
  bool is_312() const { return GetParam() == 12; }

  std::map<std::string, Sample> samples_;
  std::vector<std::string> names_;
};

TEST_P(BothVersions, AddIsTheSameStreamOnEveryVersion) {
  const auto code = decode("add");
  ASSERT_EQ(code.size(), 5u);
  EXPECT_EQ(ops_of(code), (std::vector<Op>{Op::Resume, Op::LoadFast, Op::LoadFast,
                                          Op::BinaryOp, Op::ReturnValue}));
  EXPECT_STREQ(code[0].raw_name, "RESUME");
  EXPECT_EQ(code[1].arg, 0);
  EXPECT_EQ(code[2].arg, 1);
  EXPECT_EQ(code[3].arg, 0);  // NB_ADD
  for (const Instruction& ins : code) EXPECT_EQ(ins.target, -1);
}

TEST_P(BothVersions, CallsNormalizeMethodsGlobalsAndKeywords) {
  const auto code = without_nops(decode("calls"));
  const std::vector<Op> want = {
      Op::LoadGlobal, Op::LoadFast, Op::LoadAttr, Op::LoadConst,
      Op::LoadConst,  Op::KwNames,  Op::Call,     Op::Call,
      Op::LoadFast,   Op::LoadAttr, Op::BinaryOp, Op::ReturnValue};
  ASSERT_EQ(ops_of(code), want) << ops_text(ops_of(code));
  EXPECT_EQ(code[0].arg, name_index("len"));
  EXPECT_EQ(code[0].flags, kPushNull);
  EXPECT_EQ(code[2].arg, name_index("foo"));
  EXPECT_EQ(code[2].flags, kMethod);
  EXPECT_STREQ(code[2].raw_name, is_312() ? "LOAD_ATTR" : "LOAD_METHOD");
  EXPECT_EQ(code[6].arg, 2);  // foo(1, k=2): two arguments
  EXPECT_EQ(code[7].arg, 1);
  EXPECT_EQ(code[9].arg, name_index("bar"));
  EXPECT_EQ(code[9].flags, 0);
}

TEST_P(BothVersions, BranchesCompareAndShortCircuit) {
  const auto code = decode("branches");
  const Instruction* lt = find_raw(code, "COMPARE_OP", 0);
  const Instruction* ne = find_raw(code, "COMPARE_OP", 1);
  ASSERT_TRUE(lt && ne);
  EXPECT_EQ(lt->arg, Py_LT);
  EXPECT_EQ(ne->arg, Py_NE);
  // `if a < b and b != 3` jumps twice to the else branch `c = b`.
  const Instruction& jump = code[lt->index + 1];
  EXPECT_EQ(jump.op, Op::PopJumpIfFalse);
  const Instruction& else_start = code[jump.target];
  EXPECT_EQ(else_start.op, Op::LoadFast);
  EXPECT_EQ(else_start.arg, 1);
  EXPECT_EQ(code[ne->index + 1].target, jump.target);
  // `return c or a`: 3.11 has JUMP_IF_TRUE_OR_POP, 3.12 COPY + POP_JUMP_IF_TRUE.
  const Instruction& ret = code.back();
  ASSERT_EQ(ret.op, Op::ReturnValue);
  const Op or_op = is_312() ? Op::PopJumpIfTrue : Op::JumpIfTrueOrPop;
  const auto it = std::find_if(code.begin(), code.end(),
                               [&](const Instruction& i) { return i.op == or_op; });
  ASSERT_NE(it, code.end());
  EXPECT_EQ(it->target, ret.index);
  if (is_312()) {
    EXPECT_EQ(code[it->index - 1].op, Op::Copy);
  }
}

TEST_P(BothVersions, LoopsTargetTheRightInstructions) {
  const auto code = decode("loops");
  const Instruction* for_iter = find_raw(code, "FOR_ITER");
  ASSERT_NE(for_iter, nullptr);
  EXPECT_EQ(for_iter->op, Op::ForIter);
  ASSERT_GE(for_iter->target, 0);
  // The instruction after the loop is `while t > 10`'s LOAD_FAST t; 3.12 puts
  // END_FOR between, and that is what the target names.
  const Instruction* after_loop = &code[for_iter->target];
  if (is_312()) {
    EXPECT_EQ(after_loop->op, Op::EndFor);
    after_loop = &code[for_iter->target + 1];
  }
  EXPECT_EQ(after_loop->op, Op::LoadFast);
  EXPECT_EQ(after_loop->arg, 1);  // t
  // `continue` and the end of the body both jump back to FOR_ITER.
  int back_to_for = 0;
  for (const Instruction& ins : code)
    if (ins.op == Op::Jump && ins.target == for_iter->index) ++back_to_for;
  EXPECT_EQ(back_to_for, 2);
  // `x is None` tests with a none-jump over `continue`.
  const auto none_jump = std::find_if(code.begin(), code.end(), [](const auto& i) {
    return i.op == Op::PopJumpIfNotNone;
  });
  ASSERT_NE(none_jump, code.end());
  EXPECT_GT(none_jump->target, none_jump->index);
  // The while loop jumps back to its body's first LOAD_FAST t.
  const Instruction& last_jump = *std::find_if(
      code.rbegin(), code.rend(), [](const auto& i) { return i.target >= 0; });
  EXPECT_LT(last_jump.target, last_jump.index);
  EXPECT_GT(last_jump.target, for_iter->target);
  EXPECT_EQ(code[last_jump.target].op, Op::LoadFast);
  EXPECT_EQ(code[last_jump.target].arg, 1);
}

TEST_P(BothVersions, IntrinsicsBecomeTheOpsTheyReplaced) {
  const auto code = without_nops(decode("intrinsics"));
  const std::vector<Op> want = {Op::BuildList,  Op::LoadFast,      Op::ListExtend,
                                Op::LoadFast,   Op::UnaryPositive, Op::ListAppend,
                                Op::ListToTuple, Op::ReturnValue};
  ASSERT_EQ(ops_of(code), want) << ops_text(ops_of(code));
  EXPECT_EQ(code[4].arg, 0);
  EXPECT_EQ(code[6].arg, 0);
  EXPECT_STREQ(code[6].raw_name, is_312() ? "CALL_INTRINSIC_1" : "LIST_TO_TUPLE");
}

TEST_P(BothVersions, ComprehensionsInlineOnlyOn312) {
  const auto code = decode("comprehension");
  const auto has = [&](Op op) {
    return std::any_of(code.begin(), code.end(),
                       [&](const Instruction& i) { return i.op == op; });
  };
  EXPECT_EQ(has(Op::LoadFastAndClear), is_312());
  EXPECT_EQ(has(Op::MakeFunction), !is_312());
}

TEST_P(BothVersions, StoresDeletesAndImplicitReturn) {
  const auto code = decode("store");
  const Instruction* store = find_raw(code, "STORE_ATTR");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->op, Op::StoreAttr);
  EXPECT_EQ(store->arg, name_index("y"));
  const Instruction* del = find_raw(code, "DELETE_FAST");
  ASSERT_NE(del, nullptr);
  EXPECT_EQ(del->op, Op::DeleteFast);
  // After a conditional del, 3.12 loads x with LOAD_FAST_CHECK.
  const Instruction& load = code[del->index + 1 + 1];
  EXPECT_EQ(load.op, Op::LoadFast);
  EXPECT_STREQ(load.raw_name, is_312() ? "LOAD_FAST_CHECK" : "LOAD_FAST");
  const Instruction& ret = code.back();
  EXPECT_EQ(ret.op, is_312() ? Op::ReturnConst : Op::ReturnValue);
}

TEST_P(BothVersions, LongJumpsUseExtendedArg) {
  const auto code = decode("long_jumps");
  const Instruction& if_jump = code[2];
  ASSERT_EQ(if_jump.op, Op::PopJumpIfFalse);
  EXPECT_GT(if_jump.raw_arg, 255);
  EXPECT_EQ(if_jump.offset, 6);  // its own offset, after the prefix at 4
  // The if body is 70 statements of four instructions each.
  EXPECT_EQ(if_jump.target, 3 + 70 * 4);
  for (const Instruction& ins : code) EXPECT_STRNE(ins.raw_name, "EXTENDED_ARG");
}

TEST_P(BothVersions, ManyLocalsFoldExtendedArgIntoArguments) {
  const auto code = decode("many_locals");
  // v299 = 299 is the 300th statement; co_consts[0] is None.
  const Instruction& load = code[1 + 2 * 299];
  const Instruction& store = code[2 + 2 * 299];
  EXPECT_EQ(load.op, Op::LoadConst);
  EXPECT_EQ(load.raw_arg, 300);
  EXPECT_EQ(load.arg, 300);
  EXPECT_EQ(store.op, Op::StoreFast);
  EXPECT_EQ(store.arg, 299);
  EXPECT_EQ(store.offset - load.offset, 4);  // one EXTENDED_ARG between
  // The while loop jumps back onto an EXTENDED_ARG prefix; the target is the
  // LOAD_FAST v299 it extends.
  const Instruction& back = *std::find_if(
      code.rbegin(), code.rend(), [](const auto& i) { return i.target >= 0; });
  EXPECT_LT(back.target, back.index);
  EXPECT_EQ(code[back.target].op, Op::LoadFast);
  EXPECT_EQ(code[back.target].arg, 299);
}

INSTANTIATE_TEST_SUITE_P(Python3, BothVersions, ::testing::Values(11, 12),
                         [](const auto& info) {
                           return "Minor" + std::to_string(info.param);
                         });

TEST(DecodeCodeUnitsTest, NeverFailsOnOddBytes) {
  const OpcodeTable& table = opcode_table(11);
  // An unnamed opcode, a jump past the end, then a dangling EXTENDED_ARG and
  // a lone odd byte.
  const uint8_t bytes[] = {200, 7, 110, 50, 144, 1, 9};
  const auto code = decode_code_units(table, bytes, sizeof(bytes));
  ASSERT_EQ(code.size(), 3u);
  EXPECT_EQ(code[0].op, Op::Unsupported);
  EXPECT_STREQ(code[0].raw_name, "<opcode 200>");
  EXPECT_EQ(code[0].raw_arg, 7);
  EXPECT_EQ(code[1].op, Op::Jump);
  EXPECT_EQ(code[1].target, -1);
  EXPECT_STREQ(code[2].raw_name, "EXTENDED_ARG");
  EXPECT_TRUE(decode_code_units(table, bytes, 0).empty());
}

// ---------------------------------------------------------------------------
// Decoding live code objects of the running interpreter

TEST(DecodeBytecodeTest, AddFunction) {
  PyPtr code = compile_function("def f(x, y):\n    return x + y\n");
  const auto ins = decode_bytecode(as_code(code));
  ASSERT_EQ(ins.size(), 5u);
  EXPECT_EQ(ops_of(ins), (std::vector<Op>{Op::Resume, Op::LoadFast, Op::LoadFast,
                                         Op::BinaryOp, Op::ReturnValue}));
  EXPECT_EQ(ins[0].line, 1);
  for (size_t i = 1; i < ins.size(); ++i) EXPECT_EQ(ins[i].line, 2);
  EXPECT_EQ(ins[3].arg, 0);  // NB_ADD
  EXPECT_EQ(ins[1].offset, 2);
}

// Functions whose live decoding is compared with dis, instruction by
// instruction, including line numbers.
const char* const kLiveSources[] = {
    "def f(x, y):\n    return x + y\n",
    "def f(x):\n    return len(x.foo(1, k=2)) + x.bar\n",
    "def f(a, b):\n    if a < b and b != 3:\n        c = a\n    else:\n"
    "        c = b\n    return c or a\n",
    "def f(xs):\n    t = 0\n    for x in xs:\n        if x is None:\n"
    "            continue\n        t += x\n    while t > 10:\n        t -= 1\n"
    "    return t\n",
    "def f(x):\n    def g(y):\n        return x + y\n    return g\n",
    "def f(x):\n    try:\n        return 1 / x\n    except ZeroDivisionError:\n"
    "        return None\n",
    "def f(p):\n    with open(p) as fh:\n        return fh.read()\n",
    "def f(xs):\n    return {k: v for k, v in xs if k not in ('a', 'b')}\n",
    "def f(a, *args, **kwargs):\n    return a(*args, **kwargs)\n",
    "def f(a):\n    x, *y = a\n    a[1:2] = y\n    del a[0]\n    return f'{x!r:>10}'\n",
};

std::string many_locals_source() {
  std::string source = "def f(a):\n";
  for (int i = 0; i < 300; ++i)
    source += "    v" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  source += "    while v299 < a:\n        v299 = v299 + 1\n    return v299\n";
  return source;
}

TEST(DecodeBytecodeTest, LiveDecodingMatchesDis) {
  std::vector<std::string> sources(std::begin(kLiveSources), std::end(kLiveSources));
  sources.push_back(many_locals_source());
  for (const std::string& source : sources) {
    PyPtr code = compile_function(source);
    ASSERT_TRUE(code);
    expect_matches_dis(decode_bytecode(as_code(code)),
                       expectations(live_dis(code)), source.substr(0, 60));
  }
}

TEST(DecodeBytecodeTest, CompareOpsAreRichComparisonCodes) {
  PyPtr code = compile_function(
      "def f(a, b):\n    return (a < b, a <= b, a == b, a != b, a > b, a >= b)\n");
  std::vector<int> args;
  for (const Instruction& ins : decode_bytecode(as_code(code)))
    if (ins.op == Op::CompareOp) args.push_back(ins.arg);
  EXPECT_EQ(args, (std::vector<int>{Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE}));
}

TEST(DecodeBytecodeTest, GlobalsPushNullOnlyWhenCalled) {
  PyPtr code = compile_function("def f():\n    return (g, g())\n");
  const auto ins = without_nops(decode_bytecode(as_code(code)));
  const int g = index_of(code_names(code), "g");
  ASSERT_GE(ins.size(), 2u);
  EXPECT_EQ(ins[0].op, Op::LoadGlobal);
  EXPECT_EQ(ins[0].arg, g);
  EXPECT_EQ(ins[0].flags, 0);
  EXPECT_EQ(ins[1].op, Op::LoadGlobal);
  EXPECT_EQ(ins[1].arg, g);
  EXPECT_EQ(ins[1].flags, kPushNull);
}

TEST(DecodeBytecodeTest, KeywordNamesPointAtTheirConstant) {
  PyPtr code = compile_function("def f(x):\n    return g(x, k=1, j=2)\n");
  const auto ins = decode_bytecode(as_code(code));
  const Instruction* kw = find_raw(ins, "KW_NAMES");
  ASSERT_NE(kw, nullptr);
  EXPECT_EQ(kw->op, Op::KwNames);
  EXPECT_EQ(const_repr(code, kw->arg), "('k', 'j')");
  const Instruction* call = find_raw(ins, "CALL");
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->arg, 3);
}

TEST(DecodeBytecodeTest, UnsupportedConstructsAreMarked) {
  PyPtr code = compile_function(
      "def f(p):\n    import os\n    class C:\n        pass\n    with open(p) as fh:\n        return fh.read()\n");
  const auto ins = decode_bytecode(as_code(code));
  EXPECT_EQ(find_raw(ins, "IMPORT_NAME")->op, Op::ImportName);  // traced (Note [Imports])
  EXPECT_EQ(find_raw(ins, "LOAD_BUILD_CLASS")->op, Op::Unsupported);
  EXPECT_EQ(find_raw(ins, "BEFORE_WITH")->op, Op::BeforeWith);  // modelled for grad-mode contexts
  EXPECT_TRUE(has_exception_table(as_code(code)));
  PyPtr plain = compile_function("def f(x):\n    return x\n");
  EXPECT_FALSE(has_exception_table(as_code(plain)));
}

// ---------------------------------------------------------------------------
// Listing

TEST(FormatBytecodeTest, AddFunctionListing) {
  PyPtr code = compile_function("def f(x, y):\n    return x + y\n");
  EXPECT_EQ(format_bytecode(as_code(code)),
            "  0  RESUME               0\n"
            "  1  LOAD_FAST            x\n"
            "  2  LOAD_FAST            y\n"
            "  3  BINARY_OP            +\n"
            "  4  RETURN_VALUE\n");
}

TEST(FormatBytecodeTest, ResolvesNamesConstantsAndTargets) {
  PyPtr code = compile_function(
      "def f(x, n):\n"
      "    def inner():\n"
      "        return x\n"
      "    if x.y in {'c', 'a', 'b'}:\n"
      "        return len(x.foo())\n"
      "    return n < 3\n");
  const std::string text = format_bytecode(as_code(code));
  EXPECT_NE(text.find("<code inner>"), std::string::npos) << text;
  EXPECT_NE(text.find("frozenset({'a', 'b', 'c'})"), std::string::npos) << text;
  EXPECT_NE(text.find("NULL + len"), std::string::npos) << text;
  EXPECT_NE(text.find("NULL|self + foo"), std::string::npos) << text;
  EXPECT_NE(text.find("LOAD_DEREF           x"), std::string::npos) << text;
  EXPECT_NE(text.find("COMPARE_OP           <"), std::string::npos) << text;
  EXPECT_NE(text.find(" to "), std::string::npos) << text;
  EXPECT_EQ(text.find("0x"), std::string::npos) << text;
  EXPECT_EQ(text.find("CACHE"), std::string::npos) << text;
  EXPECT_EQ(format_bytecode(as_code(code)), text);
}

TEST(FormatBytecodeTest, JumpTargetsAreInstructionIndices) {
  PyPtr code = compile_function(
      "def f(xs):\n    for x in xs:\n        pass\n    return 0\n");
  const auto ins = decode_bytecode(as_code(code));
  const Instruction* for_iter = find_raw(ins, "FOR_ITER");
  ASSERT_NE(for_iter, nullptr);
  const std::string text = format_bytecode(as_code(code));
  EXPECT_NE(text.find("FOR_ITER             to " + std::to_string(for_iter->target) + "\n"),
            std::string::npos)
      << text;
}

// Local and free variable names must agree with dis, which knows CPython's
// localsplus layout; cells of arguments are the case that needs care.
TEST(FormatBytecodeTest, LocalNamesAgreeWithDis) {
  PyPtr code = compile_function(
      "def f(a, b, *c, d, **e):\n"
      "    g = 1\n"
      "    def h():\n"
      "        return b + g + d\n"
      "    k = lambda: e\n"
      "    return a, h, k, c\n");
  const auto ins = decode_bytecode(as_code(code));
  const auto facts = live_dis(code);
  ASSERT_EQ(ins.size(), facts.size());
  std::istringstream lines(format_bytecode(as_code(code)));
  std::map<int, std::string> argument_of;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    int index = 0;
    std::string name, argument;
    fields >> index >> name;
    std::getline(fields >> std::ws, argument);
    argument_of[index] = argument;
  }
  int checked = 0;
  const OpcodeTable& table = running_opcode_table();
  for (size_t i = 0; i < ins.size(); ++i) {
    const Operand operand = table.ops[ins[i].raw_opcode].operand;
    if (operand != Operand::Local && operand != Operand::Free) continue;
    EXPECT_EQ(argument_of[static_cast<int>(i)], facts[i].argrepr) << ins[i].raw_name;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace kiln::cpython
