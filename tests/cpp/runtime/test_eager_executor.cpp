// Tests of runtime/eager_executor.h: hand-built graphs replayed on real
// tensors, compared with torch's own results; output structures; errors;
// and that every value is released after its last use.
#include <Python.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "graph/graph_printer.h"
#include "runtime/eager_executor.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::runtime {
namespace {

using graph::Arg;
using graph::Graph;
using graph::TensorMeta;
using test::eval;
using test::PyRef;
using ::testing::HasSubstr;

Arg node(int id) { return Arg::of_node(id); }
Arg constant(const char* expression) { return Arg::of_constant(eval(expression).get()); }

Arg container(Arg::Kind kind, std::vector<Arg> items) {
  Arg arg;
  arg.kind = kind;
  arg.items = std::move(items);
  return arg;
}

Arg dict_of(std::vector<std::pair<PyRef, Arg>> entries) {
  Arg arg;
  arg.kind = Arg::Kind::Dict;
  for (auto& [key, value] : entries) {
    arg.keys.push_back(PyRef(key).release());
    arg.items.push_back(std::move(value));
  }
  return arg;
}

// A Python helper module: make() returns a fresh tensor and remembers a weak
// reference to it; alive() reports which of those tensors still exist.
PyRef probe_module() {
  return test::exec_module(
      "import weakref\n"
      "refs = []\n"
      "def make(t):\n"
      "    out = t + 1\n"
      "    refs.append(weakref.ref(out))\n"
      "    return out\n"
      "def alive():\n"
      "    return [r() is not None for r in refs]\n");
}

PyRef run(const EagerExecutor& executor, std::vector<PyObject*> inputs) {
  PyRef out = PyRef::steal(executor.run(inputs.data()));
  if (!out) ADD_FAILURE() << "run failed: " << test::take_error();
  return out;
}

TEST(EagerExecutor, AddReluSplitMatchesTorch) {
  PyRef add = eval("torch.add");
  PyRef relu = eval("torch.relu");
  PyRef split = eval("torch.split");
  PyRef getitem = eval("operator.getitem");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int y = graph.add_input(1, "L['y']", TensorMeta{});
  const int sum =
      graph.add_call("torch.add", add.get(), {node(x), node(y)}, {{"alpha", constant("2")}});
  const int r = graph.add_call("torch.relu", relu.get(), {node(sum)}, {});
  const int parts = graph.add_call("torch.split", split.get(), {node(r), constant("2")}, {});
  graph.node(parts).returns_tuple = true;
  const int first =
      graph.add_call("operator.getitem", getitem.get(), {node(parts), constant("0")}, {});
  const int second =
      graph.add_call("operator.getitem", getitem.get(), {node(parts), constant("1")}, {});
  graph.set_output(container(Arg::Kind::Tuple, {node(first), node(second)}));
  EagerExecutor executor(graph);

  PyRef in_x = eval("torch.arange(12.).reshape(4, 3) - 3");
  PyRef in_y = eval("torch.linspace(-1, 1, 12).reshape(4, 3)");
  PyRef out = run(executor, {in_x.get(), in_y.get()});
  ASSERT_TRUE(out);
  ASSERT_TRUE(PyTuple_CheckExact(out.get()));
  ASSERT_EQ(PyTuple_GET_SIZE(out.get()), 2);

  PyObject* ns = test::shared_namespace();
  PyDict_SetItemString(ns, "_x", in_x.get());
  PyDict_SetItemString(ns, "_y", in_y.get());
  PyRef expected = eval("torch.split(torch.relu(torch.add(_x, _y, alpha=2)), 2)");
  // Had alpha=2 not been passed by keyword, the result would be this.
  PyRef without_alpha = eval("torch.split(torch.relu(_x + _y), 2)");
  PyDict_DelItemString(ns, "_x");
  PyDict_DelItemString(ns, "_y");
  ASSERT_TRUE(expected);
  ASSERT_TRUE(without_alpha);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(
        test::torch_equal(PyTuple_GET_ITEM(out.get(), i), PyTuple_GET_ITEM(expected.get(), i)))
        << i;
    EXPECT_FALSE(
        test::torch_equal(PyTuple_GET_ITEM(out.get(), i), PyTuple_GET_ITEM(without_alpha.get(), i)))
        << i;
  }
}

