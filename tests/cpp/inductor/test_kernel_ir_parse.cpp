// Tests of inductor/kernel_ir_parse.h: the text form reads back into the
// kernel it was written from (every expression kind and operator, every
// constant form), and malformed text fails naming the line and the fault.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "inductor/kernel_ir.h"
#include "inductor/kernel_ir_parse.h"

namespace kiln::inductor {
namespace {

// Field by field, constants by their bits (NaN and -0.0 included).
void expect_same_kernel(const Kernel& a, const Kernel& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.sizes, b.sizes);
  EXPECT_EQ(a.reduced, b.reduced);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].dtype, b.inputs[i].dtype) << "in" << i;
    EXPECT_EQ(a.inputs[i].strides, b.inputs[i].strides) << "in" << i;
    EXPECT_EQ(a.inputs[i].offset, b.inputs[i].offset) << "in" << i;
  }
  ASSERT_EQ(a.exprs.size(), b.exprs.size());
  for (size_t i = 0; i < a.exprs.size(); ++i) {
    const Expr &x = a.exprs[i], &y = b.exprs[i];
    EXPECT_EQ(x.kind, y.kind) << "%" << i;
    EXPECT_EQ(x.dtype, y.dtype) << "%" << i;
    EXPECT_EQ(x.op, y.op) << "%" << i;
    EXPECT_EQ(x.input, y.input) << "%" << i;
    EXPECT_EQ(std::memcmp(&x.constant, &y.constant, sizeof(double)), 0) << "%" << i << ": " << x.constant << " vs "
                                                                          << y.constant;
    EXPECT_EQ(x.integer, y.integer) << "%" << i;
    EXPECT_EQ(x.operands, y.operands) << "%" << i;
    EXPECT_EQ(x.strides, y.strides) << "%" << i;
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const KernelOutput &x = a.outputs[i], &y = b.outputs[i];
    EXPECT_EQ(x.dtype, y.dtype) << "out" << i;
    EXPECT_EQ(x.strides, y.strides) << "out" << i;
    EXPECT_EQ(x.value, y.value) << "out" << i;
    EXPECT_EQ(x.has_tensor_shape, y.has_tensor_shape) << "out" << i;
    EXPECT_EQ(x.tensor_sizes, y.tensor_sizes) << "out" << i;
    EXPECT_EQ(x.tensor_strides, y.tensor_strides) << "out" << i;
  }
}

// Every unary operator, on an operand of a dtype it takes.
Kernel every_unary() {
  Kernel k;
  k.name = "unary";
  k.sizes = {3, 5};
  const int x = k.load(k.add_input({DType::Float32, {5, 1}, 0}));
  const int b = k.load(k.add_input({DType::Bool, {0, 1}, 2}));
  const int n = k.load(k.add_input({DType::Int32, {1, 3}, 0}));
  int count = 0;
#define KILN_KERNEL_ENTRY(name, text, floating) ++count;
  KILN_KERNEL_UNARY_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
  for (int op = 0; op < count; ++op) {
    const UnaryOp u = static_cast<UnaryOp>(op);
    const int operand = u == UnaryOp::LogicalNot ? b : u == UnaryOp::Abs ? n : x;
    const int value = k.unary(u, operand);
    k.add_output({k.exprs[value].dtype, {5, 1}, value});
  }
  return k;
}

// Every binary operator and comparison, on operands of dtypes they take.
Kernel every_binary_and_compare() {
  Kernel k;
  k.name = "binary";
  k.sizes = {7};
  const int x = k.load(k.add_input({DType::Float64, {1}, 0}));
  const int y = k.load(k.add_input({DType::Float64, {-1}, 6}));
  const int p = k.load(k.add_input({DType::Bool, {1}, 0}));
  const int q = k.compare(CompareOp::Lt, x, y);
  const int i = k.load(k.add_input({DType::Int64, {1}, 0}));
  int count = 0;
#define KILN_KERNEL_ENTRY(name, text, floating) ++count;
  KILN_KERNEL_BINARY_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
  for (int op = 0; op < count; ++op) {
    const BinaryOp o = static_cast<BinaryOp>(op);
    const bool logical = o == BinaryOp::LogicalAnd || o == BinaryOp::LogicalOr || o == BinaryOp::LogicalXor;
    const bool bitwise = o == BinaryOp::BitwiseAnd || o == BinaryOp::BitwiseOr || o == BinaryOp::BitwiseXor;
    const bool index = o == BinaryOp::IndexDiv || o == BinaryOp::IndexMod;
    const int value = logical ? k.binary(o, p, q) : (bitwise || index) ? k.binary(o, i, i) : k.binary(o, x, y);
    k.add_output({k.exprs[value].dtype, {1}, value});
  }
  for (CompareOp op : {CompareOp::Eq, CompareOp::Ne, CompareOp::Lt, CompareOp::Le, CompareOp::Gt, CompareOp::Ge}) {
    k.add_output({DType::Bool, {1}, k.compare(op, x, y)});
  }
  k.add_output({DType::Float32, {1}, k.cast(k.select(q, x, y), DType::Float32)});
  return k;
}

