// Tests of graph/graph_tail.h: a traced backward cut off into a graph of
// its own (Note [Traced Function backwards]).
#include <Python.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/graph_tail.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::graph {
namespace {

using test::eval;
using test::PyRef;

TensorMeta meta_of(std::vector<int64_t> sizes) {
  TensorMeta meta;
  meta.sizes = sizes;
  meta.strides = contiguous_strides(sizes);
  return meta;
}

int call(Graph& graph, PyObject* fn, std::vector<Arg> args, std::vector<int64_t> sizes) {
  const int id = graph.add_call("torch.mul", fn, std::move(args), {});
  graph.node(id).metas = {meta_of(sizes)};
  return id;
}

TEST(GraphTail, PlaceholdersThenEarlierValuesBecomeInputs) {
  PyRef mul = eval("torch.mul");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", meta_of({4}));
  const int y = call(graph, mul.get(), {Arg::of_node(x), Arg::of_node(x)}, {4});  // the forward
  const int first = static_cast<int>(graph.nodes().size());
  const int grad = call(graph, mul.get(), {Arg::of_node(y), Arg::of_constant(Py_False)}, {4});  // placeholder
  const int a = call(graph, mul.get(), {Arg::of_node(grad), Arg::of_node(x)}, {4});
  const int b = call(graph, mul.get(), {Arg::of_node(a), Arg::of_node(y)}, {4});
  Arg output;
  output.kind = Arg::Kind::Tuple;
  output.items = {Arg::of_node(b), Arg::of_constant(Py_None), Arg::of_node(x)};
  std::string why;
  GraphTail tail = cut_tail(graph, first, {grad}, output, &why);
  ASSERT_TRUE(tail.graph) << why;
  const Graph& cut = *tail.graph;
  // The placeholder, then x and y in the order the tail reads them.
  EXPECT_EQ(cut.inputs(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(tail.outer, (std::vector<int>{x, y}));
  ASSERT_EQ(cut.nodes().size(), 5u);
  EXPECT_EQ(cut.node(3).args[0].node, 0);  // grad * x
  EXPECT_EQ(cut.node(3).args[1].node, 1);
  EXPECT_EQ(cut.node(4).args[0].node, 3);  // a * y
  EXPECT_EQ(cut.node(4).args[1].node, 2);
  ASSERT_EQ(cut.output().items.size(), 3u);
  EXPECT_EQ(cut.output().items[0].node, 4);
  EXPECT_EQ(cut.output().items[1].constant, Py_None);
  EXPECT_EQ(cut.output().items[2].node, 1);  // an earlier value returned as it is
  EXPECT_EQ(cut.node(4).metas, graph.node(b).metas);
}

TEST(GraphTail, RefusesReadingAnEarlierTupleResult) {
  PyRef mul = eval("torch.mul");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", meta_of({4}));
  const int pair = graph.add_call("torch.var_mean", mul.get(), {Arg::of_node(x)}, {});
  graph.node(pair).metas = {meta_of({}), meta_of({})};
  graph.node(pair).returns_tuple = true;
  const int first = static_cast<int>(graph.nodes().size());
  const int grad = call(graph, mul.get(), {Arg::of_node(x)}, {4});
  const int a = call(graph, mul.get(), {Arg::of_node(grad), Arg::of_node(pair)}, {4});
  std::string why;
  GraphTail tail = cut_tail(graph, first, {grad}, Arg::of_node(a), &why);
  EXPECT_FALSE(tail.graph);
  EXPECT_NE(why.find("not one tensor"), std::string::npos) << why;
}

}  // namespace
}  // namespace kiln::graph
