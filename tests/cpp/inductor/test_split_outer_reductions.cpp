// Tests of inductor/split_outer_reductions.h (Note [Two-step outer
// reductions]): which reductions split, the graph they become, and that
// the split graph computes what the original does (run by PrimExecutor on
// CPU tensors; the pass reads only metadata).
#include <Python.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "inductor/split_outer_reductions.h"
#include "prims/prim_builder.h"
#include "runtime/aten_bridge.h"
#include "runtime/prim_executor.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::inductor {
namespace {

using graph::DType;
using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::PyRef;

graph::TensorMeta meta(std::vector<int64_t> sizes, DType dtype = DType::Float32) {
  graph::TensorMeta m;
  m.sizes = sizes;
  int64_t stride = 1;
  m.strides.assign(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 0;) {
    m.strides[i] = stride;
    stride *= sizes[i];
  }
  m.dtype = dtype;
  return m;
}

int count(const PrimGraph& graph, Prim prim) {
  int n = 0;
  for (const auto& node : graph.nodes()) n += node.prim == prim;
  return n;
}

PyRef run(const PrimGraph& graph, PyObject* input) {
  runtime::PrimExecutor executor(std::make_shared<PrimGraph>(graph));
  PyRef out = PyRef::steal(executor.run(&input));
  if (!out) ADD_FAILURE() << test::take_error();
  return out;
}

// True when tensors a and e have one shape and allclose values (the split
// sums associate differently).
bool close(PyObject* a, PyObject* e) {
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "torch", test::eval("torch").get());
  PyDict_SetItemString(ns.get(), "a", a);
  PyDict_SetItemString(ns.get(), "e", e);
  PyRef same = PyRef::steal(PyRun_String("a.shape == e.shape and torch.allclose(a, e, rtol=1e-5, atol=1e-4)",
                                         Py_eval_input, ns.get(), ns.get()));
  if (!same) ADD_FAILURE() << test::take_error();
  return same.get() == Py_True;
}

TEST(SplitOuterReductions, TallSumsAndExtremesSplitRowReductionsDoNot) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta({4096, 24}));
  const int y = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(x));
  const int sum = b.reduce(Prim::Sum, y, {0}, false);
  const int max = b.reduce(Prim::Amax, x, {0}, true);
  const int rows = b.reduce(Prim::Sum, x, {1}, false);  // innermost: a row reduction already
  graph.set_outputs({sum, max, rows});
  PrimGraph split;
  ASSERT_TRUE(split_outer_reductions(graph, &split));
  EXPECT_EQ(count(split, Prim::Sum), 3);
  EXPECT_EQ(count(split, Prim::Amax), 2);
  EXPECT_EQ(count(split, Prim::View), 2);
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    EXPECT_EQ(split.value(split.outputs()[i]).meta, graph.value(graph.outputs()[i]).meta) << i;
  }
  // A second pass finds nothing left to split.
  PrimGraph again;
  EXPECT_FALSE(split_outer_reductions(split, &again));
  PyRef input = test::eval("torch.randn(4096, 24)");
  PyRef want = run(graph, input.get()), got = run(split, input.get());
  for (Py_ssize_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(close(PyTuple_GET_ITEM(got.get(), i), PyTuple_GET_ITEM(want.get(), i))) << i;
  }
}

TEST(SplitOuterReductions, ReductionsOverSeveralDimsSplitAtTheOutermost) {
  for (const bool keepdim : {false, true}) {
    PrimGraph graph;
    PrimBuilder b(graph);
    const int x = graph.add_input(meta({64, 256, 24}));
    const int single = b.reduce(Prim::Sum, b.view(x, {16384, 24}), {0}, keepdim);
    graph.set_outputs({b.reduce(Prim::Sum, x, {0, 1}, keepdim), b.reduce(Prim::Amin, x, {1, 0}, keepdim), single});
    PrimGraph split;
    ASSERT_TRUE(split_outer_reductions(graph, &split));
    EXPECT_EQ(count(split, Prim::Sum), 4);
    EXPECT_EQ(count(split, Prim::Amin), 2);
    PyRef input = test::eval("torch.randn(64, 256, 24)");
    PyRef want = run(graph, input.get()), got = run(split, input.get());
    for (Py_ssize_t i = 0; i < 3; ++i) {
      EXPECT_EQ(split.value(split.outputs()[i]).meta, graph.value(graph.outputs()[i]).meta) << i;
      EXPECT_TRUE(close(PyTuple_GET_ITEM(got.get(), i), PyTuple_GET_ITEM(want.get(), i)))
          << i << " keepdim " << keepdim;
    }
  }
}

TEST(SplitOuterReductions, LowPrecisionSumsKeepFloat32Partials) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta({8192, 3, 16}, DType::BFloat16));
  graph.set_outputs({b.reduce(Prim::Sum, x, {0}, false)});
  PrimGraph split;
  ASSERT_TRUE(split_outer_reductions(graph, &split));
  EXPECT_EQ(count(split, Prim::ConvertElementType), 1);
  EXPECT_EQ(split.value(split.outputs()[0]).meta, graph.value(graph.outputs()[0]).meta);
  int partial_sums_in_f32 = 0;
  for (const auto& node : split.nodes()) {
    if (node.prim == Prim::Sum) partial_sums_in_f32 += split.value(node.outputs[0]).meta.dtype == DType::Float32;
  }
  EXPECT_EQ(partial_sums_in_f32, 2);
}

TEST(SplitOuterReductions, ShortWideAndMultiDimReductionsStay) {
  for (const auto& [sizes, dims] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{1000, 24}, {0}},         // too short
           {{4096, 8192}, {0}},       // too many kept points
           {{4096, 8, 24}, {0, 1}},   // two dims
           {{4099, 24}, {0}}}) {      // a prime extent: no step count divides it
    PrimGraph graph;
    PrimBuilder b(graph);
    const int x = graph.add_input(meta(sizes));
    graph.set_outputs({b.reduce(Prim::Sum, x, dims, false)});
    PrimGraph split;
    EXPECT_FALSE(split_outer_reductions(graph, &split)) << sizes[0] << "x" << sizes[1];
  }
}

}  // namespace
}  // namespace kiln::inductor