// Constants of every form format_constant writes.
Kernel every_constant() {
  Kernel k;
  k.name = "constants";
  k.sizes = {};
  const double inf = std::numeric_limits<double>::infinity();
  for (double value : {1.0, -0.0, 0.1, 1e-7, 3.141592653589793, 1e300, -2.5e-310, inf, -inf,
                       std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN()}) {
    k.add_output({DType::Float64, {}, k.constant(DType::Float64, value)});
    k.add_output({DType::Float32, {}, k.constant(DType::Float32, value)});
  }
  for (DType dtype : {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}) {
    k.add_output({dtype, {}, k.constant(dtype, 0)});
    k.add_output({dtype, {}, k.constant(dtype, 1)});
  }
  k.add_output({DType::Int64, {}, k.constant(DType::Int64, -9007199254740992.0)});
  k.add_output({DType::Int8, {}, k.constant(DType::Int8, -128)});
  return k;
}

// Reductions of every operator over two reduced dims and a tile dim,
// index, casts to storage dtypes, and outputs with their tensor shapes.
Kernel reductions() {
  Kernel k;
  k.name = "reductions.tile-dim";  // any name without "(" or spaces reads back
  k.sizes = {2, 3, 4, 5};
  k.reduced = {1, 2};
  const int h = k.load(k.add_input({DType::BFloat16, {60, 20, 5, 1}, 7}));
  const int x = k.cast(h, DType::Float32);
  const int sum = k.reduce(ReduceOp::Sum, x);
  const int prod = k.reduce(ReduceOp::Prod, k.binary(BinaryOp::Sub, x, sum));
  const int max = k.reduce(ReduceOp::Max, x);
  const int at = k.index({0, 4, 1, 0});
  const int first = k.reduce(ReduceOp::Min, k.select(k.compare(CompareOp::Eq, x, max), at, k.constant(DType::Int64, 12)));
  k.add_output({DType::Float16, {5, 0, 0, 1}, k.cast(prod, DType::Float16)});
  k.add_output({DType::Int64, {5, 0, 0, 1}, first});
  KernelOutput varying{DType::BFloat16, {60, 20, 5, 1}, k.cast(k.binary(BinaryOp::Div, x, sum), DType::BFloat16)};
  varying.has_tensor_shape = true;
  varying.tensor_sizes = {2, 12, 5};
  varying.tensor_strides = {60, 5, 1};
  k.add_output(varying);
  KernelOutput kept{DType::Float32, {5, 0, 0, 1}, max, true, {2, 1, 5}, {5, 5, 1}};
  k.add_output(kept);
  return k;
}

// Loads at computed indices (Note [Loads at computed indices]): one index
// and two, the second made of a clamp over an Index.
Kernel loads_at() {
  Kernel k;
  k.name = "load_at";
  k.sizes = {4, 6};
  const int in = k.add_input({DType::BFloat16, {6, 0}, 2});
  const int at = k.index({0, 1});
  const int clamped = k.binary(BinaryOp::Minimum, at, k.constant(DType::Int64, 3));
  const int one = k.load_at(in, {clamped}, {1});
  const int two = k.load_at(in, {at, clamped}, {-1, 6});
  k.add_output({DType::BFloat16, {6, 1}, k.cast(k.binary(BinaryOp::Add, k.cast(one, DType::Float32),
                                                                  k.cast(two, DType::Float32)),
                                                       DType::BFloat16)});
  return k;
}

TEST(KernelIrParse, RoundTripsEveryExprKind) {
  for (const Kernel& k : {every_unary(), every_binary_and_compare(), every_constant(), reductions(), loads_at()}) {
    SCOPED_TRACE(k.name);
    ASSERT_EQ(verify(k), "") << format_kernel(k);
    const std::string text = format_kernel(k);
    const Kernel parsed = parse_kernel(text);
    EXPECT_EQ(format_kernel(parsed), text);
    expect_same_kernel(k, parsed);
  }
}

