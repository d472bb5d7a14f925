// Tests of prims/decompose.h: every decomposition compared numerically with
// torch's own op. Each case is one torch call written in Python; it becomes a
// one-call traced graph (inputs: the zoo tensors it names), is decomposed
// (it must not stay an extern), run by the prim executor and compared with
// torch's result: dtype and sizes exactly, values with a dtype's tolerance.
#include <Python.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/graph.h"
#include "prims/decompose.h"
#include "runtime/aten_bridge.h"
#include "runtime/prim_executor.h"
#include "prims/torch_ops.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::prims {
namespace {

using graph::Arg;
using test::PyRef;

const char* kSetup = R"PY(
import ast, operator, builtins, torch
import torch.nn.functional as F
Tensor = torch.Tensor
torch.manual_seed(0)
a = torch.randn(3, 4); b = torch.randn(4); at = torch.randn(4, 3).t(); c = torch.randn(3, 1)
a64 = torch.randn(3, 4, dtype=torch.float64); h = torch.randn(3, 4).half()
i = torch.randint(-5, 6, (3, 4)); i32 = torch.randint(1, 6, (3, 4), dtype=torch.int32)
m = torch.rand(3, 4) > 0.5; v = torch.randn(4); v3 = torch.randn(3)
x = torch.randn(2, 3, 4, 5); xs = torch.randn(2, 3, 4, 10)[..., ::2]
w = torch.randn(5, 4); bias = torch.randn(5); mat = torch.randn(4, 6); bat = torch.randn(2, 4, 6)
a3 = torch.randn(2, 3, 4); idx = torch.tensor([[0, 2], [1, 0]]); tgt = torch.tensor([1, 0, 3])
emb = torch.randn(10, 4); cls = torch.tensor([2, 1, 1]); cw = torch.rand(4)
rm = torch.randn(3); rv = torch.rand(3) + 0.5; g = torch.randn(3); beta = torch.randn(3)
q = torch.randn(2, 2, 5, 4); k = torch.randn(2, 2, 6, 4); val = torch.randn(2, 2, 6, 3)
am = torch.rand(5, 6) > 0.3
ridx = torch.tensor([[3, -1], [0, 9]]); ri = torch.tensor(-2)
def split_call(src):
    call = ast.parse(src, mode='eval').body
    ev = lambda node: eval(compile(ast.Expression(node), '<case>', 'eval'), globals())
    def conv(node):
        if isinstance(node, ast.Name) and isinstance(globals().get(node.id), torch.Tensor):
            return ('input', node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            kind = 'tuple' if isinstance(node, ast.Tuple) else 'list'
            items = [conv(e) for e in node.elts]
            if all(it[0] == 'const' for it in items):
                return ('const', ev(node))
            return (kind, items)
        value = ev(node)
        if isinstance(value, torch.Tensor):  # an expression: one more input
            name = '_e%d' % len(made)
            made.append(name)
            globals()[name] = value
            return ('input', name)
        return ('const', value)
    made = []
    return ev(call.func), [conv(x) for x in call.args], [(kw.arg, conv(kw.value)) for kw in call.keywords]
)PY";

PyObject* setup_namespace() {
  static PyRef ns = test::exec_module(kSetup, "<decompositions>", "kiln_decomposition_cases");
  return ns.get();
}

struct Builder {
  graph::Graph graph;
  std::vector<std::string> input_names;
  std::vector<PyRef> inputs;

  // Turns the ('input'|'const'|'tuple'|'list', ...) description into an Arg.
  Arg convert(PyObject* desc) {
    const std::string kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(desc, 0));
    PyObject* payload = PyTuple_GET_ITEM(desc, 1);
    if (kind == "const") return Arg::of_constant(payload);
    if (kind == "input") {
      const std::string name = PyUnicode_AsUTF8(payload);
      for (size_t k = 0; k < input_names.size(); ++k) {
        if (input_names[k] == name) return Arg::of_node(graph.inputs()[k]);
      }
      PyRef tensor = PyRef::borrow(PyDict_GetItemString(setup_namespace(), name.c_str()));
      graph::TensorMeta meta;
      runtime::read_tensor_meta(tensor.get(), &meta);
      const int id = graph.add_input(static_cast<int>(input_names.size()), name, meta);
      input_names.push_back(name);
      inputs.push_back(tensor);
      return Arg::of_node(id);
    }
    Arg arg;
    arg.kind = kind == "tuple" ? Arg::Kind::Tuple : Arg::Kind::List;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(payload); ++k) arg.items.push_back(convert(PyList_GET_ITEM(payload, k)));
    return arg;
  }
};

