// Tests of runtime/prim_executor.h: prim graphs built with PrimBuilder run
// on real tensors and compared with torch's own ops (values, dtypes, sizes
// and strides); scalar operands in every position; seeded random draws;
// releasing every value; errors.
#include <Python.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "prims/prim_builder.h"
#include "runtime/aten_bridge.h"
#include "runtime/aten_calls.h"
#include "base/log.h"
#include "runtime/prim_executor.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::runtime {

using base::PyRef;
using base::set_log_channels;
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using prims::Scalar;
using test::eval;
using test::PyRef;

graph::TensorMeta meta_of(PyObject* tensor) {
  graph::TensorMeta meta;
  read_tensor_meta(tensor, &meta);
  return meta;
}

// Runs `graph` on `inputs`; returns the output tuple (null on error, with a
// test failure).
PyRef run(const PrimExecutor& executor, const std::vector<PyRef>& inputs) {
  std::vector<PyObject*> raw;
  for (const PyRef& input : inputs) raw.push_back(input.get());
  PyRef out = PyRef::steal(executor.run(raw.data()));
  if (!out) ADD_FAILURE() << "run raised " << test::take_error();
  return out;
}

// Expects `actual` to equal torch's `expected` in dtype, sizes, strides and
// values (allclose for floating results).
void expect_same(PyObject* actual, PyObject* expected, const std::string& what) {
  ASSERT_TRUE(is_tensor(actual)) << what;
  const graph::TensorMeta a = meta_of(actual), e = meta_of(expected);
  EXPECT_EQ(graph::format_tensor_meta(a), graph::format_tensor_meta(e)) << what;
  EXPECT_EQ(a.strides, e.strides) << what;
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "torch", eval("torch").get());
  PyDict_SetItemString(ns.get(), "a", actual);
  PyDict_SetItemString(ns.get(), "e", expected);
  PyRef same = PyRef::steal(PyRun_String(
      "torch.allclose(a.to(torch.complex128), e.to(torch.complex128), equal_nan=True)"
      " if a.is_floating_point() or a.is_complex() else torch.equal(a, e)",
      Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(same) << what << ": " << test::take_error();
  EXPECT_EQ(same.get(), Py_True) << what << ": " << test::repr_of(actual) << " vs "
                                 << test::repr_of(expected);
}

// A test namespace with inputs.
struct Inputs {
  PyRef ns = test::exec_module(
      "import torch\n"
      "torch.manual_seed(0)\n"
      "x = torch.randn(2, 3)\n"
      "xt = torch.randn(3, 2).t()\n"
      "xd = torch.randn(2, 3, dtype=torch.float64)\n"
      "i = torch.tensor([[1, -2, 3], [4, 5, -6]], dtype=torch.int32)\n"
      "b = torch.tensor([[True, False, True], [False, False, True]])\n"
      "idx = torch.tensor([2, 0])\n"
      "img = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)\n");
  PyRef operator[](const char* name) const { return test::item(ns, name); }
  PyRef eval(const std::string& expression) const {
    PyObject* v = PyRun_String(expression.c_str(), Py_eval_input, ns.get(), ns.get());
    if (!v) ADD_FAILURE() << expression << ": " << test::take_error();
    return PyRef::steal(v);
  }
};

TEST(PrimExecutor, ElementwiseWithScalarsInEveryPositionMatchesTorch) {
  Inputs in;
  struct Case {
    Prim prim;
    const char* lhs;  // an input name or a scalar literal
    const char* rhs;
    const char* torch_expression;
  };
  const std::vector<Case> cases = {
      {Prim::Add, "x", "xt", "x + xt"},
      {Prim::Sub, "2", "i", "2 - i"},
      {Prim::Sub, "2.5", "i", "2.5 - i"},
      {Prim::Div, "i", "2", "i / 2"},
      {Prim::Div, "3", "i", "torch.tensor(3, dtype=torch.int32) / i"},
      {Prim::FloorDivide, "i", "4", "torch.div(i, 4, rounding_mode='floor')"},
      {Prim::TruncDivide, "7", "i", "torch.div(torch.tensor(7, dtype=torch.int32), i, rounding_mode='trunc')"},
      {Prim::Pow, "2", "x", "2 ** x"},
      {Prim::Maximum, "x", "0.5", "torch.maximum(x, torch.tensor(0.5))"},
      {Prim::Minimum, "0.5", "i", "torch.minimum(torch.tensor(0.5), i)"},
      {Prim::Atan2, "1", "x", "torch.atan2(torch.tensor(1.0), x)"},
      {Prim::Fmod, "5", "i", "torch.fmod(torch.tensor(5, dtype=torch.int32), i)"},
      {Prim::Lt, "0.5", "x", "0.5 < x"},
      {Prim::Ge, "1", "i", "1 >= i"},
      {Prim::Eq, "i", "4", "i == 4"},
      {Prim::LogicalAnd, "b", "True", "torch.logical_and(b, torch.tensor(True))"},
      {Prim::LogicalXor, "0.0", "x", "torch.logical_xor(torch.tensor(0.0), x)"},
      {Prim::BitwiseAnd, "i", "6", "i & 6"},
      {Prim::Mul, "xd", "x", "xd * x"},
  };
  for (const Case& c : cases) {
    auto graph = std::make_shared<PrimGraph>();
    PrimBuilder builder(*graph);
    std::vector<PyRef> inputs;
    auto operand = [&](const char* text) {
      if (std::isalpha(static_cast<unsigned char>(text[0])) && std::string(text) != "True") {
        inputs.push_back(in[text]);
        return PrimArg::of_value(graph->add_input(meta_of(inputs.back().get())));
      }
      const std::string s = text;
      if (s == "True") return PrimArg::of_scalar(Scalar::of_bool(true));
      if (s.find('.') != std::string::npos) return PrimArg::of_scalar(Scalar::of_float(std::stod(s)));
      return PrimArg::of_scalar(Scalar::of_int(std::stoll(s)));
    };
    PrimArg a = operand(c.lhs);
    PrimArg b = operand(c.rhs);
    const int out = builder.binary(c.prim, a, b);
    graph->set_outputs({out});
    PrimExecutor executor(graph);
    PyRef result = run(executor, inputs);
    ASSERT_TRUE(result);
    expect_same(PyTuple_GET_ITEM(result.get(), 0), in.eval(c.torch_expression).get(), c.torch_expression);
    EXPECT_EQ(graph::format_tensor_meta(graph->value(out).meta),
              graph::format_tensor_meta(meta_of(PyTuple_GET_ITEM(result.get(), 0))))
        << c.torch_expression;
  }
}

TEST(PrimExecutor, ReductionsViewsCopiesAndJoinsMatchTorch) {
  Inputs in;
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  const int x = graph->add_input(meta_of(in["x"].get()));
  const int xt = graph->add_input(meta_of(in["xt"].get()));
  const int img = graph->add_input(meta_of(in["img"].get()));
  const int idx = graph->add_input(meta_of(in["idx"].get()));
  std::vector<std::pair<int, std::string>> checks = {
      {b.reduce(Prim::Sum, x, {}, false), "x.sum()"},
      {b.reduce(Prim::Sum, xt, {}, true, graph::DType::Float64), "xt.sum((0, 1), keepdim=True, dtype=torch.float64)"},
      {b.reduce(Prim::Amax, x, {-1}, true), "x.amax(-1, keepdim=True)"},
      {b.reduce(Prim::Prod, x, {}, true), "x.prod().reshape(1, 1)"},
      {b.reduce(Prim::Prod, x, {0}, false), "x.prod(0)"},
      {b.reduce(Prim::Argmin, xt, {1}, false), "xt.argmin(1)"},
      {b.reduce(Prim::Argmax, x, {}, false), "x.argmax()"},
      {b.var_mean(x, {1}, 0, true).first, "torch.var_mean(x, 1, unbiased=False, keepdim=True)[0]"},
      {b.var_mean(xt, {}, 1, false).second, "xt.mean()"},
      {b.reshape(xt, {6}), "xt.reshape(6)"},
      {b.view(x, {3, 2}), "x.view(3, 2)"},
      {b.expand(b.unsqueeze(x, 0), {4, 2, 3}), "x.unsqueeze(0).expand(4, 2, 3)"},
      {b.permute(img, {0, 2, 3, 1}), "img.permute(0, 2, 3, 1)"},
      {b.slice(x, 1, 1, std::nullopt, 2), "x[:, 1::2]"},
      {b.squeeze(b.unsqueeze(b.unsqueeze(x, 0), 2), {0, 2}), "x"},
      {b.squeeze(b.unsqueeze(x, 1), {}), "x"},
      {b.as_strided(x, {2, 2}, {1, 2}, 1), "x.as_strided((2, 2), (1, 2), 1)"},
      {b.convert(xt, graph::DType::Float16), "xt.half()"},
      {b.clone(img), "img.clone()"},
      {b.clone(img, prims::MemoryFormat::Contiguous), "img.contiguous()"},
      {b.cat({x, xt}, 0), "torch.cat([x, xt])"},
      {b.matmul(x, b.permute(xt, {1, 0})), "x @ xt.t()"},
      {b.where(b.binary(Prim::Gt, PrimArg::of_value(x), PrimArg::of_scalar(Scalar::of_int(0))),
               PrimArg::of_value(x), PrimArg::of_scalar(Scalar::of_float(0))),
       "torch.relu(x)"},
      {b.gather(x, 1, b.expand(b.unsqueeze(idx, 1), {2, 2})), "x.gather(1, idx.unsqueeze(1).expand(2, 2))"},
      {b.scatter(x, 1, b.unsqueeze(idx, 1), PrimArg::of_scalar(Scalar::of_float(9))),
       "x.scatter(1, idx.unsqueeze(1), 9.0)"},
      {b.scatter(x, 1, b.unsqueeze(idx, 1), PrimArg::of_value(b.slice(x, 1, 0, 1)), true),
       "x.scatter_add(1, idx.unsqueeze(1), x[:, :1])"},
      {b.index_select(x, 1, idx), "x.index_select(1, idx)"},
      {b.index_put(b.permute(x, {1, 0}), {idx}, b.full({}, Scalar::of_float(1)), true),
       "torch.index_put(x.t(), (idx,), torch.tensor(1.0), True)"},
      {b.index_put(x, {std::nullopt, idx}, b.full({2, 2}, Scalar::of_float(-1)), false),
       "torch.ops.aten.index_put(x, [None, idx], torch.full((2, 2), -1.0))"},
      {b.full({2, 2}, Scalar::of_int(3)), "torch.full((2, 2), 3)"},
      {b.iota(5, 2, -3, graph::DType::Float32), "torch.arange(2, -13, -3, dtype=torch.float32)"},
  };
  std::vector<int> outputs;
  for (const auto& [id, expression] : checks) outputs.push_back(id);
  graph->set_outputs(outputs);
  PrimExecutor executor(graph);
  PyRef result = run(executor, {in["x"], in["xt"], in["img"], in["idx"]});
  ASSERT_TRUE(result);
  for (size_t k = 0; k < checks.size(); ++k) {
    PyObject* actual = PyTuple_GET_ITEM(result.get(), k);
    expect_same(actual, in.eval(checks[k].second).get(), checks[k].second);
    // The builder's metadata is what torch produced.
    EXPECT_EQ(graph->value(checks[k].first).meta, meta_of(actual)) << checks[k].second;
  }
}

TEST(PrimExecutor, RandomDrawsFollowTorchsSeededGenerator) {
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  const int u = b.uniform({3, 4}, 0, 1, graph::DType::Float32);
  const int n = b.normal({5}, 0, 1, graph::DType::Float64);
  const int mask = b.bernoulli(b.full({6}, Scalar::of_float(0.5)));
  graph->set_outputs({u, n, mask});
  PrimExecutor executor(graph);
  eval("torch.manual_seed(123)");
  PyRef first = run(executor, {});
  PyRef expected_u = eval("torch.manual_seed(123) and torch.rand(3, 4)");
  PyRef expected_n = eval("torch.randn(5, dtype=torch.float64)");
  expect_same(PyTuple_GET_ITEM(first.get(), 0), expected_u.get(), "uniform is torch.rand");
  expect_same(PyTuple_GET_ITEM(first.get(), 1), expected_n.get(), "normal is torch.randn");
  eval("torch.manual_seed(123)");
  PyRef second = run(executor, {});
  for (Py_ssize_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(test::torch_equal(PyTuple_GET_ITEM(first.get(), i), PyTuple_GET_ITEM(second.get(), i)));
  }
}

// Records weak references to the tensors a graph makes, to see which survive.
PyRef probe_module() {
  return test::exec_module(
      "import weakref\n"
      "refs = []\n"
      "def make(t):\n"
      "    out = t * 2\n"
      "    refs.append(weakref.ref(out))\n"
      "    return out\n"
      "def fail(t):\n"
      "    raise ValueError('boom')\n"
      "def alive():\n"
      "    return [r() is not None for r in refs]\n");
}

TEST(PrimExecutor, ReleasesValuesAfterTheirLastUseAndInputsAfterTheCall) {
  PyRef probe = probe_module();
  PyRef make = test::item(probe, "make");
  PyRef x = eval("torch.ones(3)");
  const Py_ssize_t before = Py_REFCNT(x.get());
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  const graph::TensorMeta m = meta_of(x.get());
  const int in = graph->add_input(m);
  const int made = b.extern_call(make.get(), "make", {graph::Arg::of_node(in)}, {}, {m})[0];
  const int unused = b.extern_call(make.get(), "make", {graph::Arg::of_node(in)}, {}, {m})[0];
  (void)unused;
  const int out = b.unary(Prim::Neg, made);
  graph->set_outputs({out});
  PrimExecutor executor(graph);
  PyRef result = run(executor, {x});
  ASSERT_TRUE(result);
  PyRef alive = PyRef::steal(PyObject_CallNoArgs(test::item(probe, "alive").get()));
  EXPECT_EQ(test::repr_of(alive.get()), "[False, False]");
  EXPECT_EQ(Py_REFCNT(x.get()), before);
  std::vector<PyObject*> outputs(1);
  PyObject* raw = x.get();
  ASSERT_TRUE(executor.run_values(&raw, outputs.data()));
  PyRef held = PyRef::steal(outputs[0]);
  PyRef expected = eval("-(torch.ones(3) * 2)");
  EXPECT_TRUE(test::torch_equal(held.get(), expected.get()));
  EXPECT_EQ(Py_REFCNT(x.get()), before);
}

// Note [Executor run profile]: KILN_LOGS=perf logs each run's host time by
// step label, extern callables by their type.
TEST(PrimExecutor, PerfLogsWhereARunsTimeWent) {
  PyRef probe = probe_module();
  PyRef make = test::item(probe, "make");
  PyRef x = eval("torch.ones(3, 4)");
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  const graph::TensorMeta m = meta_of(x.get());
  const int in = graph->add_input(m);
  const int made = b.extern_call(make.get(), "make", {graph::Arg::of_node(in)}, {}, {m})[0];
  const int neg = b.unary(Prim::Neg, made);
  graph->set_outputs({b.binary(Prim::Add, PrimArg::of_value(neg), PrimArg::of_value(b.unary(Prim::Neg, neg)))});
  PrimExecutor executor(graph);
  ASSERT_EQ(set_log_channels("perf"), "");
  testing::internal::CaptureStderr();
  PyRef result = run(executor, {x});
  const std::string log = testing::internal::GetCapturedStderr();
  set_log_channels("");
  ASSERT_TRUE(result);
  EXPECT_THAT(log, testing::HasSubstr("prim executor run: 4 steps, "));
  EXPECT_THAT(log, testing::HasSubstr("; neg "));
  EXPECT_THAT(log, testing::HasSubstr(" us x2"));
  EXPECT_THAT(log, testing::HasSubstr("; add "));
  EXPECT_THAT(log, testing::HasSubstr("; make "));  // the probe's make, a Python function, by its graph name
  testing::internal::CaptureStderr();
  ASSERT_TRUE(run(executor, {x}));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // perf off: no line
}

// Note [Native views]: views, matmuls and F.linear externs of plain tensors
// run through ATen from C++ and record autograd as the Python calls do; a
// tensor subclass still gets its __torch_function__.
TEST(PrimExecutor, ViewsAndMatmulsOfPlainTensorsMatchTheirPythonCalls) {
  PyRef ns = test::exec_module(
      "import torch\n"
      "calls = []\n"
      "class Traced(torch.Tensor):\n"
      "    @classmethod\n"
      "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
      "        calls.append(getattr(func, '__name__', str(func)))\n"
      "        return super().__torch_function__(func, types, args, kwargs or {})\n"
      "x = torch.randn(4, 6, requires_grad=True)\n"
      "w = torch.nn.Parameter(torch.randn(6, 6))\n"
      "bias = torch.nn.Parameter(torch.randn(6))\n"
      "linear = torch.nn.functional.linear\n"
      "def expected(x, w, bias):\n"
      "    s = x[:, 1:5:2].permute(1, 0).unsqueeze(0).expand(3, 2, 4)\n"
      "    return s.reshape(6, 4), x.as_strided((2, 2), (1, 6), 1), x @ w, linear(x, w, bias)\n"
      "def same(got, want):\n"
      "    return all(g.shape == e.shape and g.stride() == e.stride() and torch.equal(g, e) and\n"
      "               type(g.grad_fn).__name__ == type(e.grad_fn).__name__ for g, e in zip(got, want))\n");
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  PyRef x = test::item(ns, "x"), w = test::item(ns, "w"), bias = test::item(ns, "bias");
  const int xi = graph->add_input(meta_of(x.get()));
  const int wi = graph->add_input(meta_of(w.get()));
  const int bi = graph->add_input(meta_of(bias.get()));
  const int s = b.expand(b.unsqueeze(b.permute(b.slice(xi, 1, 1, 5, 2), {1, 0}), 0), {3, 2, 4});
  const int lin = b.extern_call(test::item(ns, "linear").get(), "linear",
                                {graph::Arg::of_node(xi), graph::Arg::of_node(wi), graph::Arg::of_node(bi)}, {},
                                {meta_of(x.get())})[0];
  graph->set_outputs({b.reshape(s, {6, 4}), b.as_strided(xi, {2, 2}, {1, 6}, 1), b.matmul(xi, wi), lin});
  PrimExecutor executor(graph);
  PyRef result = run(executor, {x, w, bias});
  ASSERT_TRUE(result);
  PyRef want = PyRef::steal(
      PyObject_CallFunctionObjArgs(test::item(ns, "expected").get(), x.get(), w.get(), bias.get(), nullptr));
  ASSERT_TRUE(want);
  PyRef same = PyRef::steal(PyObject_CallFunctionObjArgs(test::item(ns, "same").get(), result.get(), want.get(), nullptr));
  EXPECT_EQ(same.get(), Py_True);
  // A subclass operand takes the Python calls, which honour its __torch_function__.
  PyRef xs = PyRef::steal(PyObject_CallMethod(x.get(), "as_subclass", "O", test::item(ns, "Traced").get()));
  ASSERT_TRUE(xs);
  PyRef again = run(executor, {xs, w, bias});
  ASSERT_TRUE(again);
  PyRef calls = test::item(ns, "calls");
  EXPECT_GE(PyList_GET_SIZE(calls.get()), 7) << test::repr_of(calls.get());
  EXPECT_THAT(test::repr_of(calls.get()), testing::HasSubstr("'linear'"));
}

TEST(PrimExecutor, NumbersWrittenIntoSlicesMatchPythonsSetitem) {
  // Note [Native views]: operator.setitem(x, slices, number) externs run as
  // ATen slices and fill_ for plain tensors, with the values and autograd
  // record of Python's setitem; other keys (an int index) take the call.
  PyRef ns = test::exec_module(
      "import operator, torch\n"
      "x = torch.randn(4, 6, requires_grad=True)\n"
      "keys = [(slice(1, 3), slice(None, None, 2)), slice(-2, None), (slice(None), slice(4, None)), 2]\n"
      "values = [5, True, 1.5, -1.0]\n"
      "def expected(x):\n"
      "    y = x * 2\n"
      "    for key, value in zip(keys, values):\n"
      "        y[key] = value\n"
      "    return y\n"
      "def same(got, want):\n"
      "    return torch.equal(got, want) and type(got.grad_fn).__name__ == type(want.grad_fn).__name__ and "
      "torch.equal(torch.autograd.grad(got.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])\n");
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  PyRef x = test::item(ns, "x");
  const graph::TensorMeta m = meta_of(x.get());
  const int xi = graph->add_input(m);
  const int y = b.binary(Prim::Mul, PrimArg::of_value(xi), PrimArg::of_scalar(prims::Scalar::of_int(2)));
  PyRef setitem = PyRef::steal(PyObject_GetAttrString(PyImport_ImportModule("operator"), "setitem"));
  PyRef keys = test::item(ns, "keys"), values = test::item(ns, "values");
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.get()); ++i) {
    PyObject* key = PyList_GET_ITEM(keys.get(), i);
    graph::Arg key_arg;
    if (PyTuple_Check(key)) {  // as the tracer passes a tuple key: a Tuple of constants
      key_arg.kind = graph::Arg::Kind::Tuple;
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(key); ++k) key_arg.items.push_back(graph::Arg::of_constant(PyTuple_GET_ITEM(key, k)));
    } else {
      key_arg = graph::Arg::of_constant(key);
    }
    b.extern_call(setitem.get(), "operator.setitem",
                  {graph::Arg::of_node(y), key_arg, graph::Arg::of_constant(PyList_GET_ITEM(values.get(), i))}, {}, {});
  }
  graph->set_outputs({y});
  PrimExecutor executor(graph);
  PyRef result = run(executor, {x});
  ASSERT_TRUE(result) << test::take_error();
  PyObject* got = PyTuple_Check(result.get()) ? PyTuple_GET_ITEM(result.get(), 0) : result.get();
  PyRef want = PyRef::steal(PyObject_CallFunctionObjArgs(test::item(ns, "expected").get(), x.get(), nullptr));
  ASSERT_TRUE(want);
  PyRef same = PyRef::steal(PyObject_CallFunctionObjArgs(test::item(ns, "same").get(), got, want.get(), nullptr));
  EXPECT_EQ(same.get(), Py_True) << test::take_error();
}