// Hand-written kernels (the codegen files, tests/cpp/inductor/codegen/)
// may space and indent freely.
TEST(KernelIrParse, AcceptsBlankLinesAndSpacing) {
  const Kernel k = parse_kernel(
      "\n"
      "kernel add(4)\n"
      "\tin0: f32 strides=(1) offset=0\n"
      "\n"
      "  %0 = load in0 : f32   \n"
      "  %1  =  add(%0,%0) : f32\n"
      "  out0: f32 strides=(1) = %1\n");
  EXPECT_EQ(format_kernel(k),
            "kernel add(4)\n"
            "  in0: f32 strides=(1) offset=0\n"
            "  %0 = load in0 : f32\n"
            "  %1 = add(%0, %0) : f32\n"
            "  out0: f32 strides=(1) = %1\n");
  EXPECT_EQ(verify(k), "");
}

// Each malformed text fails with its line and what was wrong.
TEST(KernelIrParse, MalformedTextNamesTheLineAndTheFault) {
  const std::string head = "kernel k(4)\n  in0: f32 strides=(1) offset=0\n  %0 = load in0 : f32\n";
  const struct {
    std::string text;
    std::vector<std::string> expected;  // substrings of the message
  } cases[] = {
      {"", {"no \"kernel NAME(sizes)\" line"}},
      {"  in0: f32 strides=(1) offset=0\n", {"line 1", "expected \"kernel NAME(sizes)\" first"}},
      {"kernel (4)\n", {"line 1", "expected a kernel name"}},
      {"kernel k(4, x)\n", {"line 1", "expected a size at \"x)\""}},
      {"kernel k(4) reduce=(0\n", {"line 1", "expected \")\" at the end of the line"}},
      {"kernel k(4)\nkernel j(4)\n", {"line 2", "a second kernel line"}},
      {"kernel k(4)\n  in0: f33 strides=(1) offset=0\n", {"line 2", "unknown dtype \"f33\""}},
      {"kernel k(4)\n  in1: f32 strides=(1) offset=0\n", {"line 2", "expected in0"}},
      {"kernel k(4)\n  in0: f32 strides=(1, offset=0\n", {"line 2", "expected a stride at \"offset=0\""}},
      {"kernel k(4)\n  in0: f32 strides=(1)\n", {"line 2", "expected \"offset=\""}},
      {head + "  %2 = load in0 : f32\n", {"line 4", "expected %1 (expressions are numbered in order)"}},
      {head + "  %1 = frobnicate(%0) : f32\n", {"line 4", "unknown operator \"frobnicate\""}},
      {head + "  %1 = reduce_avg(%0) : f32\n", {"line 4", "unknown reduction \"reduce_avg\""}},
      {head + "  %1 = add(%0) : f32\n", {"line 4", "add takes 2 operands, has 1"}},
      {head + "  %1 = neg(%0, %0) : f32\n", {"line 4", "neg takes 1 operand, has 2"}},
      {head + "  %1 = select(%0, %0) : f32\n", {"line 4", "select takes 3 operands, has 2"}},
      {head + "  %1 = add(%0, 0) : f32\n", {"line 4", "expected \"%\" at \"0) : f32\""}},
      {head + "  %1 = const 1.5 : i64\n", {"line 4", "expected an integer constant for i64 at \"1.5 : i64\""}},
      {head + "  %1 = const yes : b8\n", {"line 4", "expected True or False"}},
      {head + "  %1 = const 1.5x : f32\n", {"line 4", "expected a floating constant"}},
      {head + "  %1 = cast %0\n", {"line 4", "expected \":\" at the end of the line"}},
      {head + "  %1 = neg(%0) : f32 extra\n", {"line 4", "unexpected text at \"extra\""}},
      {head + "  out0: f32 strides=(1) = 0\n", {"line 4", "expected \"%\""}},
      {head + "  out0: f32 strides=(1) = %0 tensor=(4)\n", {"line 4", "expected \"/\""}},
      {head + "  result: f32\n", {"line 4", "expected an input (inN:), an expression (%N =) or an output (outN:)"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      parse_kernel(c.text);
      ADD_FAILURE() << "parsed";
    } catch (const std::invalid_argument& error) {
      for (const std::string& expected : c.expected) {
        EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
      }
    }
  }
}

}  // namespace
}  // namespace kiln::inductor