// Python source comparing a (the prim executor's result) with e (torch's).
const char* kCompare =
    "tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float64: 1e-10}.get(e.dtype, 2e-5)\n"
    "ok = a.dtype == e.dtype and a.shape == e.shape and (torch.allclose(a, e, rtol=tol, atol=tol, equal_nan=True)"
    " if a.is_floating_point() else torch.equal(a, e))\n";

// `graph_text`, when given, receives the decomposed prim graph's text.
void check_case(const std::string& source, bool clone_inputs = false, std::string* graph_text = nullptr) {
  SCOPED_TRACE(source);
  PyObject* ns = setup_namespace();
  PyRef split_call = PyRef::borrow(PyDict_GetItemString(ns, "split_call"));
  PyRef src = test::py_str(source.c_str());
  PyRef parts = PyRef::steal(PyObject_CallOneArg(split_call.get(), src.get()));
  ASSERT_TRUE(parts) << test::take_error();
  PyObject* fn = PyTuple_GET_ITEM(parts.get(), 0);
  PyObject* args = PyTuple_GET_ITEM(parts.get(), 1);
  PyObject* kwargs = PyTuple_GET_ITEM(parts.get(), 2);

  Builder builder;
  std::vector<Arg> call_args;
  for (Py_ssize_t k = 0; k < PyList_GET_SIZE(args); ++k) call_args.push_back(builder.convert(PyList_GET_ITEM(args, k)));
  std::vector<std::pair<std::string, Arg>> call_kwargs;
  for (Py_ssize_t k = 0; k < PyList_GET_SIZE(kwargs); ++k) {
    PyObject* item = PyList_GET_ITEM(kwargs, k);
    call_kwargs.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(item, 0)), builder.convert(PyTuple_GET_ITEM(item, 1)));
  }
  const prims::OpSpelling* spelling = prims::find_torch_op(fn);
  ASSERT_NE(spelling, nullptr) << "not in the decomposition table";

  // Torch's result, on clones when the op mutates its inputs.
  PyRef eager_inputs_ns = PyRef::steal(PyDict_Copy(ns));
  if (clone_inputs) {
    for (size_t k = 0; k < builder.inputs.size(); ++k) {
      PyRef copy = PyRef::steal(PyObject_CallMethod(builder.inputs[k].get(), "clone", nullptr));
      PyDict_SetItemString(eager_inputs_ns.get(), builder.input_names[k].c_str(), copy.get());
    }
  }
  test::eval("torch.manual_seed(5)");
  PyRef expected = PyRef::steal(PyRun_String(source.c_str(), Py_eval_input, eager_inputs_ns.get(), eager_inputs_ns.get()));
  ASSERT_TRUE(expected) << test::take_error();

  const int node = builder.graph.add_call(spelling->text, fn, std::move(call_args), std::move(call_kwargs));
  graph::Node& call = builder.graph.node(node);
  std::vector<PyObject*> results;
  if (PyTuple_Check(expected.get())) {
    call.returns_tuple = true;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(expected.get()); ++k) results.push_back(PyTuple_GET_ITEM(expected.get(), k));
  } else {
    results.push_back(expected.get());
  }
  for (PyObject* r : results) {
    graph::TensorMeta meta;
    runtime::read_tensor_meta(r, &meta);
    call.metas.push_back(meta);
  }
  builder.graph.set_output(Arg::of_node(node));

  std::string why;
  std::optional<Decomposition> d = decompose_graph(builder.graph, false, &why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->decomposed_calls, 1) << "stayed an extern\n" << format_prim_graph(*d->graph);
  if (graph_text) *graph_text = format_prim_graph(*d->graph);
  runtime::PrimExecutor executor(d->graph, std::move(d->output));
  std::vector<PyObject*> raw;
  for (const PyRef& in : builder.inputs) raw.push_back(in.get());
  test::eval("torch.manual_seed(5)");
  PyRef actual = PyRef::steal(executor.run(raw.data()));
  ASSERT_TRUE(actual) << test::take_error() << "\n" << format_prim_graph(executor.graph());
  std::vector<PyObject*> got;
  if (call.returns_tuple) {
    ASSERT_TRUE(PyTuple_Check(actual.get()));
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(actual.get()); ++k) got.push_back(PyTuple_GET_ITEM(actual.get(), k));
  } else {
    got.push_back(actual.get());
  }
  ASSERT_EQ(got.size(), results.size());
  for (size_t k = 0; k < got.size(); ++k) {
    PyRef cmp = PyRef::steal(PyDict_New());
    PyDict_SetItemString(cmp.get(), "__builtins__", PyEval_GetBuiltins());
    PyDict_SetItemString(cmp.get(), "torch", PyDict_GetItemString(ns, "torch"));
    PyDict_SetItemString(cmp.get(), "a", got[k]);
    PyDict_SetItemString(cmp.get(), "e", results[k]);
    PyRef ran = PyRef::steal(PyRun_String(kCompare, Py_file_input, cmp.get(), cmp.get()));
    ASSERT_TRUE(ran) << test::take_error();
    EXPECT_EQ(PyDict_GetItemString(cmp.get(), "ok"), Py_True)
        << "result " << k << ": " << test::repr_of(got[k]) << "\ntorch: " << test::repr_of(results[k])
        << "\n" << format_prim_graph(executor.graph());
  }
}