TEST(EagerExecutor, InputsAreBoundInOrder) {
  PyRef sub = eval("torch.sub");
  Graph graph;
  const int a = graph.add_input(0, "L['a']", TensorMeta{});
  const int b = graph.add_input(1, "L['b']", TensorMeta{});
  graph.set_output(Arg::of_node(graph.add_call("torch.sub", sub.get(), {node(b), node(a)}, {})));
  EagerExecutor executor(graph);
  PyRef out = run(executor, {eval("torch.tensor([1.])").get(), eval("torch.tensor([10.])").get()});
  ASSERT_TRUE(out);
  EXPECT_TRUE(test::torch_equal(out.get(), eval("torch.tensor([9.])").get()));
}

TEST(EagerExecutor, ContainerArgumentsAndKeywordOnlyCalls) {
  PyRef cat = eval("torch.cat");
  PyRef stack = eval("torch.stack");
  PyRef sum = eval("torch.sum");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int y = graph.add_input(1, "L['y']", TensorMeta{});
  const int c =
      graph.add_call("torch.cat", cat.get(), {container(Arg::Kind::Tuple, {node(x), node(y)})},
                     {{"dim", constant("1")}});
  const int s = graph.add_call("torch.stack", stack.get(),
                               {container(Arg::Kind::List, {node(x), node(y), node(x)})}, {});
  const int total = graph.add_call("torch.sum", sum.get(), {node(s)},
                                   {{"dim", constant("(0, 2)")}, {"keepdim", constant("True")}});
  graph.set_output(container(Arg::Kind::Tuple, {node(c), node(total)}));
  EagerExecutor executor(graph);
  PyRef in_x = eval("torch.ones(2, 3)");
  PyRef in_y = eval("torch.full((2, 3), 2.)");
  PyRef out = run(executor, {in_x.get(), in_y.get()});
  ASSERT_TRUE(out);
  EXPECT_TRUE(test::torch_equal(
      PyTuple_GET_ITEM(out.get(), 0),
      eval("torch.cat((torch.ones(2, 3), torch.full((2, 3), 2.)), dim=1)").get()));
  // (1 + 2 + 1) * 3 per row, shape (1, 2, 1).
  EXPECT_TRUE(
      test::torch_equal(PyTuple_GET_ITEM(out.get(), 1), eval("torch.full((1, 2, 1), 12.)").get()));
}

TEST(EagerExecutor, OutputStructuresWithConstants) {
  PyRef relu = eval("torch.relu");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int r = graph.add_call("torch.relu", relu.get(), {node(x)}, {});
  graph.set_output(
      container(Arg::Kind::Tuple,
                {node(x), container(Arg::Kind::List, {node(r), constant("'c'")}),
                 dict_of({{test::py_str("k"), node(r)}, {test::py_str("n"), constant("7")}}),
                 constant("None"), container(Arg::Kind::Tuple, {})}));
  EagerExecutor executor(graph);
  PyRef in_x = eval("torch.tensor([-1., 2.])");
  PyRef out = run(executor, {in_x.get()});
  ASSERT_TRUE(out);
  ASSERT_TRUE(PyTuple_CheckExact(out.get()));
  ASSERT_EQ(PyTuple_GET_SIZE(out.get()), 5);
  // An input passes through as the very object given.
  EXPECT_EQ(PyTuple_GET_ITEM(out.get(), 0), in_x.get());
  PyObject* list = PyTuple_GET_ITEM(out.get(), 1);
  ASSERT_TRUE(PyList_CheckExact(list));
  ASSERT_EQ(PyList_GET_SIZE(list), 2);
  EXPECT_TRUE(test::torch_equal(PyList_GET_ITEM(list, 0), eval("torch.tensor([0., 2.])").get()));
  EXPECT_EQ(test::repr_of(PyList_GET_ITEM(list, 1)), "'c'");
  PyObject* dict = PyTuple_GET_ITEM(out.get(), 2);
  ASSERT_TRUE(PyDict_CheckExact(dict));
  EXPECT_EQ(PyDict_Size(dict), 2);
  // One node used twice in the output is one object.
  EXPECT_EQ(PyDict_GetItemString(dict, "k"), PyList_GET_ITEM(list, 0));
  EXPECT_EQ(test::repr_of(PyDict_GetItemString(dict, "n")), "7");
  EXPECT_EQ(PyTuple_GET_ITEM(out.get(), 3), Py_None);
  EXPECT_EQ(test::repr_of(PyTuple_GET_ITEM(out.get(), 4)), "()");
}

