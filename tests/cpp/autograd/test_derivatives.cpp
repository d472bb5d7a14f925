// Tests of autograd/derivatives.h: every prim with a gradient, in float64,
// against torch.autograd.grad over the same forward (autograd_test_util.h),
// over the branches of its rule (broadcasting, scalars on either side,
// keepdim, negative and empty dims, ties, zeros, non-contiguous inputs);
// prims without a gradient make no gradient path; missing rules throw.
#include <gtest/gtest.h>

#include <string>

#include "autograd/derivatives.h"
#include "autograd/joint_graph.h"
#include "tests/cpp/autograd/autograd_test_util.h"

namespace kiln::autograd {
namespace {

using prims::Prim;
using prims::PrimArg;
using base::PyRef;
using test::GradCase;

PrimArg V(int id) { return PrimArg::of_value(id); }
PrimArg F(double x) { return PrimArg::of_scalar(prims::Scalar::of_float(x)); }
PrimArg I(int64_t x) { return PrimArg::of_scalar(prims::Scalar::of_int(x)); }

// Python for a float64 tensor: normal draws, or draws in [0.5, 1.5).
std::string randn(const std::string& sizes) { return "torch.randn(" + sizes + ", dtype=torch.float64)"; }
std::string positive(const std::string& sizes) {
  return "(torch.rand(" + sizes + ", dtype=torch.float64) + 0.5)";
}
std::string tensor(const std::string& values) { return "torch.tensor(" + values + ", dtype=torch.float64)"; }
std::string index(const std::string& values) { return "torch.tensor(" + values + ")"; }

// ---- elementwise ----

bool needs_positive(Prim p) {
  return p == Prim::Log || p == Prim::Log2 || p == Prim::Sqrt || p == Prim::Rsqrt ||
         p == Prim::Reciprocal || p == Prim::Log1p;
}

TEST(Derivatives, EveryUnaryPrim) {
  const Prim prims_with_grads[] = {Prim::Abs,   Prim::Neg,  Prim::Exp,     Prim::Exp2,  Prim::Log,
                                   Prim::Log2,  Prim::Log1p, Prim::Expm1,  Prim::Sqrt,  Prim::Rsqrt,
                                   Prim::Sin,   Prim::Cos,  Prim::Tan,     Prim::Tanh,  Prim::Sigmoid,
                                   Prim::Erf,   Prim::Floor, Prim::Ceil,   Prim::Round, Prim::Trunc,
                                   Prim::Sign,  Prim::Reciprocal};
  for (Prim p : prims_with_grads) {
    SCOPED_TRACE(prims::prim_name(p));
    const std::string draw = needs_positive(p) ? positive("4, 3") : randn("4, 3");
    GradCase c;
    const int x = c.input(draw);
    // Contiguous, and transposed before the op.
    c.check({c.b.unary(p, x), c.b.unary(p, c.b.permute(x, {1, 0}))});
  }
}

struct BinaryDomain {
  Prim prim;
  std::string lhs;  // Python for a tensor of `sizes`, with %s for the sizes
  std::string rhs;
};

std::string fill(std::string pattern, const std::string& sizes) {
  return pattern.replace(pattern.find("%s"), 2, sizes);
}

TEST(Derivatives, EveryBinaryPrimBroadcastAndNonContiguous) {
  const std::string any = "torch.randn(%s, dtype=torch.float64)";
  const std::string pos = "(torch.rand(%s, dtype=torch.float64) + 0.5)";
  const BinaryDomain cases[] = {
      {Prim::Add, any, any},         {Prim::Sub, any, any},       {Prim::Mul, any, any},
      {Prim::Div, any, pos},         {Prim::Pow, pos, any},       {Prim::Maximum, any, any},
      {Prim::Minimum, any, any},     {Prim::Atan2, any, pos},     {Prim::Fmod, any, pos},
      {Prim::Remainder, any, pos},   {Prim::FloorDivide, any, pos}, {Prim::TruncDivide, any, pos},
  };
  for (const BinaryDomain& d : cases) {
    SCOPED_TRACE(prims::prim_name(d.prim));
    {  // same sizes
      GradCase c;
      const int a = c.input(fill(d.lhs, "3, 4")), b = c.input(fill(d.rhs, "3, 4"));
      c.check({c.b.binary(d.prim, V(a), V(b))});
    }
    {  // broadcast on both sides: [3, 1] with [4]
      GradCase c;
      const int a = c.input(fill(d.lhs, "3, 1")), b = c.input(fill(d.rhs, "4"));
      c.check({c.b.binary(d.prim, V(a), V(b))});
    }
    {  // broadcast of the left operand into new leading dims; 0-dim tensor
      GradCase c;
      const int a = c.input(fill(d.lhs, "4")), b = c.input(fill(d.rhs, "2, 3, 4"));
      const int s = c.input(fill(d.rhs, "()"));
      c.check({c.b.binary(d.prim, V(a), V(b)), c.b.binary(d.prim, V(b), V(s))});
    }
    {  // Python scalars on either side
      GradCase c;
      const int a = c.input(fill(d.lhs, "3, 4")), b = c.input(fill(d.rhs, "3, 4"));
      c.check({c.b.binary(d.prim, V(a), F(1.25)), c.b.binary(d.prim, F(0.75), V(b))});
    }
    {  // non-contiguous: transposed and stepped slices
      GradCase c;
      const int a = c.input(fill(d.lhs, "4, 3")), b = c.input(fill(d.rhs, "3, 8"));
      c.check({c.b.binary(d.prim, V(c.b.permute(a, {1, 0})), V(c.b.slice(b, 1, 1, std::nullopt, 2)))});
    }
  }
}

TEST(Derivatives, OnlyOneOperandWantsGrad) {
  GradCase c;
  const int a = c.input(randn("3, 4"));
  const int b = c.input(positive("4"), false);
  c.check({c.b.binary(Prim::Div, V(a), V(b)), c.b.binary(Prim::Pow, V(b), V(a))});
}

TEST(Derivatives, PowWithZeroBase) {
  {  // tensor base with zeros, tensor exponent with zeros and negatives
    GradCase c;
    const int a = c.input(tensor("[0., 0., 0., 1.5, 2., 0.]"));
    const int e = c.input(tensor("[2., 0., 0.5, 0., -1., -2.]"));
    c.check({c.b.binary(Prim::Pow, V(a), V(e))});
  }
  {  // scalar exponents: 0 (flat), an int, a float
    GradCase c;
    const int a = c.input(tensor("[0., 1.5, -2., 0.5]"));
    c.check({c.b.binary(Prim::Pow, V(a), F(0)), c.b.binary(Prim::Pow, V(a), I(2)),
             c.b.binary(Prim::Pow, V(a), I(3))});
  }
  {  // scalar bases 0 and 2
    GradCase c;
    const int e = c.input(tensor("[2., 0., 0.5, -1.]"));
    c.check({c.b.binary(Prim::Pow, F(0), V(e)), c.b.binary(Prim::Pow, F(2), V(e))});
  }
}

TEST(Derivatives, MaximumMinimumTies) {
  GradCase c;
  const int a = c.input(tensor("[1., 2., 3., -1.]"));
  const int b = c.input(tensor("[1., 0., 5., -1.]"));
  const int s = c.input(tensor("2."));
  c.check({c.b.binary(Prim::Maximum, V(a), V(b)), c.b.binary(Prim::Minimum, V(a), V(b)),
           c.b.binary(Prim::Maximum, V(a), V(s)), c.b.binary(Prim::Minimum, V(s), V(a))});
}

TEST(Derivatives, WhereWithBroadcastConditionAndScalars) {
  GradCase c;
  const int k = c.input("torch.tensor([[True], [False], [True]])", false);
  const int a = c.input(randn("3, 4"));
  const int b = c.input(randn("4"));
  c.check({c.b.where(k, V(a), V(b)), c.b.where(k, V(a), F(0.5)), c.b.where(k, F(2), V(b))});
}

TEST(Derivatives, ConvertBetweenFloatDtypes) {
  GradCase c;
  const int x32 = c.input("torch.randn(3, 4)");
  const int x64 = c.input(randn("3, 4"));
  const int up = c.b.binary(Prim::Mul, V(c.b.convert(x32, graph::DType::Float64)), V(x64));
  c.check({up, c.b.convert(x64, graph::DType::Float32)});
}

TEST(Derivatives, Clone) {
  GradCase c;
  const int x = c.input(randn("3, 4"));
  c.check({c.b.clone(c.b.permute(x, {1, 0})), c.b.clone(x)});
}

// ---- reductions ----

TEST(Derivatives, SumDimsKeepdimNegativeAndAll) {
  GradCase c;
  const int x = c.input(randn("2, 3, 4"));
  c.check({c.b.reduce(Prim::Sum, x, {1}, false), c.b.reduce(Prim::Sum, x, {-1, 0}, true),
           c.b.reduce(Prim::Sum, x, {}, false), c.b.reduce(Prim::Sum, x, {}, true),
           c.b.reduce(Prim::Sum, c.b.permute(x, {2, 0, 1}), {0}, false)});
}

TEST(Derivatives, SumWithResultDtype) {
  GradCase c;
  const int x = c.input("torch.randn(3, 4)");
  c.check({c.b.reduce(Prim::Sum, x, {1}, false, graph::DType::Float64)});
}

TEST(Derivatives, ProdExactWithZeros) {
  // Rows: no zero, one zero, two zeros.
  const std::string x = tensor("[[1.5, -2., 0.5, 3.], [2., 0., -1., 0.5], [0., 2., 0., 1.]]");
  {
    GradCase c;
    const int a = c.input(x);
    c.check({c.b.reduce(Prim::Prod, a, {1}, false), c.b.reduce(Prim::Prod, a, {-1}, true),
             c.b.reduce(Prim::Prod, a, {0}, false)});
  }
  for (const std::string& all : {tensor("[[1.5, -2.], [0.5, 3.]]"), tensor("[[1.5, 0.], [0.5, 3.]]"),
                                 tensor("[[0., -2.], [0.5, 0.]]"), tensor("2.5")}) {
    SCOPED_TRACE(all);
    GradCase c;
    const int a = c.input(all);
    c.check({c.b.reduce(Prim::Prod, a, {}, false), c.b.reduce(Prim::Prod, a, {}, true)});
  }
  {  // non-contiguous
    GradCase c;
    const int a = c.input(x);
    c.check({c.b.reduce(Prim::Prod, c.b.permute(a, {1, 0}), {0}, false)});
  }
}

TEST(Derivatives, AmaxAminWithTies) {
  for (Prim p : {Prim::Amax, Prim::Amin}) {
    SCOPED_TRACE(prims::prim_name(p));
    GradCase k;
    const int y = k.input(tensor("[[1., 3., 3., 0.], [2., 2., 2., 2.], [-1., 5., 0., -1.]]"));
    k.check({k.b.reduce(p, y, {1}, false), k.b.reduce(p, y, {-2}, true), k.b.reduce(p, y, {}, false),
             k.b.reduce(p, k.b.permute(y, {1, 0}), {1}, true)});
  }
}

TEST(Derivatives, VarMeanBothOrOneOutput) {
  {
    GradCase c;
    const int x = c.input(randn("3, 5"));
    auto [var, mean] = c.b.var_mean(x, {1}, 1, false);
    c.check({var, mean});
  }
  {  // var only, keepdim, correction 0, negative dim
    GradCase c;
    const int x = c.input(randn("3, 5"));
    c.check({c.b.var_mean(x, {-2}, 0, true).first});
  }
  {  // mean only, all dims, non-contiguous
    GradCase c;
    const int x = c.input(randn("3, 5"));
    c.check({c.b.var_mean(c.b.permute(x, {1, 0}), {}, 1, false).second});
  }
}

// ---- views, cat ----

TEST(Derivatives, ReshapesAndPermute) {
  GradCase c;
  const int x = c.input(randn("2, 1, 6"));
  c.check({c.b.view(x, {3, 4}), c.b.reshape(c.b.permute(x, {2, 0, 1}), {-1}), c.b.squeeze(x, {1}),
           c.b.squeeze(x), c.b.unsqueeze(x, -1), c.b.permute(x, {2, 0, 1})});
}

TEST(Derivatives, ExpandIncludingZeroDim) {
  GradCase c;
  const int x = c.input(randn("3, 1"));
  const int s = c.input(randn("()"));
  c.check({c.b.expand(x, {2, 3, 4}), c.b.expand(s, {2, 3}), c.b.expand(s, {})});
}

TEST(Derivatives, SliceStepsAndBounds) {
  GradCase c;
  const int x = c.input(randn("5, 7"));
  c.check({c.b.slice(x, 1, 1, 6, 2), c.b.slice(x, 0, -3, std::nullopt), c.b.slice(x, -1, -100, 100, 3),
           c.b.slice(x, 0, 2, -1), c.b.slice(x, 1, 9, 12), c.b.slice(x, 0, std::nullopt, std::nullopt),
           c.b.slice(c.b.permute(x, {1, 0}), 0, 1, std::nullopt, 4)});
}

TEST(Derivatives, AsStridedOfAFreshTensor) {
  GradCase c;
  const int x = c.input(randn("2, 5"));
  const int fresh = c.b.binary(Prim::Mul, V(x), F(2));
  // Overlapping windows, a transposed read with an offset, a 0-dim read.
  c.check({c.b.as_strided(fresh, {4, 3}, {2, 1}, 0), c.b.as_strided(fresh, {2, 2}, {1, 5}, 3),
           c.b.as_strided(fresh, {}, {}, 7)});
}

TEST(Derivatives, CatWithEmptyPiecesAndMixedDtypes) {
  GradCase c;
  const int a = c.input(randn("2, 3"));
  const int e = c.input("torch.zeros(2, 0, dtype=torch.float64)");
  const int legacy = c.input("torch.zeros(0, dtype=torch.float64)");
  const int b = c.input("torch.randn(2, 2)");
  c.check({c.b.cat({a, e, legacy, b}, -1), c.b.cat({c.b.permute(c.b.slice(a, 1, 0, 2), {1, 0}), a}, 1)});
}

// ---- matmul ----

TEST(Derivatives, MatmulBatchedAndBroadcast) {
  struct Shapes {
    std::string a, b;
  };
  for (const Shapes& s : {Shapes{"3, 4", "4, 5"}, Shapes{"2, 3, 4", "2, 4, 5"}, Shapes{"2, 1, 3, 4", "5, 4, 2"},
                          Shapes{"3, 4", "2, 4, 5"}, Shapes{"2, 3, 4", "4, 1"}, Shapes{"2, 1, 3, 4", "4, 5"},
                          Shapes{"0, 3, 4", "4, 5"}, Shapes{"2, 3, 0", "0, 5"}}) {
    SCOPED_TRACE(s.a + " @ " + s.b);
    GradCase c;
    const int a = c.input(randn(s.a)), b = c.input(randn(s.b));
    c.check({c.b.matmul(a, b)});
  }
  GradCase c;  // transposed operands
  const int a = c.input(randn("4, 3")), b = c.input(randn("5, 4"));
  c.check({c.b.matmul(c.b.permute(a, {1, 0}), c.b.permute(b, {1, 0}))});
  GradCase d;  // a batched operand whose rows do not flatten as a view, with a matrix
  const int x = d.input(randn("3, 2, 4")), w = d.input(randn("4, 5"));
  d.check({d.b.matmul(d.b.permute(x, {1, 0, 2}), w)});
}

// ---- indexing ----

TEST(Derivatives, GatherSumsRepeats) {
  GradCase c;
  const int x = c.input(randn("3, 4"));
  const int i = c.input(index("[[0, 0, 3], [1, 2, 1]]"), false);
  const int j = c.input(index("[[2, 0, 2, 1]]"), false);
  c.check({c.b.gather(x, 1, i), c.b.gather(x, -2, j)});
}

TEST(Derivatives, ScatterAndScatterAdd) {
  GradCase c;
  const int x = c.input(randn("3, 4"));
  const int src = c.input(randn("2, 3"));
  const int i = c.input(index("[[0, 1, 2], [2, 0, 1]]"), false);
  c.check({c.b.scatter(x, 0, i, V(src)), c.b.scatter(x, 0, i, V(src), true), c.b.scatter(x, -1, i, F(1.5)),
           c.b.scatter(c.b.permute(c.b.binary(Prim::Mul, V(x), F(1)), {1, 0}), 1, i, V(src))});
}

TEST(Derivatives, ScatterSrcLargerThanIndex) {
  // scatter reads only the index-shaped corner of src; the rest of src gets
  // zeros. torch 1.13 raises here (its gradient has the index's shape), so
  // the reference reads the corner explicitly.
  GradCase kiln_case;
  const int x = kiln_case.input(randn("3, 4"));
  const int src = kiln_case.input(randn("3, 5"));
  const int i = kiln_case.input(index("[[0, 1], [2, 0]]"), false);
  kiln_case.graph.set_outputs({kiln_case.b.scatter(x, 0, i, V(src))});
  JointGraph joint = build_joint_graph(kiln_case.graph, {true, true, false});
  const int grad_src = joint.input_grads[1];
  ASSERT_GE(grad_src, 0);
  EXPECT_EQ(joint.graph.value(grad_src).meta.sizes, (std::vector<int64_t>{3, 5}));
  GradCase c;
  const int x2 = c.input(randn("3, 4"));
  const int src2 = c.input(randn("3, 5"));
  const int i2 = c.input(index("[[0, 1], [2, 0]]"), false);
  const int corner = c.b.slice(c.b.slice(src2, 0, 0, 2), 1, 0, 2);
  c.check({c.b.scatter(x2, 0, i2, V(corner))});
}

TEST(Derivatives, IndexSelect) {
  GradCase c;
  const int x = c.input(randn("4, 3"));
  const int i = c.input(index("[2, 0, 2, 3]"), false);
  const int i32 = c.input("torch.tensor([1, 1], dtype=torch.int32)", false);
  const int one = c.input(index("1"), false);
  const int s = c.input(randn("()"));
  const int zero = c.input(index("0"), false);
  c.check({c.b.index_select(x, 0, i), c.b.index_select(x, -1, i32), c.b.index_select(x, 1, one),
           c.b.index_select(s, 0, zero), c.b.index_select(c.b.permute(x, {1, 0}), 1, i)});
}

TEST(Derivatives, IndexPutAccumulateOrNot) {
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    {  // one index on dim 0 with a repeat and a negative entry; broadcast values
      GradCase c;
      const int x = c.input(randn("5, 3"));
      const int i = c.input(index("[0, 2, -1, 2]"), false);
      const int values = c.input(randn("4, 3"));
      const int row = c.input(randn("3"));
      c.check({c.b.index_put(x, {i}, values, accumulate), c.b.index_put(x, {i}, row, accumulate)});
    }
    {  // an index on dim 1 only, and two adjacent broadcast indices
      GradCase c;
      const int x = c.input(randn("2, 5, 3"));
      const int i = c.input(index("[[4], [1]]"), false);
      const int j = c.input(index("[0, 2, 1]"), false);
      const int v1 = c.input(randn("2, 2, 1, 3"));
      const int v2 = c.input(randn("2, 3"));
      c.check({c.b.index_put(x, {std::nullopt, i}, v1, accumulate),
               c.b.index_put(x, {std::nullopt, i, j}, v2, accumulate)});
    }
    {  // non-adjacent indices (dims 0 and 2): index dims go in front
      GradCase c;
      const int x = c.input(randn("3, 4, 5"));
      const int i = c.input(index("[0, 2]"), false);
      const int k = c.input(index("[4, -2]"), false);
      const int values = c.input(randn("2, 4"));
      c.check({c.b.index_put(x, {i, std::nullopt, k}, values, accumulate)});
    }
  }
}

// ---- no gradient ----

TEST(Derivatives, PrimsWithoutGradientMakeNoPath) {
  GradCase c;
  const int x = c.input(randn("3, 4"));
  const int p = c.input(positive("3, 4"));  // bernoulli's p: torch's gradient is zeros
  const int mask = c.b.convert(c.b.binary(Prim::Gt, V(x), F(0)), graph::DType::Float64);
  const int drawn = c.b.bernoulli(c.b.binary(Prim::Mul, V(p), F(0.5)));
  const int noise = c.b.binary(Prim::Add, V(c.b.uniform({3, 4}, 0, 1, graph::DType::Float64)),
                               V(c.b.normal({3, 4}, 0, 1, graph::DType::Float64)));
  const int ramp = c.b.convert(c.b.iota(4, 0, 1, graph::DType::Int64), graph::DType::Float64);
  const int ones = c.b.full({3, 4}, prims::Scalar::of_float(1), graph::DType::Float64);
  const int y = c.b.binary(Prim::Mul, V(x), V(c.b.binary(Prim::Add, V(mask), V(ramp))));
  c.check({y, c.b.binary(Prim::Mul, V(drawn), V(ones)), noise, c.b.reduce(Prim::Argmax, x, {1}, false),
           c.b.binary(Prim::Le, V(x), V(p)), c.b.reduce(Prim::Argmin, x, {}, false)});
  JointGraph joint = build_joint_graph(c.graph, {true, true});
  EXPECT_EQ(joint.input_grads[1], -1);  // p reaches the outputs only through bernoulli
  for (size_t k = 1; k < joint.grad_inputs.size(); ++k) EXPECT_EQ(joint.grad_inputs[k], -1) << k;
}

TEST(Derivatives, IntegerInputsAndResultsCarryNoGradient) {
  GradCase c;
  const int x = c.input(randn("3, 4"));
  const int n = c.input("torch.tensor([[1, 2, 3, 4]])", false);
  const int counted = c.b.binary(Prim::FloorDivide, V(n), I(2));
  c.check({c.b.binary(Prim::Mul, V(x), V(counted)), c.b.binary(Prim::BitwiseAnd, V(n), I(1))});
}

TEST(Derivatives, MissingRulesThrowNoDerivativeNamingThePrim) {
  auto message = [](const prims::PrimGraph& g, std::vector<bool> flags) -> std::string {
    try {
      build_joint_graph(g, flags);
    } catch (const NoDerivative& e) {
      return e.what();
    }
    return "<no throw>";
  };
  {  // as_strided of a graph input: its storage is unknown
    prims::PrimGraph g;
    prims::PrimBuilder b(g);
    const int x = g.add_input(test::f64({6}));
    g.set_outputs({b.as_strided(x, {2, 2}, {1, 2}, 0)});
    EXPECT_NE(message(g, {true}).find("as_strided"), std::string::npos) << message(g, {true});
  }
  {  // complex values
    prims::PrimGraph g;
    prims::PrimBuilder b(g);
    graph::TensorMeta m = test::f64({3});
    m.dtype = graph::DType::Complex128;
    const int x = g.add_input(m);
    g.set_outputs({b.binary(Prim::Mul, V(x), V(x))});
    EXPECT_NE(message(g, {true}).find("mul: complex"), std::string::npos) << message(g, {true});
  }
  {  // an extern that writes into its arguments, and one that draws
    prims::PrimGraph g;
    prims::PrimBuilder b(g);
    const int x = g.add_input(test::f64({3}));
    // Traced on an input that requires grad, their results require grad.
    graph::TensorMeta result = test::f64({3});
    result.requires_grad = true;
    PyRef relu_ = kiln::test::eval("torch.Tensor.relu_");
    const int y = b.extern_call(relu_.get(), "Tensor.relu_", {graph::Arg::of_node(x)}, {}, {result})[0];
    g.set_outputs({y});
    EXPECT_NE(message(g, {true}).find("extern Tensor.relu_ writes into a tensor on a gradient path"),
              std::string::npos)
        << message(g, {true});
  }
  {
    prims::PrimGraph g;
    prims::PrimBuilder b(g);
    const int x = g.add_input(test::f64({3}));
    graph::TensorMeta result = test::f64({3});
    result.requires_grad = true;
    PyRef dropout = kiln::test::eval("torch.nn.functional.dropout");
    g.set_outputs({b.extern_call(dropout.get(), "F.dropout", {graph::Arg::of_node(x)}, {}, {result})[0]});
    EXPECT_NE(message(g, {true}).find("random"), std::string::npos) << message(g, {true});
  }
}

// ---- extern ----

// An extern output's metadata as the tracer records it for a call on
// tensors that require grad (without the flag, no gradient path).
graph::TensorMeta with_grad(graph::TensorMeta meta) {
  meta.requires_grad = true;
  return meta;
}

TEST(Derivatives, ExternConvAndPoolThroughTorch) {
  test::make_kiln_importable();
  PyRef conv2d = kiln::test::eval("torch.nn.functional.conv2d");
  PyRef pool = kiln::test::eval("torch.nn.functional.max_pool2d");
  // Imported first: its table of torch backward kernels holds conv2d.
  kiln::test::exec_module("import kiln._extern_vjp\n");
  const Py_ssize_t refs_before = Py_REFCNT(conv2d.get());
  {
    GradCase c;
    const int x = c.input(randn("2, 3, 8, 8"));
    const int w = c.input(randn("4, 3, 3, 3"));
    const int bias = c.input(randn("4"));
    PyRef two = kiln::test::py_int(2);
    PyRef one = kiln::test::py_int(1);
    const int y = c.b.extern_call(conv2d.get(), "F.conv2d",
                                  {graph::Arg::of_node(x), graph::Arg::of_node(w), graph::Arg::of_node(bias)},
                                  {{"stride", graph::Arg::of_constant(two.get())},
                                   {"padding", graph::Arg::of_constant(one.get())}},
                                  {with_grad(test::meta_of(kiln::test::eval("torch.empty(2, 4, 4, 4, dtype=torch.float64)").get()))})[0];
    const int t = c.b.unary(Prim::Tanh, y);
    graph::TensorMeta pooled = test::f64({2, 4, 2, 2});
    graph::TensorMeta where = pooled;
    where.dtype = graph::DType::Int64;
    PyRef yes = PyRef::borrow(Py_True);
    const std::vector<int> outs = c.b.extern_call(
        pool.get(), "F.max_pool2d", {graph::Arg::of_node(t), graph::Arg::of_constant(two.get())},
        {{"return_indices", graph::Arg::of_constant(yes.get())}}, {with_grad(pooled), where});
    c.check({outs[0], outs[1]});
  }
  EXPECT_EQ(Py_REFCNT(conv2d.get()), refs_before) << "the joint graph leaked references to the extern's callable";
}

TEST(Derivatives, ExternWithListArgumentsRepeatsAndKeywordTensors) {
  test::make_kiln_importable();
  // torch.cat((x, y, x), dim=0) and torch.addcmul(x, tensor1=a, tensor2=a): the
  // same value twice, tensors inside a tuple and in keywords, one input not
  // wanting grad.
  GradCase c;
  const int x = c.input(randn("2, 3"));
  const int y = c.input(randn("1, 3"), false);
  const int a = c.input(randn("2, 3"));
  PyRef cat = kiln::test::eval("torch.cat");
  PyRef addcmul = kiln::test::eval("torch.addcmul");
  graph::Arg list;
  list.kind = graph::Arg::Kind::Tuple;
  list.items = {graph::Arg::of_node(x), graph::Arg::of_node(y), graph::Arg::of_node(x)};
  PyRef zero = kiln::test::py_int(0);
  const int joined = c.b.extern_call(cat.get(), "torch.cat", {list}, {{"dim", graph::Arg::of_constant(zero.get())}},
                                     {with_grad(test::f64({5, 3}))})[0];
  const int mixed = c.b.extern_call(addcmul.get(), "torch.addcmul", {graph::Arg::of_node(x)},
                                    {{"tensor1", graph::Arg::of_node(a)}, {"tensor2", graph::Arg::of_node(a)}},
                                    {with_grad(test::f64({2, 3}))})[0];
  c.check({joined, mixed});
}

// A pure call's own kiln_vjp is called as a pure extern (passes may move
// copies across it); the same function's call not marked pure, and a pure
// call differentiated through torch.autograd.grad (extern_vjp), are not.
TEST(Derivatives, OwnGradientOfAPureCallIsPure) {
  test::make_kiln_importable();
  PyRef module = kiln::test::exec_module(
      "import torch\n"
      "def double(x):\n"
      "    return x * 2\n"
      "def double_vjp(args, kwargs, outputs, slots, grads):\n"
      "    return grads[0] * 2\n"
      "double.kiln_vjp = double_vjp\n");
  PyRef twice = kiln::test::item(module, "double");
  PyRef sin = kiln::test::eval("torch.sin");
  // Whether the joint graph's call of `vjp_name` is marked pure.
  auto vjp_is_pure = [&](PyObject* target, const std::string& name, const std::string& vjp_name, bool pure) {
    GradCase c;
    const int x = c.input(randn("3, 4"));
    const int y = c.b.extern_call(target, name, {graph::Arg::of_node(x)}, {}, {with_grad(test::f64({3, 4}))}, pure)[0];
    c.check({y});
    JointGraph joint = build_joint_graph(c.graph, {true});
    int found = -1;
    for (int n = 0; n < static_cast<int>(joint.graph.nodes().size()); ++n) {
      if (joint.graph.node(n).attrs.target_name == vjp_name) found = n;
    }
    EXPECT_GE(found, 0) << "no call of " << vjp_name;
    return found >= 0 && joint.graph.node(found).attrs.extern_pure;
  };
  EXPECT_TRUE(vjp_is_pure(twice.get(), "double", "double.kiln_vjp", true));
  EXPECT_FALSE(vjp_is_pure(twice.get(), "double", "double.kiln_vjp", false));
  EXPECT_FALSE(vjp_is_pure(sin.get(), "torch.sin", "extern_vjp(torch.sin)", true));
}

}  // namespace
}  // namespace kiln::autograd