void check_all(const std::vector<std::string>& cases) {
  for (const std::string& source : cases) check_case(source);
}

TEST(Decompositions, ElementwiseArithmeticAndComparisons) {
  check_all({
      "torch.add(a, b)", "torch.add(a, c, alpha=2)", "operator.add(i, 2.5)", "Tensor.__radd__(a, 3)",
      "torch.sub(a64, a)", "operator.sub(2, i32)", "Tensor.__rsub__(a, 1)", "torch.rsub(a, at, alpha=3)",
      "operator.mul(h, a)", "torch.mul(at, b)", "torch.div(a, c)", "operator.truediv(2, a)",
      "torch.div(i, 3, rounding_mode='floor')", "torch.div(i, -3, rounding_mode='trunc')",
      "operator.floordiv(i, i32)", "operator.mod(a, 0.7)", "torch.fmod(i, 4)", "operator.pow(a, 2)",
      "torch.pow(2, a)", "torch.pow(at, b)", "torch.maximum(a, at)", "torch.minimum(a, c)", "torch.atan2(a, b)",
      "operator.lt(a, 0)", "operator.ge(2, i)", "torch.eq(i, i32)", "operator.ne(a, at)", "torch.gt(a64, b)",
      "torch.logical_and(m, a)", "torch.logical_or(m, i)", "operator.and_(m, m)", "operator.xor(i, 3)",
      "torch.where(m, a, 0.0)", "torch.where(m, 1, i)", "Tensor.where(a, m, at)", "torch.clamp(a, -0.5, 0.5)",
      "torch.clamp(i, min=0)", "Tensor.clip(a64, max=0.1)", "Tensor.masked_fill(a, m, -1.5)",
  });
}

TEST(Decompositions, UnaryMathAndActivations) {
  check_all({
      "torch.neg(a)", "operator.neg(i)", "torch.abs(at)", "torch.exp(a64)", "torch.exp2(a)", "torch.log(cw)",
      "torch.log2(cw)", "torch.log1p(cw)", "torch.expm1(a)", "torch.sqrt(cw)", "torch.rsqrt(cw)",
      "torch.sin(a64)", "torch.cos(a)", "torch.tan(a)", "torch.tanh(xs)", "torch.sigmoid(i)", "torch.erf(a)",
      "torch.floor(a)", "torch.ceil(a)", "torch.round(a)", "torch.trunc(a)", "torch.sign(i)",
      "torch.reciprocal(a)", "torch.logical_not(m)", "operator.invert(m)", "torch.isnan(a)", "torch.isinf(a)",
      "torch.relu(a)", "F.relu(xs)", "F.silu(a64)", "F.gelu(a)", "F.gelu(a64, approximate='tanh')",
      "F.gelu(xs, approximate='tanh')", "F.sigmoid(a)", "F.softplus(a)", "F.softplus(a64 * 30, beta=2, threshold=5)",
      "F.softplus(xs, 0.5)", "torch.square(a)", "Tensor.square(i)",
  });
}