TEST(EagerExecutor, ConstantOnlyAndSingleNodeOutputs) {
  Graph constant_graph;
  constant_graph.add_input(0, "L['x']", TensorMeta{});
  constant_graph.set_output(constant("(1, 'two')"));
  EagerExecutor constant_executor(constant_graph);
  PyRef in_x = eval("torch.ones(1)");
  EXPECT_EQ(test::repr_of(run(constant_executor, {in_x.get()}).get()), "(1, 'two')");

  Graph identity;
  identity.set_output(node(identity.add_input(0, "L['x']", TensorMeta{})));
  EagerExecutor identity_executor(identity);
  EXPECT_EQ(run(identity_executor, {in_x.get()}).get(), in_x.get());
}

TEST(EagerExecutor, ErrorInsideAnOpReturnsNullAndLeaksNothing) {
  PyRef probes = probe_module();
  PyRef make = test::item(probes, "make");
  PyRef add = eval("torch.add");
  PyRef neg = eval("torch.neg");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int y = graph.add_input(1, "L['y']", TensorMeta{});
  const int made = graph.add_call("make", make.get(), {node(x)}, {});
  const int bad = graph.add_call("torch.add", add.get(), {node(made), node(y)}, {});
  const int after = graph.add_call("torch.neg", neg.get(), {node(bad)}, {});
  graph.set_output(container(Arg::Kind::Tuple, {node(after), node(made)}));
  EagerExecutor executor(graph);

  PyRef in_x = eval("torch.ones(2, 3)");
  PyRef in_y = eval("torch.ones(4, 5)");
  const Py_ssize_t x_before = Py_REFCNT(in_x.get());
  const Py_ssize_t y_before = Py_REFCNT(in_y.get());
  PyObject* inputs[] = {in_x.get(), in_y.get()};
  PyObject* out = executor.run(inputs);
  EXPECT_EQ(out, nullptr);
  ASSERT_TRUE(PyErr_Occurred());
  EXPECT_TRUE(PyErr_ExceptionMatches(PyExc_RuntimeError));
  EXPECT_THAT(test::take_error(), HasSubstr("size of tensor a (3) must match"));
  EXPECT_EQ(Py_REFCNT(in_x.get()), x_before);
  EXPECT_EQ(Py_REFCNT(in_y.get()), y_before);
  // The intermediate made before the failure (kept for the output) is gone.
  PyRef alive = PyRef::steal(PyObject_CallNoArgs(test::item(probes, "alive").get()));
  EXPECT_EQ(test::repr_of(alive.get()), "[False]");

  // The executor stays usable after a failure.
  PyRef good_y = eval("torch.ones(2, 3)");
  PyRef good = run(executor, {in_x.get(), good_y.get()});
  ASSERT_TRUE(good);
  EXPECT_TRUE(
      test::torch_equal(PyTuple_GET_ITEM(good.get(), 0), eval("torch.full((2, 3), -3.)").get()));
}

TEST(EagerExecutor, UnbuildableOutputReturnsNullWithError) {
  PyRef relu = eval("torch.relu");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int r = graph.add_call("torch.relu", relu.get(), {node(x)}, {});
  // A list is not hashable, so the output dict cannot be built.
  graph.set_output(dict_of({{eval("[1]"), node(r)}}));
  EagerExecutor executor(graph);
  PyRef in_x = eval("torch.ones(2)");
  const Py_ssize_t before = Py_REFCNT(in_x.get());
  PyObject* inputs[] = {in_x.get()};
  EXPECT_EQ(executor.run(inputs), nullptr);
  EXPECT_TRUE(PyErr_ExceptionMatches(PyExc_TypeError)) << test::take_error();
  PyErr_Clear();
  EXPECT_EQ(Py_REFCNT(in_x.get()), before);
}

