// Tests of prims/prim_builder.h for the families beyond elementwise,
// reductions and views (those are in test_prim_graph.cpp): cat, matmul,
// indexing, factories, random draws and extern calls.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prims/prim_builder.h"
#include "prims/prim_error.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::prims {
namespace {

graph::TensorMeta meta(std::vector<int64_t> sizes, DType dtype = DType::Float32) {
  graph::TensorMeta m;
  m.sizes = sizes;
  m.strides = graph::contiguous_strides(sizes);
  m.dtype = dtype;
  return m;
}

// Note [Index ranges]: index_select by an in-range arange is a contiguous
// clone of a slice (of the whole tensor when the range covers its dim);
// other indices, and aranges reaching past the dim, stay gathers.
TEST(PrimBuilder, IndexSelectByAnArangeIsACloneOfASlice) {
  PrimGraph g;
  PrimBuilder b(g);
  const int table = g.add_input(meta({8, 3}));
  const int whole = b.index_select(table, 0, b.reshape(b.iota(8, 0, 1, DType::Int64), {8}));
  const int stepped = b.index_select(table, 0, b.iota(3, 1, 2, DType::Int64));
  const int columns = b.index_select(table, 1, b.iota(2, 1, 1, DType::Int32));
  const int past = b.index_select(table, 0, b.iota(3, 4, 2, DType::Int64));  // reads row 8
  const int given = b.index_select(table, 0, g.add_input(meta({2}, DType::Int64)));
  g.set_outputs({whole, stepped, columns, past, given});
  EXPECT_EQ(g.verify(), "");
  auto made_by = [&](int id) { return g.node(g.value(id).node).prim; };
  EXPECT_EQ(made_by(whole), Prim::Clone);
  EXPECT_EQ(g.node(g.value(whole).node).args[0].value, table);
  EXPECT_EQ(made_by(stepped), Prim::Clone);
  EXPECT_EQ(made_by(columns), Prim::Clone);
  EXPECT_EQ(made_by(past), Prim::IndexSelect);
  EXPECT_EQ(made_by(given), Prim::IndexSelect);
  // The metadata torch's index_select gives: contiguous, the index's length.
  EXPECT_EQ(g.value(stepped).meta, meta({3, 3}));
  EXPECT_EQ(g.value(columns).meta, meta({8, 2}));
  EXPECT_EQ(g.value(whole).meta, meta({8, 3}));
}

TEST(PrimBuilder, CatOfOneNonEmptyTensorIsACopyOfIt) {
  // Note [Cat of one non-empty tensor]: a cache's first append.
  PrimGraph g;
  PrimBuilder b(g);
  const int past = g.add_input(meta({2, 0, 4}));
  const int fresh = g.add_input(meta({2, 5, 4}));
  graph::TensorMeta needs_grad = meta({2, 0, 4});
  needs_grad.requires_grad = true;
  const int learned = g.add_input(needs_grad);
  const int other = g.add_input(meta({2, 3, 4}));
  const int appended = b.cat({past, fresh}, 1);
  const int both = b.cat({fresh, other}, 1);
  const int with_grad = b.cat({learned, fresh}, 1);  // its empty gradient stays torch's
  g.set_outputs({appended, both, with_grad});
  EXPECT_EQ(g.verify(), "");
  auto made_by = [&](int id) { return g.node(g.value(id).node).prim; };
  EXPECT_EQ(made_by(appended), Prim::Clone);
  EXPECT_EQ(g.node(g.value(appended).node).args[0].value, fresh);
  EXPECT_EQ(g.value(appended).meta, meta({2, 5, 4}));
  EXPECT_EQ(made_by(both), Prim::Cat);
  EXPECT_EQ(made_by(with_grad), Prim::Cat);
}

TEST(PrimBuilder, CatOfOneNonEmptyTensorTakesThePromotedDtype) {
  // An empty float32 past and bfloat16 values: torch's cat is float32.
  PrimGraph g;
  PrimBuilder b(g);
  const int past = g.add_input(meta({0}));
  const int fresh = g.add_input(meta({2, 5, 4}, DType::BFloat16));
  const int appended = b.cat({past, fresh}, 1);
  g.set_outputs({appended});
  EXPECT_EQ(g.verify(), "");
  EXPECT_EQ(g.node(g.value(appended).node).prim, Prim::ConvertElementType);
  EXPECT_EQ(g.value(appended).meta, meta({2, 5, 4}));
}

TEST(PrimBuilder, JoinsProductsAndIndexing) {
  PrimGraph g;
  PrimBuilder b(g);
  const int x = g.add_input(meta({2, 3}));
  const int y = g.add_input(meta({4, 3}, DType::Float64));
  const int idx = g.add_input(meta({2}, DType::Int64));
  const int c = b.cat({x, y}, -2);
  const int m = b.matmul(c, b.permute(b.convert(x, DType::Float64), {1, 0}));
  const int ga = b.gather(x, -1, b.unsqueeze(idx, 1));
  const int sc = b.scatter(x, 1, b.unsqueeze(idx, 1), PrimArg::of_scalar(Scalar::of_float(0.5)));
  const int sa = b.scatter(x, 1, b.unsqueeze(idx, 1), PrimArg::of_value(ga), /*add=*/true);
  const int is = b.index_select(y, 0, idx);
  const int ip = b.index_put(x, {std::nullopt, idx}, b.full({}, Scalar::of_float(2)), true);
  g.set_outputs({m, sc, sa, is, ip});
  EXPECT_EQ(g.verify(), "");
  EXPECT_EQ(format_prim_graph(g),
            "%0 = input : f32[2, 3]\n"
            "%1 = input : f64[4, 3]\n"
            "%2 = input : i64[2]\n"
            "%3 = cat(%0, %1, dim=0) : f64[6, 3]\n"
            "%4 = convert_element_type(%0, dtype=float64) : f64[2, 3]\n"
            "%5 = permute(%4, dims=[1, 0]) : f64[3, 2] stride=(1, 3)\n"
            "%6 = matmul(%3, %5) : f64[6, 2]\n"
            "%7 = unsqueeze(%2, dim=1) : i64[2, 1]\n"
            "%8 = gather(%0, %7, dim=1) : f32[2, 1]\n"
            "%9 = unsqueeze(%2, dim=1) : i64[2, 1]\n"
            "%10 = scatter(%0, %9, 0.5, dim=1) : f32[2, 3]\n"
            "%11 = unsqueeze(%2, dim=1) : i64[2, 1]\n"
            "%12 = scatter(%0, %11, %8, dim=1, add=True) : f32[2, 3]\n"
            "%13 = index_select(%1, %2, dim=0) : f64[2, 3]\n"
            "%14 = full(sizes=[], value=2.0, dtype=float32) : f32[]\n"
            "%15 = index_put(%0, %14, %2, dims=[1], accumulate=True) : f32[2, 3]\n"
            "return (%6, %10, %12, %13, %15)\n");
}

TEST(PrimBuilder, FactoriesAndRandomDraws) {
  PrimGraph g;
  PrimBuilder b(g, DType::Float64);
  const int f = b.full({2, 2}, Scalar::of_float(1.5));
  const int i = b.iota(4, 1, 2, DType::Int64);
  const int u = b.uniform({3}, 0, 1, DType::Float32);
  const int n = b.normal({3}, 0, 2, DType::Float32);
  const int p = b.bernoulli(u);
  g.set_outputs({f, i, n, p});
  EXPECT_EQ(format_prim_graph(g),
            "%0 = full(sizes=[2, 2], value=1.5, dtype=float64) : f64[2, 2]\n"
            "%1 = iota(sizes=[4], start=1, step=2, dtype=int64) : i64[4]\n"
            "%2 = uniform(sizes=[3], low=0.0, high=1.0, dtype=float32) : f32[3]\n"
            "%3 = normal(sizes=[3], mean=0.0, std=2.0, dtype=float32) : f32[3]\n"
            "%4 = bernoulli(%2) : f32[3]\n"
            "return (%0, %1, %3, %4)\n");
}

TEST(PrimBuilder, ExternCallKeepsArgumentsAndGivenMetas) {
  test::PyRef max_pool = test::eval("torch.nn.functional.max_pool2d");
  test::PyRef two = test::eval("2");
  PrimGraph g;
  PrimBuilder b(g);
  const int x = g.add_input(meta({1, 2, 4, 4}));
  const Py_ssize_t before = Py_REFCNT(max_pool.get());
  std::vector<int> out = b.extern_call(max_pool.get(), "F.max_pool2d", {graph::Arg::of_node(x)},
                                       {{"kernel_size", graph::Arg::of_constant(two.get())}},
                                       {meta({1, 2, 2, 2})});
  EXPECT_EQ(Py_REFCNT(max_pool.get()), before + 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(g.verify(), "");
  EXPECT_THAT(format_prim_graph(g),
              ::testing::HasSubstr("%1 = extern F.max_pool2d(%0, kernel_size=2) : f32[1, 2, 2, 2]"));
  EXPECT_THROW(b.extern_call(max_pool.get(), "F.max_pool2d", {graph::Arg::of_node(7)}, {}, {}),
               PrimError);
}

TEST(PrimBuilder, NewFamiliesRejectBadInput) {
  PrimGraph g;
  PrimBuilder b(g);
  const int x = g.add_input(meta({2, 3}));
  const int v = g.add_input(meta({3}));
  const int i32 = g.add_input(meta({2}, DType::Int32));
  EXPECT_THROW(b.matmul(x, v), PrimError);            // rank 1: decompositions unsqueeze
  EXPECT_THROW(b.cat({x, v}, 0), PrimError);          // ranks differ
  EXPECT_THROW(b.gather(x, 0, i32), PrimError);       // int32 index
  EXPECT_THROW(b.scatter(x, 0, i32, PrimArg::of_scalar(Scalar::of_int(1)), true), PrimError);
  EXPECT_THROW(b.index_put(x, {std::nullopt}, v, false), PrimError);
  EXPECT_THROW(b.uniform({2}, 0, 1, DType::Int64), PrimError);
  EXPECT_THROW(b.bernoulli(i32), PrimError);
  EXPECT_TRUE(g.nodes().empty());
}

}  // namespace
}  // namespace kiln::prims