TEST(Decompositions, Reductions) {
  check_all({
      "torch.sum(a)", "Tensor.sum(at, 0)", "torch.sum(x, (1, 3), keepdim=True)", "torch.sum(i)",
      "torch.sum(a, 1, dtype=torch.float64)", "torch.mean(a64)", "Tensor.mean(xs, -1, True)",
      "torch.mean(i, 0, dtype=torch.float32)", "torch.amax(a)", "Tensor.amin(x, (0, 2))",
      "torch.max(a)", "torch.max(at, 1)", "Tensor.min(x, 2, True)", "torch.max(a, at)",
      "torch.var(a)", "Tensor.var(x, (0, 2), unbiased=False)", "torch.std(at, 1, keepdim=True)",
      "torch.var_mean(a64, 0)", "Tensor.std(a, 1, correction=0)",
  });
}

TEST(Decompositions, ViewsShapesAndIndexing) {
  check_all({
      "Tensor.view(a, 2, 6)", "Tensor.view(a, (-1,))", "Tensor.reshape(at, 12)", "torch.reshape(xs, (6, -1))",
      "Tensor.permute(x, 3, 0, 2, 1)", "torch.permute(a, (1, 0))", "torch.transpose(x, 1, -1)", "Tensor.t(a)",
      "torch.t(b)", "builtins.getattr(a, 'T')", "builtins.getattr(x, 'mT')", "torch.flatten(x, 1)",
      "Tensor.flatten(xs)", "torch.unflatten(a, 1, (2, 2))", "Tensor.unflatten(x, -1, (5, 1))",
      "torch.unflatten(a3, 2, (-1, 2))", "torch.unsqueeze(a, -1)", "Tensor.squeeze(c)", "torch.squeeze(c, 1)",
      "Tensor.expand(c, 3, 5)", "Tensor.expand(b, 2, 3, -1)", "Tensor.expand_as(c, a)",
      "Tensor.contiguous(at)", "Tensor.contiguous(a)", "torch.clone(xs)",
      "operator.getitem(a, 1)", "operator.getitem(a, (slice(None), slice(1, 3)))",
      "operator.getitem(x, (Ellipsis, 0))", "operator.getitem(x, (None, 1, slice(None, None, 2)))",
      "operator.getitem(at, (-1, None))", "torch.cat([a, at], 1)", "torch.cat((a, a64))",
      "torch.stack([a, at, a])", "torch.stack((b, b), -1)", "torch.split(x, 2, 3)",
      "Tensor.split(a, [1, 3], 1)", "torch.chunk(x, 2, 2)", "torch.unbind(a, 1)",
      "Tensor.to(a, torch.float64)", "Tensor.to(i, dtype=torch.float16)", "Tensor.float(i)",
      "Tensor.long(a)", "Tensor.bool(i)", "Tensor.half(a)", "Tensor.type_as(i, a)",
      "Tensor.permute(x, dims=(3, 0, 2, 1))", "Tensor.view(a, size=(2, 6))", "Tensor.flip(x, 0, 2)",
      "torch.flip(a, (1,))", "Tensor.flip(a3, -1)", "torch.swapaxes(x, 1, 3)", "Tensor.swapdims(a3, 0, -1)",
      "Tensor.repeat(a, 2, 3)", "Tensor.repeat(b, 2, 1, 3)", "Tensor.repeat(a3, (1, 2, 1))",
      "torch.repeat_interleave(a, 2, dim=1)", "Tensor.repeat_interleave(a3, 3, -2)", "torch.repeat_interleave(at, 2)",
  });
}

