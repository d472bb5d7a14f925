// Tests of prims/pointwise_meta.h: every elementwise prim's sizes, strides,
// dtype, device and requires_grad against torch's own results, over the
// zoo's layouts and dtypes, Python scalars, random layouts, and the errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prims/pointwise_meta.h"
#include "prims/prim.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

using test::expect_agree1;
using test::meta_of;
using test::Tally;

// The torch call computing what `prim` computes on `args`.
std::string torch_call(Prim prim, const std::vector<std::string>& args) {
  std::string joined;
  for (const std::string& arg : args) joined += (joined.empty() ? "" : ", ") + arg;
  if (prim == Prim::FloorDivide) return "torch.div(" + joined + ", rounding_mode='floor')";
  if (prim == Prim::TruncDivide) return "torch.div(" + joined + ", rounding_mode='trunc')";
  return std::string("torch.") + prim_name(prim) + "(" + joined + ")";
}

// A Python scalar literal's kind, or nullopt for a zoo tensor name.
std::optional<ScalarKind> scalar_kind(const std::string& text) {
  if (text == "True" || text == "False") return ScalarKind::Bool;
  if (text.find('j') != std::string::npos) return ScalarKind::Complex;
  if (text.find('.') != std::string::npos) return ScalarKind::Float;
  if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-')) {
    return ScalarKind::Int;
  }
  return std::nullopt;
}

Operand operand(const std::string& text) {
  if (std::optional<ScalarKind> kind = scalar_kind(text)) return Operand::of(*kind);
  return Operand::of(meta_of(text));
}

void check(Prim prim, const std::vector<std::string>& args, Tally* tally) {
  std::vector<Operand> operands;
  for (const std::string& arg : args) operands.push_back(operand(arg));
  expect_agree1(torch_call(prim, args), [&] { return pointwise_meta(prim, operands); }, tally);
}

std::vector<Prim> prims_of(Family family) {
  std::vector<Prim> out;
  for (int i = 0; i < prim_count(); ++i) {
    if (prim_info(static_cast<Prim>(i)).family == family) out.push_back(static_cast<Prim>(i));
  }
  return out;
}

std::vector<std::string> dtype_operands() {
  std::vector<std::string> out;
  for (const std::string& d : test::dtype_zoo()) {
    out.push_back(d + "_3");
    out.push_back(d + "_0");
  }
  return out;
}

TEST(PrimPointwise, BinaryLayoutsMatchTorch) {
  Tally tally;
  tally.confirm_every = 7;
  for (Prim prim : {Prim::Add, Prim::Mul, Prim::Lt}) {
    for (const std::string& a : test::layout_zoo()) {
      for (const std::string& b : test::layout_zoo()) check(prim, {a, b}, &tally);
      for (const char* scalar : {"2.5", "3", "True"}) check(prim, {a, scalar}, &tally);
    }
  }
  EXPECT_GT(tally.agreed_results, 1000);
  EXPECT_GT(tally.agreed_errors, 50);  // shapes that do not broadcast
}

TEST(PrimPointwise, UnaryLayoutsMatchTorch) {
  Tally tally;
  for (Prim prim : prims_of(Family::Unary)) {
    for (const std::string& a : test::layout_zoo()) check(prim, {a}, &tally);
  }
  EXPECT_GT(tally.agreed_results, 500);
}

TEST(PrimPointwise, UnaryDtypesMatchTorch) {
  Tally tally;
  for (Prim prim : prims_of(Family::Unary)) {
    for (const std::string& a : dtype_operands()) check(prim, {a}, &tally);
  }
  EXPECT_GT(tally.agreed_results, 400);
  EXPECT_GT(tally.agreed_errors, 30);  // bool negation, complex floor, float bitwise_not, ...
}

