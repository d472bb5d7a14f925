// Tests of graph/graph.h: node numbering and the reference ownership of Arg
// and Node (constants, dict keys and targets are owned).
#include <Python.h>
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "graph/graph.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::graph {
namespace {

using test::eval;
using test::PyRef;

TEST(Graph, NodesAreNumberedInOrderAndInputsAreListed) {
  PyRef relu = eval("torch.relu");
  Graph graph;
  TensorMeta meta;
  EXPECT_EQ(graph.add_input(4, "L['x']", meta), 0);
  EXPECT_EQ(graph.add_input(7, "L['y']", meta), 1);
  EXPECT_EQ(graph.add_call("torch.relu", relu.get(), {Arg::of_node(0)}, {}), 2);
  EXPECT_EQ(graph.add_call("torch.relu", relu.get(), {Arg::of_node(2)}, {}), 3);
  EXPECT_EQ(graph.inputs(), (std::vector<int>{0, 1}));
  EXPECT_EQ(graph.call_count(), 2);
  EXPECT_EQ(graph.node(1).kind, NodeKind::Input);
  EXPECT_EQ(graph.node(1).input_source, 7);
  EXPECT_EQ(graph.node(1).input_name, "L['y']");
  ASSERT_EQ(graph.node(1).metas.size(), 1u);
  EXPECT_EQ(graph.node(3).kind, NodeKind::Call);
  EXPECT_EQ(graph.node(3).target, relu.get());
  EXPECT_EQ(graph.node(3).args[0].node, 2);
}

TEST(Graph, OwnsTargetsAndConstants) {
  PyRef target = eval("lambda *a, **k: None");
  PyRef constant = eval("object()");
  const Py_ssize_t target_before = Py_REFCNT(target.get());
  const Py_ssize_t constant_before = Py_REFCNT(constant.get());
  {
    Graph graph;
    // Growing the node vector moves nodes; references must follow them.
    for (int i = 0; i < 20; ++i) {
      graph.add_call("f", target.get(), {Arg::of_constant(constant.get())},
                     {{"k", Arg::of_constant(constant.get())}});
    }
    graph.set_output(Arg::of_constant(constant.get()));
    EXPECT_EQ(Py_REFCNT(target.get()), target_before + 20);
    EXPECT_EQ(Py_REFCNT(constant.get()), constant_before + 41);
  }
  EXPECT_EQ(Py_REFCNT(target.get()), target_before);
  EXPECT_EQ(Py_REFCNT(constant.get()), constant_before);
}

TEST(Arg, CopyAndMoveKeepReferencesBalanced) {
  PyRef value = eval("object()");
  PyRef key = eval("'some_key_' + str(12345)");
  const Py_ssize_t value_before = Py_REFCNT(value.get());
  const Py_ssize_t key_before = Py_REFCNT(key.get());
  {
    Arg dict;
    dict.kind = Arg::Kind::Dict;
    Py_INCREF(key.get());
    dict.keys.push_back(key.get());
    dict.items.push_back(Arg::of_constant(value.get()));
    EXPECT_EQ(Py_REFCNT(value.get()), value_before + 1);
    EXPECT_EQ(Py_REFCNT(key.get()), key_before + 1);

    Arg copy(dict);
    EXPECT_EQ(Py_REFCNT(value.get()), value_before + 2);
    EXPECT_EQ(Py_REFCNT(key.get()), key_before + 2);
    EXPECT_EQ(copy.items[0].constant, value.get());

    Arg moved(std::move(copy));
    EXPECT_EQ(Py_REFCNT(value.get()), value_before + 2);
    EXPECT_EQ(Py_REFCNT(key.get()), key_before + 2);

    Arg assigned = Arg::of_constant(value.get());  // +1
    assigned = dict;                               // -1 (old constant), +1 key, +1 item
    EXPECT_EQ(Py_REFCNT(value.get()), value_before + 3);
    EXPECT_EQ(Py_REFCNT(key.get()), key_before + 3);
    assigned = assigned;  // self-assignment is a no-op
    EXPECT_EQ(Py_REFCNT(value.get()), value_before + 3);

    Arg target = Arg::of_node(3);
    target = std::move(moved);
    EXPECT_EQ(target.kind, Arg::Kind::Dict);
    EXPECT_EQ(Py_REFCNT(value.get()), value_before + 3);
    EXPECT_EQ(Py_REFCNT(key.get()), key_before + 3);
  }
  EXPECT_EQ(Py_REFCNT(value.get()), value_before);
  EXPECT_EQ(Py_REFCNT(key.get()), key_before);
}

}  // namespace
}  // namespace kiln::graph