TEST(Decompositions, FactoriesAndRandomDraws) {
  check_all({
      "torch.zeros(2, 3)", "torch.ones((4,), dtype=torch.int32)", "torch.full((2, 2), 1.5)",
      "torch.full((3,), 7)", "torch.zeros_like(a)", "torch.ones_like(i)", "torch.full_like(a64, 2)",
      "torch.arange(5)", "torch.arange(2, 11, 3)", "torch.arange(4, dtype=torch.float32)",
      "torch.rand(3, 4)", "torch.randn(2, 5, dtype=torch.float64)", "Tensor.new_ones(a, size=(2, 3))",
      "torch.zeros(size=(2, 3))", "torch.arange(start=2, end=9)", "torch.arange(1, end=8, step=3)",
      "torch.arange(end=4)", "torch.arange(2, 7, step=2)",
  });
}

TEST(Decompositions, MatrixProducts) {
  check_all({
      "torch.matmul(a, mat)", "operator.matmul(b, mat)", "torch.matmul(a, b)", "torch.matmul(b, b)",
      "torch.matmul(bat.transpose(1, 2), mat)", "Tensor.matmul(a3, mat)", "torch.matmul(b, bat)",
      "torch.mm(at, mat)", "torch.bmm(bat.transpose(1, 2), bat)", "torch.addmm(bias, w, mat[:, :5])",
      "torch.addmm(bias, w, mat[:, :5], beta=0.5, alpha=2)", "F.linear(a, w, bias)", "F.linear(a3, w)",
      "F.linear(b, w, bias)", "F.linear(a64, w.double())", "F.linear(x.permute(0, 2, 3, 1), mat[:3, :5].t())",
      "torch.matmul(x.permute(0, 2, 3, 1), mat[:3])", "torch.einsum('ij,jk->ik', a, mat)",
      "torch.einsum('bij,bjk->bki', a3, bat)", "torch.einsum('ij->j', at)", "torch.einsum('...j,j', a3, b)",
      "torch.outer(b, rm)", "Tensor.outer(rm, b)",
  });
}

TEST(Decompositions, LinearOverRowsAddsItsBiasToTheMatrixProduct) {
  // Note [Bias epilogues]: the add must read the 2-d product itself.
  std::string text;
  check_case("F.linear(a3, w, bias)", false, &text);
  EXPECT_THAT(text, testing::HasSubstr("%5 = matmul(%4, %3) : f32[6, 5]\n%6 = add(%5, %2) : f32[6, 5]\n"
                                       "%7 = reshape(%6, sizes=[2, 3, 5])"));
}

TEST(Decompositions, NnOps) {
  check_all({
      "torch.softmax(a, -1)", "Tensor.softmax(x, 1)", "F.softmax(a64, dim=0)",
      "F.softmax(a, dim=1, dtype=torch.float64)", "F.log_softmax(a3, dim=-1)", "Tensor.log_softmax(a64, 0)",
      "F.layer_norm(a, (4,))", "F.layer_norm(x, (4, 5), torch.ones(4, 5) * 2, torch.zeros(4, 5) + 1)",
      "F.layer_norm(a64, (4,), eps=1e-3)", "F.layer_norm(x.permute(0, 2, 3, 1), (3,), g, beta)",
      "F.batch_norm(x, rm, rv, g, beta)", "F.batch_norm(a, torch.zeros(4), torch.ones(4) * 2)",
      "F.dropout(a, 0.3, False)", "F.dropout(a, 0.0)", "F.embedding(idx, emb)", "F.embedding(cls, emb)",
      "F.avg_pool2d(x, 2)", "F.avg_pool2d(x, (2, 1), divisor_override=3)",
      "F.avg_pool2d(x.to(memory_format=torch.channels_last), 2)", "F.avg_pool2d(xs, 3)",
  });
  // Training mode: normalizes by batch statistics and updates the running ones.
  check_case("F.batch_norm(x, rm.clone(), rv.clone(), g, beta, training=True, momentum=0.2)", true);
  check_case("F.batch_norm(a3, None, None, training=True)");
}