TEST(PrimPointwise, BinaryDtypesAndScalarsMatchTorch) {
  Tally tally;
  tally.confirm_every = 11;
  const std::vector<std::string> tensors = dtype_operands();
  for (Prim prim : prims_of(Family::Binary)) {
    for (const std::string& a : tensors) {
      for (const std::string& b : tensors) check(prim, {a, b}, &tally);
      for (const char* scalar : {"True", "2", "2.5", "1.5j"}) {
        check(prim, {a, scalar}, &tally);
        check(prim, {scalar, a}, &tally);
      }
    }
  }
  EXPECT_GT(tally.agreed_results, 10000);
  EXPECT_GT(tally.agreed_errors, 200);
}

TEST(PrimPointwise, WhereMatchesTorch) {
  Tally tally;
  tally.confirm_every = 5;
  test::exec_in_zoo("b23t = torch.rand(3, 2).t() > 0.5\nb21 = torch.rand(2, 1) > 0.5\n");
  for (const char* cond : {"b_3", "b_0", "b23t", "b21", "f3", "i64_3"}) {
    for (const std::string& a : dtype_operands()) {
      for (const char* b : {"f32_3", "i32_0", "u8_3", "c64_0", "2", "2.5", "True"}) {
        check(Prim::Where, {cond, a, b}, &tally);
      }
    }
    for (const std::string& a : test::layout_zoo()) check(Prim::Where, {cond, a, "f23"}, &tally);
  }
  EXPECT_GT(tally.agreed_results, 300);
  EXPECT_GT(tally.agreed_errors, 40);  // non-bool conditions, shapes
}

// Random layouts: permuted, stepped, expanded and size-1 dims, broadcast
// against each other, through TensorIterator's general and fast paths.
TEST(PrimPointwise, RandomLayoutsMatchTorch) {
  test::exec_in_zoo(R"PY(
import random
_rng = random.Random(1234)
def rand_layout(shape, dtype=torch.float32):
    nd = len(shape)
    expand = [s > 1 and _rng.random() < 0.2 for s in shape]
    base = [1 if e else s for s, e in zip(shape, expand)]
    perm = list(range(nd)); _rng.shuffle(perm)
    steps = [_rng.choice([1, 1, 2]) for _ in range(nd)]
    t = torch.zeros([base[p] * steps[i] for i, p in enumerate(perm)], dtype=dtype)
    t = t[tuple(slice(None, None, s) for s in steps)]
    return t.permute([perm.index(d) for d in range(nd)]).expand(shape)
def rand_operand_shape(out):
    rank = _rng.randint(0, len(out))
    return [1 if _rng.random() < 0.3 else s for s in out[len(out) - rank:]]
FUZZ = []
for _ in range(400):
    out = [_rng.choice([1, 2, 3, 4]) for _ in range(_rng.randint(0, 4))]
    FUZZ.append((rand_layout(rand_operand_shape(out)), rand_layout(rand_operand_shape(out)),
                 rand_layout(rand_operand_shape(out), torch.bool), rand_layout(out)))
)PY");
  Tally tally;
  const long count = test::zoo_int("len(FUZZ)");
  for (long i = 0; i < count; ++i) {
    const std::string n = "FUZZ[" + std::to_string(i) + "]";
    check(Prim::Add, {n + "[0]", n + "[1]"}, &tally);
    check(Prim::Sub, {n + "[3]", n + "[0]"}, &tally);
    check(Prim::Where, {n + "[2]", n + "[0]", n + "[1]"}, &tally);
    check(Prim::Exp, {n + "[3]"}, &tally);
    check(Prim::Add, {n + "[0]", "1.5"}, &tally);
  }
  EXPECT_EQ(tally.agreed_errors, 0);
  EXPECT_EQ(tally.agreed_results, 5 * count);
}

TEST(PrimPointwise, DevicesFollowTorch) {
  test::exec_in_zoo("m3 = torch.ones(3, device='meta')\nm0 = torch.ones((), device='meta')\n");
  Tally tally;
  check(Prim::Add, {"m3", "f0"}, &tally);   // a 0-dim CPU tensor joins any device
  check(Prim::Add, {"m3", "f3"}, &tally);   // error
  check(Prim::Add, {"f3", "m0"}, &tally);   // error: only CPU scalars are exempt
  check(Prim::Add, {"f0", "m0"}, &tally);
  check(Prim::Mul, {"m3", "2.5"}, &tally);
  EXPECT_EQ(tally.agreed_results, 3);
  EXPECT_EQ(tally.agreed_errors, 2);
  EXPECT_EQ(pointwise_meta(Prim::Add, {operand("m3"), operand("f0")}).device_type,
            graph::DeviceType::Meta);
}

