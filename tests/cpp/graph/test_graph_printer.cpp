// Tests of graph/graph_printer.h: the exact text of hand-built graphs.
#include <Python.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "graph/graph_printer.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::graph {
namespace {

using test::eval;
using test::PyRef;

TensorMeta f32(std::vector<int64_t> sizes) {
  TensorMeta meta;
  meta.strides = contiguous_strides(sizes);
  meta.sizes = std::move(sizes);
  return meta;
}

Arg constant(const PyRef& value) { return Arg::of_constant(value.get()); }
Arg constant(const char* expression) { return Arg::of_constant(eval(expression).get()); }

Arg tuple_of(std::vector<Arg> items) {
  Arg arg;
  arg.kind = Arg::Kind::Tuple;
  arg.items = std::move(items);
  return arg;
}

Arg list_of(std::vector<Arg> items) {
  Arg arg;
  arg.kind = Arg::Kind::List;
  arg.items = std::move(items);
  return arg;
}

Arg dict_of(std::vector<std::pair<const char*, Arg>> entries) {
  Arg arg;
  arg.kind = Arg::Kind::Dict;
  for (auto& [key, value] : entries) {
    arg.keys.push_back(PyUnicode_FromString(key));  // the Arg owns its keys
    arg.items.push_back(std::move(value));
  }
  return arg;
}

TEST(GraphPrinter, InputsCallsKwargsAndTupleResults) {
  PyRef add = eval("torch.add");
  PyRef split = eval("torch.split");
  PyRef getitem = eval("operator.getitem");
  PyRef cat = eval("torch.cat");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", f32({2, 4}));
  const int y = graph.add_input(3, "L['self'].w", f32({2, 4}));
  const int sum = graph.add_call("torch.add", add.get(), {Arg::of_node(x), Arg::of_node(y)},
                                 {{"alpha", constant("2")}});
  graph.node(sum).metas.push_back(f32({2, 4}));
  const int parts = graph.add_call("torch.split", split.get(), {Arg::of_node(sum), constant("2")},
                                   {{"dim", constant("1")}});
  Node& split_node = graph.node(parts);
  split_node.returns_tuple = true;
  TensorMeta half;
  half.sizes = {2, 2};
  half.strides = {4, 1};
  split_node.metas = {half, half};
  const int first =
      graph.add_call("operator.getitem", getitem.get(), {Arg::of_node(parts), constant("0")}, {});
  graph.node(first).metas.push_back(half);
  const int joined =
      graph.add_call("torch.cat", cat.get(), {tuple_of({Arg::of_node(first), Arg::of_node(x)})},
                     {{"dim", constant("-1")}, {"out", constant("None")}});
  graph.node(joined).metas.push_back(f32({2, 6}));
  graph.set_output(tuple_of({Arg::of_node(joined), constant("3")}));

  EXPECT_EQ(graph.call_count(), 4);
  EXPECT_EQ(graph.inputs(), (std::vector<int>{0, 1}));
  EXPECT_EQ(format_graph(graph),
            "%0 = input L['x'] : f32[2, 4]\n"
            "%1 = input L['self'].w : f32[2, 4]\n"
            "%2 = torch.add(%0, %1, alpha=2) : f32[2, 4]\n"
            "%3 = torch.split(%2, 2, dim=1) : (f32[2, 2] stride=(4, 1), f32[2, 2] stride=(4, 1))\n"
            "%4 = operator.getitem(%3, 0) : f32[2, 2] stride=(4, 1)\n"
            "%5 = torch.cat((%4, %0), dim=-1, out=None) : f32[2, 6]\n"
            "return (%5, 3)\n");
}

TEST(GraphPrinter, ConstantsPrintAsRepr) {
  PyRef target = eval("torch.ones");
  Graph graph;
  graph.add_call("f", target.get(),
                 {constant("'text'"), constant("1.5"), constant("True"), constant("None"),
                  constant("torch.float16"), constant("slice(1, None)"), constant("(2, 3)"),
                  constant("torch.Size([4])"), constant("-7")},
                 {});
  graph.set_output(constant("None"));
  EXPECT_EQ(format_graph(graph),
            "%0 = f('text', 1.5, True, None, torch.float16, slice(1, None, None), (2, 3), "
            "torch.Size([4]), -7)\n"
            "return None\n");
}

TEST(GraphPrinter, NestedContainers) {
  PyRef target = eval("torch.stack");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", f32({3}));
  const int call =
      graph.add_call("torch.stack", target.get(),
                     {list_of({Arg::of_node(x), Arg::of_node(x)}), tuple_of({Arg::of_node(x)}),
                      tuple_of({}), list_of({})},
                     {{"opts", dict_of({{"k", Arg::of_node(x)}, {"n", constant("[1, (2,)]")}})}});
  graph.node(call).metas.push_back(f32({2, 3}));
  graph.set_output(dict_of({{"out", Arg::of_node(call)},
                            {"all", list_of({Arg::of_node(x), tuple_of({constant("0")})})}}));
  EXPECT_EQ(
      format_graph(graph),
      "%0 = input L['x'] : f32[3]\n"
      "%1 = torch.stack([%0, %0], (%0,), (), [], opts={'k': %0, 'n': [1, (2,)]}) : f32[2, 3]\n"
      "return {'out': %1, 'all': [%0, (0,)]}\n");
}

TEST(GraphPrinter, NodeWithoutMetasAndEmptyOutput) {
  PyRef target = eval("torch.manual_seed");
  Graph graph;
  graph.add_call("torch.manual_seed", target.get(), {constant("0")}, {});
  // A node that produces no tensor prints no " : meta" suffix.
  graph.set_output(tuple_of({}));
  EXPECT_EQ(format_graph(graph),
            "%0 = torch.manual_seed(0)\n"
            "return ()\n");
}

TEST(GraphPrinter, AddressesAreStripped) {
  PyRef target = eval("torch.relu");
  PyRef globals = test::exec_module(
      "def helper():\n"
      "    pass\n"
      "class Thing:\n"
      "    pass\n"
      "thing = Thing()\n");
  Graph graph;
  graph.add_call("call", target.get(),
                 {constant(test::item(globals, "helper")), constant(test::item(globals, "thing")),
                  constant("torch.relu")},
                 {});
  graph.set_output(constant("object"));
  const std::string text = format_graph(graph);
  EXPECT_EQ(text.find("0x"), std::string::npos) << text;
  EXPECT_EQ(text,
            "%0 = call(<function helper>, <kiln_test_module.Thing object>, "
            "<built-in method relu of type object>)\n"
            "return <class 'object'>\n");
}

TEST(GraphPrinter, EveryAddressInOneReprIsStripped) {
  // One constant whose repr holds two addresses: graph text must still be
  // stable ("no addresses appear", graph_printer.h).
  PyRef target = eval("torch.relu");
  Graph graph;
  graph.add_call("call", target.get(), {constant("(object(), object())")}, {});
  graph.set_output(constant("None"));
  const std::string text = format_graph(graph);
  EXPECT_EQ(text.find(" at 0x"), std::string::npos) << text;
  EXPECT_EQ(text,
            "%0 = call((<object object>, <object object>))\n"
            "return None\n");
}

TEST(GraphPrinter, LeavesNoPythonErrorOnUnprintableConstants) {
  PyRef globals = test::exec_module(
      "class Bad:\n"
      "    def __repr__(self):\n"
      "        raise RuntimeError('no')\n"
      "bad = Bad()\n");
  PyRef target = eval("torch.relu");
  Graph graph;
  graph.add_call("call", target.get(), {constant(test::item(globals, "bad"))}, {});
  graph.set_output(constant("None"));
  EXPECT_EQ(format_graph(graph),
            "%0 = call(<unprintable>)\n"
            "return None\n");
  EXPECT_FALSE(PyErr_Occurred()) << test::take_error();
}

}  // namespace
}  // namespace kiln::graph