TEST(Decompositions, Losses) {
  check_all({
      "F.mse_loss(a, at)", "F.mse_loss(a64, a64 * 2, reduction='sum')", "F.mse_loss(a, at, reduction='none')",
      "F.cross_entropy(a, tgt)", "F.cross_entropy(a, tgt, weight=cw)", "F.cross_entropy(a, tgt, reduction='none')",
      "F.cross_entropy(a, tgt, ignore_index=0)", "F.cross_entropy(a, tgt, ignore_index=0, reduction='sum')",
      "F.cross_entropy(b, tgt[0])", "F.cross_entropy(x[:, :, 0], torch.tensor([[0, 2, 1, 1, 0], [2, 2, 0, 1, 1]]))",
      "F.nll_loss(F.log_softmax(a, 1), tgt)", "F.nll_loss(a64, tgt, weight=cw.double(), reduction='sum')",
  });
}

TEST(Decompositions, ScaledDotProductAttention) {
  check_all({
      "F.scaled_dot_product_attention(q, k, val)", "F.scaled_dot_product_attention(q, q, q, is_causal=True)",
      "F.scaled_dot_product_attention(q, k, val, attn_mask=am)",
      "F.scaled_dot_product_attention(q, k, val, attn_mask=am.float())",
  });
}

TEST(Decompositions, PadRollAndIndexingByATensor) {
  check_all({
      "F.pad(a, (1, 2))", "F.pad(a, (0, 0, -1, 2), value=2.5)", "F.pad(x, (0, 0, 0, 0, 0, 0))",
      "F.pad(i, (2, -1, 1, 0), value=7)", "torch.roll(a, 2, 1)", "torch.roll(x, (1, -3), (0, -1))",
      "torch.roll(a, 5)", "Tensor.roll(a, -1, 0)", "torch.roll(a, 4, 1)",
      "operator.getitem(emb, ridx)", "operator.getitem(a, ri)", "Tensor.__getitem__(emb, cls)",
  });
}

TEST(Decompositions, UnhandledFormsStayExterns) {
  // inplace=True, an unknown rounding mode and advanced indexing are not
  // decomposed; the graph still runs, calling torch.
  for (const char* source : {"F.relu(a.clone(), inplace=True)", "operator.getitem(a, m)",
                             "F.embedding(idx, emb.clone(), max_norm=1.0)"}) {
    SCOPED_TRACE(source);
    PyObject* ns = setup_namespace();
    PyRef parts = PyRef::steal(PyObject_CallOneArg(PyDict_GetItemString(ns, "split_call"), test::py_str(source).get()));
    ASSERT_TRUE(parts) << test::take_error();
    Builder builder;
    std::vector<Arg> args;
    PyObject* list = PyTuple_GET_ITEM(parts.get(), 1);
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); ++k) args.push_back(builder.convert(PyList_GET_ITEM(list, k)));
    std::vector<std::pair<std::string, Arg>> kwargs;
    PyObject* kws = PyTuple_GET_ITEM(parts.get(), 2);
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(kws); ++k) {
      PyObject* item = PyList_GET_ITEM(kws, k);
      kwargs.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(item, 0)), builder.convert(PyTuple_GET_ITEM(item, 1)));
    }
    PyRef expected = PyRef::steal(PyRun_String(source, Py_eval_input, ns, ns));
    ASSERT_TRUE(expected) << test::take_error();
    const int node = builder.graph.add_call("call", PyTuple_GET_ITEM(parts.get(), 0), std::move(args), std::move(kwargs));
    graph::TensorMeta meta;
    runtime::read_tensor_meta(expected.get(), &meta);
    builder.graph.node(node).metas.push_back(meta);
    builder.graph.set_output(Arg::of_node(node));
    std::string why;
    std::optional<Decomposition> d = decompose_graph(builder.graph, false, &why);
    ASSERT_TRUE(d) << why;
    EXPECT_EQ(d->extern_calls, 1);
    EXPECT_THAT(format_prim_graph(*d->graph), ::testing::HasSubstr("extern call("));
  }
}

}  // namespace
}  // namespace kiln::prims