TEST(PrimPointwise, ErrorsNameTheOpAndTheProblem) {
  const Operand f23 = operand("f23"), f4 = operand("f4"), b = operand("b_3");
  test::expect_prim_error([&] { pointwise_meta(Prim::Add, {f23, f4}); },
                          "add: shapes [2, 3] and [4] cannot broadcast");
  test::expect_prim_error([&] { pointwise_meta(Prim::Sub, {b, b}); }, "sub: not supported for bool");
  test::expect_prim_error([&] { pointwise_meta(Prim::BitwiseAnd, {f23, f23}); },
                          "bitwise_and: only supports bool and integer dtypes, got float32");
  test::expect_prim_error([&] { pointwise_meta(Prim::Add, {f23}); }, "add: expected 2 operands, got 1");
  test::expect_prim_error([&] { pointwise_meta(Prim::Sum, {f23}); }, "sum: not an elementwise prim");
  test::expect_prim_error(
      [&] { pointwise_meta(Prim::Add, {Operand::of(ScalarKind::Int), Operand::of(ScalarKind::Int)}); },
      "expected at least one tensor operand");
  test::expect_prim_error([&] { pointwise_meta(Prim::Where, {f23, f23, f23}); },
                          "where: expected condition to be a boolean tensor");
  test::expect_prim_error([&] { pointwise_meta(Prim::Add, {operand("f16_3"), Operand::of(ScalarKind::Complex)}); },
                          "complex32");
}

TEST(PrimPointwise, DtypesReportCommonAndResult) {
  const ElementwiseDTypes exp_int = pointwise_dtypes(Prim::Exp, {operand("i64_3")});
  EXPECT_EQ(exp_int.common, DType::Float32);
  EXPECT_EQ(exp_int.result, DType::Float32);
  const ElementwiseDTypes eq = pointwise_dtypes(Prim::Eq, {operand("i32_3"), operand("2.5")});
  EXPECT_EQ(eq.common, DType::Float32);
  EXPECT_EQ(eq.result, DType::Bool);
  const ElementwiseDTypes abs = pointwise_dtypes(Prim::Abs, {operand("c128_3")});
  EXPECT_EQ(abs.common, DType::Complex128);
  EXPECT_EQ(abs.result, DType::Float64);
  // A different default dtype (torch.set_default_dtype(torch.float64)).
  EXPECT_EQ(pointwise_dtypes(Prim::Div, {operand("i64_3"), operand("2")}, DType::Float64).result,
            DType::Float64);
}

TEST(PrimCopy, ConvertElementTypeAndCloneMatchTorch) {
  Tally tally;
  for (const std::string& a : test::layout_zoo()) {
    for (const std::string& d : test::dtype_zoo()) {
      expect_agree1(a + ".to(DTYPES['" + d + "'], copy=True)",
                    [&] { return convert_element_type_meta(meta_of(a), meta_of(d + "_0").dtype); },
                    &tally);
    }
    expect_agree1(a + ".clone()", [&] { return clone_meta(meta_of(a)); }, &tally);
    expect_agree1(a + ".clone(memory_format=torch.contiguous_format)",
                  [&] { return clone_meta(meta_of(a), MemoryFormat::Contiguous); }, &tally);
    expect_agree1(a + ".clone(memory_format=torch.channels_last)",
                  [&] { return clone_meta(meta_of(a), MemoryFormat::ChannelsLast); }, &tally);
  }
  EXPECT_GT(tally.agreed_results, 300);
  EXPECT_GT(tally.agreed_errors, 10);  // channels_last on ranks other than 4
}

}  // namespace
}  // namespace kiln::prims