TEST(EagerExecutor, UnbuildableArgumentReturnsNullWithError) {
  PyRef probes = probe_module();
  PyRef make = test::item(probes, "make");
  PyRef relu = eval("torch.relu");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int made = graph.add_call("make", make.get(), {node(x)}, {});
  graph.set_output(Arg::of_node(
      graph.add_call("torch.relu", relu.get(), {dict_of({{eval("[1]"), node(made)}})}, {})));
  EagerExecutor executor(graph);
  PyRef in_x = eval("torch.ones(2)");
  const Py_ssize_t before = Py_REFCNT(in_x.get());
  PyObject* inputs[] = {in_x.get()};
  EXPECT_EQ(executor.run(inputs), nullptr);
  EXPECT_TRUE(PyErr_ExceptionMatches(PyExc_TypeError)) << test::take_error();
  PyErr_Clear();
  EXPECT_EQ(Py_REFCNT(in_x.get()), before);
  PyRef alive = PyRef::steal(PyObject_CallNoArgs(test::item(probes, "alive").get()));
  EXPECT_EQ(test::repr_of(alive.get()), "[False]");
}

// Builds  %1 = make(%0); %2 = torch.neg(%1); %3 = alive()  and returns the
// output (%2, %3), plus %1 when `keep_intermediate`.
PyRef run_release_probe(bool keep_intermediate, bool use_intermediate) {
  PyRef probes = probe_module();
  PyRef make = test::item(probes, "make");
  PyRef alive = test::item(probes, "alive");
  PyRef neg = eval("torch.neg");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int made = graph.add_call("make", make.get(), {node(x)}, {});
  const int negated =
      graph.add_call("torch.neg", neg.get(), {node(use_intermediate ? made : x)}, {});
  const int report = graph.add_call("alive", alive.get(), {}, {});
  std::vector<Arg> outputs = {node(negated), node(report)};
  if (keep_intermediate) outputs.push_back(node(made));
  graph.set_output(container(Arg::Kind::Tuple, std::move(outputs)));
  EagerExecutor executor(graph);
  PyRef in_x = eval("torch.ones(3)");
  PyRef out = run(executor, {in_x.get()});
  if (!out) return out;
  return PyRef::borrow(PyTuple_GET_ITEM(out.get(), 1));
}

TEST(EagerExecutor, ValuesAreReleasedAfterTheirLastUse) {
  // Used by torch.neg, then dead before alive() runs.
  EXPECT_EQ(test::repr_of(run_release_probe(false, true).get()), "[False]");
  // Never used: released right after it is made.
  EXPECT_EQ(test::repr_of(run_release_probe(false, false).get()), "[False]");
  // Needed by the output: still alive when alive() runs.
  EXPECT_EQ(test::repr_of(run_release_probe(true, true).get()), "[True]");
}

TEST(EagerExecutor, RepeatedRunsAreStableAndReleaseInputs) {
  PyRef mul = eval("torch.mul");
  PyRef getitem = eval("operator.getitem");
  PyRef chunk = eval("torch.chunk");
  Graph graph;
  const int x = graph.add_input(0, "L['x']", TensorMeta{});
  const int y = graph.add_input(1, "L['y']", TensorMeta{});
  const int product = graph.add_call("torch.mul", mul.get(), {node(x), node(y)}, {});
  const int chunks = graph.add_call("torch.chunk", chunk.get(), {node(product), constant("2")}, {});
  graph.node(chunks).returns_tuple = true;
  const int last =
      graph.add_call("operator.getitem", getitem.get(), {node(chunks), constant("-1")}, {});
  graph.set_output(container(Arg::Kind::List, {node(last), node(y)}));
  EagerExecutor executor(graph);

  PyRef in_x = eval("torch.arange(4.)");
  PyRef in_y = eval("torch.full((4,), 3.)");
  const Py_ssize_t x_before = Py_REFCNT(in_x.get());
  const Py_ssize_t y_before = Py_REFCNT(in_y.get());
  for (int i = 0; i < 200; ++i) {
    PyRef out = run(executor, {in_x.get(), in_y.get()});
    ASSERT_TRUE(out);
    ASSERT_TRUE(
        test::torch_equal(PyList_GET_ITEM(out.get(), 0), eval("torch.tensor([6., 9.])").get()));
    ASSERT_EQ(PyList_GET_ITEM(out.get(), 1), in_y.get());
  }
  EXPECT_EQ(Py_REFCNT(in_x.get()), x_before);
  EXPECT_EQ(Py_REFCNT(in_y.get()), y_before);
  EXPECT_FALSE(PyErr_Occurred());
}

}  // namespace
}  // namespace kiln::runtime