TEST(PrimExecutor, ProductsWithPaddedDimsEqualTorchsAndAreFreshContiguousTensors) {
  // Note [Padded GEMM dims]: the path large 16-bit CUDA products take, run
  // here on CPU float64 tensors (the padding is layout, not math) for each
  // operand layout, so each of M, K and N is padded somewhere.
  PyRef ns = test::exec_module(
      "import torch\n"
      "torch.manual_seed(0)\n"
      "def operand(rows, cols, column_major):\n"
      "    return torch.randn(cols, rows, dtype=torch.float64).t() if column_major else "
      "torch.randn(rows, cols, dtype=torch.float64)\n"
      "cases = [(operand(9, 13, ca), operand(13, 11, cb)) for ca in (False, True) for cb in (False, True)]\n"
      "cases.append((operand(9, 16, True), operand(16, 8, False)))  # only M padded\n"
      "def same(a, b, got):\n"
      "    want = a @ b\n"
      "    return (got.shape == want.shape and got.is_contiguous() and not got._is_view() and "
      "torch.allclose(got, want))\n");
  PyRef case_list = test::item(ns, "cases");
  PyObject* cases = case_list.get();
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cases); ++i) {
    PyObject* a = PyTuple_GET_ITEM(PyList_GET_ITEM(cases, i), 0);
    PyObject* b = PyTuple_GET_ITEM(PyList_GET_ITEM(cases, i), 1);
    PyRef got = PyRef::steal(aten_matmul_with_padded_dims(a, b, 8));
    ASSERT_TRUE(got) << test::take_error();
    PyRef same = PyRef::steal(PyObject_CallFunctionObjArgs(test::item(ns, "same").get(), a, b, got.get(), nullptr));
    EXPECT_EQ(same.get(), Py_True) << "case " << i << ": " << test::take_error();
  }
}

