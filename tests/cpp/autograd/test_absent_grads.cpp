// Tests of backward variants without absent gradients
// (autograd/absent_grads.h, Note [Absent gradients]).
#include <gtest/gtest.h>

#include <vector>

#include "autograd/absent_grads.h"
#include "prims/prim_builder.h"

#include "tests/cpp/test_metas.h"

namespace kiln::autograd {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;

using test::f32;

PrimArg v(int id) { return PrimArg::of_value(id); }

// Inputs: saved s, gradients g1 and g2. Outputs: dx = g1 * s + g2 * s (two
// contributions), dy = cos(s) * g2 (only g2's), dz = s * g1 - g2.
struct Backward {
  PrimGraph graph;
  explicit Backward(std::vector<int64_t> g2_sizes = {4}) {
    PrimBuilder b(graph);
    const int s = graph.add_input(f32({4}));
    const int g1 = graph.add_input(f32({4}));
    const int g2 = graph.add_input(f32(g2_sizes));
    const int dx = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(g1), v(s))), v(b.binary(Prim::Mul, v(g2), v(s))));
    const int dy = b.binary(Prim::Mul, v(b.unary(Prim::Cos, s)), v(g2));
    const int dz = b.binary(Prim::Sub, v(b.binary(Prim::Mul, v(s), v(g1))), v(g2));
    graph.set_outputs({dx, dy, dz});
  }
};

int count_prim(const PrimGraph& graph, Prim prim) {
  int n = 0;
  for (const auto& node : graph.nodes()) n += node.prim == prim ? 1 : 0;
  return n;
}

TEST(AbsentGrads, PathsFromAnAbsentGradientAreDropped) {
  Backward bw;
  // dy came only from g2: not asked for.
  const PrimGraph out = without_absent_grads(bw.graph, 1, {false, false, true}, {true, false, true});
  EXPECT_EQ(out.outputs().size(), 2u);
  EXPECT_EQ(out.inputs().size(), 3u);
  // dx = g1 * s (the add keeps the present side), dz = s * g1 - absent = s * g1.
  EXPECT_EQ(count_prim(out, Prim::Add), 0);
  EXPECT_EQ(count_prim(out, Prim::Sub), 0);
  EXPECT_EQ(count_prim(out, Prim::Cos), 0);
  EXPECT_EQ(count_prim(out, Prim::Full), 0);
  EXPECT_EQ(out.verify(), "");
}

TEST(AbsentGrads, AbsentMinuendBecomesANegation) {
  Backward bw;
  const PrimGraph out = without_absent_grads(bw.graph, 1, {false, true, false}, {true, true, true});
  EXPECT_EQ(out.outputs().size(), 3u);
  EXPECT_EQ(count_prim(out, Prim::Neg), 1);  // dz = -g2
  EXPECT_EQ(count_prim(out, Prim::Full), 0);
}

TEST(AbsentGrads, ZerosWhereTheLayoutsDiffer) {
  // g2 broadcasts ([1] against [4]): dz = absent - g2 cannot just negate
  // it, so the absent side is zeros.
  Backward bw({1});
  const PrimGraph out = without_absent_grads(bw.graph, 1, {false, true, false}, {true, true, true});
  EXPECT_EQ(count_prim(out, Prim::Sub), 1);
  EXPECT_GE(count_prim(out, Prim::Full), 1);
  EXPECT_EQ(out.verify(), "");
}

TEST(AbsentGrads, EveryGradientAbsentLeavesNoOutput) {
  Backward bw;
  const PrimGraph out = without_absent_grads(bw.graph, 1, {false, true, true}, {false, false, false});
  EXPECT_TRUE(out.outputs().empty());
  EXPECT_TRUE(out.nodes().empty());
}

TEST(AbsentGrads, AnOutputAskedForThatOnlyAbsentValuesMadeIsZeros) {
  // As through sign: eager's gradient is a zero tensor, not None.
  Backward bw;
  const PrimGraph out = without_absent_grads(bw.graph, 1, {false, false, true}, {true, true, true});
  EXPECT_EQ(out.outputs().size(), 3u);
  EXPECT_EQ(count_prim(out, Prim::Full), 1);
  EXPECT_EQ(count_prim(out, Prim::Cos), 0);
}

}  // namespace
}  // namespace kiln::autograd