TEST(PrimExecutor, AnOpRaisingReturnsNullAndLeaksNothing) {
  PyRef probe = probe_module();
  PyRef x = eval("torch.ones(3)");
  const Py_ssize_t before = Py_REFCNT(x.get());
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  const graph::TensorMeta m = meta_of(x.get());
  const int in = graph->add_input(m);
  const int made = b.extern_call(test::item(probe, "make").get(), "make", {graph::Arg::of_node(in)}, {}, {m})[0];
  const int failed = b.extern_call(test::item(probe, "fail").get(), "fail", {graph::Arg::of_node(in)}, {}, {m})[0];
  graph->set_outputs({b.binary(Prim::Add, PrimArg::of_value(made), PrimArg::of_value(failed))});
  PrimExecutor executor(graph);
  PyObject* raw = x.get();
  EXPECT_EQ(executor.run(&raw), nullptr);
  EXPECT_THAT(test::take_error(), ::testing::HasSubstr("boom"));
  PyRef alive = PyRef::steal(PyObject_CallNoArgs(test::item(probe, "alive").get()));
  EXPECT_EQ(test::repr_of(alive.get()), "[False]");
  EXPECT_EQ(Py_REFCNT(x.get()), before);
}

TEST(PrimExecutor, OutputTemplateAndInputsPassedThrough) {
  PyRef x = eval("torch.ones(2)");
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  const int in = graph->add_input(meta_of(x.get()));
  const int y = b.binary(Prim::Mul, PrimArg::of_value(in), PrimArg::of_scalar(Scalar::of_int(3)));
  graph->set_outputs({in, y});
  graph::Arg output;
  output.kind = graph::Arg::Kind::Tuple;
  output.items = {graph::Arg::of_node(y), graph::Arg::of_constant(eval("'tag'").get()), graph::Arg::of_node(in)};
  PrimExecutor executor(graph, output);
  PyRef result = run(executor, {x});
  ASSERT_TRUE(result);
  EXPECT_EQ(PyTuple_GET_ITEM(result.get(), 2), x.get());  // the input itself, as eager returns it
  EXPECT_EQ(test::repr_of(PyTuple_GET_ITEM(result.get(), 1)), "'tag'");
}

TEST(PrimExecutor, UnsupportedNodesFailAtConstructionNamingTheNode) {
  auto graph = std::make_shared<PrimGraph>();
  PrimBuilder b(*graph);
  graph::TensorMeta m;
  m.sizes = {2, 3, 4};
  m.strides = graph::contiguous_strides(m.sizes);
  const int x = graph->add_input(m);
  graph->set_outputs({b.reduce(Prim::Prod, x, {0, 2}, false)});
  try {
    PrimExecutor executor(graph);
    ADD_FAILURE() << "expected PrimExecutorError";
  } catch (const PrimExecutorError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("node 0 (prod): prod over several"));
  }
}

}  // namespace
}  // namespace kiln::runtime
