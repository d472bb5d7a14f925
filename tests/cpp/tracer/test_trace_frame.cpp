// Tests of tracer/tracer.h driven directly: Python functions compiled here,
// a FrameView whose fast locals hold the arguments in parameter order, and
// the graph, guards or break reason that trace_frame() produces.
#include <Python.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/graph_printer.h"
#include "runtime/eager_executor.h"
#include "tests/cpp/runtime/python_test_util.h"
#include "cpython/bytecode_decoder.h"
#include "tracer/tracer.h"

namespace kiln::tracer {
namespace {

using test::eval;
using test::PyRef;
using ::testing::HasSubstr;

constexpr const char* kFile = "kiln_trace_test.py";

// Line numbers below are found by searching for the statement's text, so
// edits to this source do not silently shift expectations.
constexpr const char* kSource = R"(import torch

def add_relu(x, y):
    return torch.relu(x) + y

def scale(x, n):
    return x * n

def prints(x):
    y = x + 1
    print(y)
    return y

def branches(x):
    if x.sum() > 0:
        return x
    return -x

def make_inner():
    k = 3
    def inner(x):
        return x * k
    return inner

inner = make_inner()

def structured(x, pair, opts):
    a, b = pair
    return {'sum': x + a * opts['w'], 'both': (a, b)}

class Helper:
    def twice(self, x):
        return x * 2

bound = Helper().twice

def uses_bound(x):
    return bound(x)

def variadic(x, *rest, scale=2, **extra):
    return x * scale + rest[0] + extra['bias']

def captures(x):
    def inner():
        return x + 1
    return inner()
)";

int line_of(const std::string& statement) {
  const std::string source = kSource;
  const size_t at = source.find(statement);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no `" << statement << "` in the source";
    return -1;
  }
  int line = 1;
  for (size_t i = 0; i < at; ++i) line += source[i] == '\n';
  return line;
}

PyRef module() {
  static PyObject* globals = test::exec_module(kSource, kFile, "kiln_trace_test").release();
  return PyRef::borrow(globals);
}

// A frame about to run module()[name] with `args` bound to its parameters.
struct Call {
  Call(const char* name, std::vector<PyRef> arguments) : args(std::move(arguments)) {
    func = test::item(module(), name);
    code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(func.get()));
    // Parameters in localsplus order: positional, keyword-only, *args, **kwargs.
    const int nargs = code->co_argcount + code->co_kwonlyargcount +
                      ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                      ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
    EXPECT_EQ(nargs, static_cast<int>(args.size()));
    locals.assign(code->co_nlocalsplus, nullptr);
    for (size_t i = 0; i < args.size(); ++i) locals[i] = args[i].get();
    frame.localsplus = locals.data();
    frame.globals = PyFunction_GET_GLOBALS(func.get());
    frame.builtins = PyEval_GetBuiltins();
    frame.closure = PyFunction_GET_CLOSURE(func.get());
  }
  // `frame` points into `locals`: a Call stays where it was made.
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  TraceResult trace() const {
    TraceResult result = trace_frame(code, func.get(), frame);
    EXPECT_FALSE(PyErr_Occurred()) << "trace_frame left " << test::take_error();
    return result;
  }

  // What the real function returns for these arguments.
  PyRef call_directly() const {
    PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
    for (size_t i = 0; i < args.size(); ++i) {
      PyTuple_SET_ITEM(tuple.get(), i, PyRef(args[i]).release());
    }
    PyRef out = PyRef::steal(PyObject_Call(func.get(), tuple.get(), nullptr));
    if (!out) ADD_FAILURE() << test::take_error();
    return out;
  }

  PyRef func;
  PyCodeObject* code = nullptr;
  std::vector<PyRef> args;
  std::vector<PyObject*> locals;
  guards::FrameView frame;
};

// Checks the guards on `frame` and, when they hold, replays the graph on the
// fetched inputs; returns the graph's output (null when the guards fail).
PyRef check_and_run(const TraceResult& result, const guards::FrameView& frame) {
  guards::SourceValues values;
  if (!result.guards->check(frame, values)) return PyRef();
  std::vector<PyObject*> inputs;
  for (int id : result.graph->inputs()) {
    inputs.push_back(values.get(result.graph->node(id).input_source));
  }
  runtime::EagerExecutor executor(*result.graph);
  PyRef out = PyRef::steal(executor.run(inputs.data()));
  if (!out) ADD_FAILURE() << "graph failed: " << test::take_error();
  return out;
}

TEST(TraceFrame, TracesTorchCallsAndOperators) {
  Call call("add_relu", {eval("torch.randn(2, 3)"), eval("torch.randn(2, 3)")});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  ASSERT_TRUE(result.graph);
  ASSERT_TRUE(result.guards);
  EXPECT_EQ(graph::format_graph(*result.graph),
            "%0 = input L['x'] : f32[2, 3]\n"
            "%1 = input L['y'] : f32[2, 3]\n"
            "%2 = torch.relu(%0) : f32[2, 3]\n"
            "%3 = operator.add(%2, %1) : f32[2, 3]\n"
            "return %3\n");
  const std::string guards = result.guards->format();
  EXPECT_THAT(guards, HasSubstr("TensorMatch L['x'] f32[2, 3]\n"));
  EXPECT_THAT(guards, HasSubstr("TensorMatch L['y'] f32[2, 3]\n"));
  EXPECT_THAT(guards, HasSubstr("IdMatch G['torch'] <module>\n"));
  EXPECT_THAT(guards, HasSubstr("GradMode"));
}

TEST(TraceFrame, GraphReproducesTheFunctionAndGuardsHold) {
  Call call("add_relu", {eval("torch.randn(2, 3)"), eval("torch.randn(2, 3)")});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  EXPECT_EQ(result.guards->check_verbose(call.frame), "");
  PyRef out = check_and_run(result, call.frame);
  ASSERT_TRUE(out);
  EXPECT_TRUE(test::torch_equal(out.get(), call.call_directly().get()));

  // New values of the same shape reuse the graph...
  Call same_shape("add_relu", {eval("torch.randn(2, 3)"), eval("torch.randn(2, 3)")});
  PyRef again = check_and_run(result, same_shape.frame);
  ASSERT_TRUE(again);
  EXPECT_TRUE(test::torch_equal(again.get(), same_shape.call_directly().get()));
  // ...another shape does not.
  Call other_shape("add_relu", {eval("torch.randn(3, 3)"), eval("torch.randn(3, 3)")});
  EXPECT_FALSE(check_and_run(result, other_shape.frame));
  const std::string why = result.guards->check_verbose(other_shape.frame);
  EXPECT_THAT(why, HasSubstr("L['x']"));
  EXPECT_THAT(why, HasSubstr("sizes"));
}

TEST(TraceFrame, PythonArgumentsBecomeConstantGuards) {
  Call call("scale", {eval("torch.ones(2)"), test::py_int(3)});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  EXPECT_THAT(result.guards->format(), HasSubstr("ConstantMatch L['n'] 3\n"));
  EXPECT_THAT(graph::format_graph(*result.graph), HasSubstr("operator.mul(%0, 3)"));
  Call other_n("scale", {eval("torch.ones(2)"), test::py_int(4)});
  EXPECT_EQ(result.guards->check_verbose(other_n.frame), "L['n'] == 4, expected 3");
}

TEST(TraceFrame, ClosureCellsAreSources) {
  Call call("inner", {eval("torch.ones(2)")});
  ASSERT_NE(call.frame.closure, nullptr);
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  EXPECT_THAT(result.guards->format(), HasSubstr("ConstantMatch C['k'] 3\n"));
  PyRef out = check_and_run(result, call.frame);
  ASSERT_TRUE(out);
  EXPECT_TRUE(test::torch_equal(out.get(), eval("torch.full((2,), 3.)").get()));
}

TEST(TraceFrame, ContainersInAndOut) {
  Call call("structured",
            {eval("torch.ones(2)"), eval("(torch.full((2,), 2.), 5)"), eval("{'w': 10}")});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  const std::string guards = result.guards->format();
  EXPECT_THAT(guards, HasSubstr("LengthMatch L['pair'] tuple len=2\n"));
  EXPECT_THAT(guards, HasSubstr("TensorMatch L['pair'][0] f32[2]\n"));
  EXPECT_THAT(guards, HasSubstr("ConstantMatch L['pair'][1] 5\n"));
  EXPECT_THAT(guards, HasSubstr("DictKeys L['opts'] dict keys=('w',)\n"));
  EXPECT_THAT(guards, HasSubstr("ConstantMatch L['opts']['w'] 10\n"));
  PyRef out = check_and_run(result, call.frame);
  ASSERT_TRUE(out);
  PyRef expected = call.call_directly();
  ASSERT_TRUE(PyDict_CheckExact(out.get()));
  EXPECT_TRUE(test::torch_equal(PyDict_GetItemString(out.get(), "sum"),
                                PyDict_GetItemString(expected.get(), "sum")));
  PyObject* both = PyDict_GetItemString(out.get(), "both");
  ASSERT_TRUE(both && PyTuple_CheckExact(both));
  // The tuple's tensor is the caller's very object; the int is the constant.
  EXPECT_EQ(PyTuple_GET_ITEM(both, 0), PyTuple_GET_ITEM(call.args[1].get(), 0));
  EXPECT_EQ(test::repr_of(PyTuple_GET_ITEM(both, 1)), "5");
}

TEST(TraceFrame, VariadicParameters) {
  // localsplus order: x, scale (keyword-only), rest (*args), extra (**kwargs).
  Call call("variadic", {eval("torch.ones(2)"), eval("3"), eval("(torch.full((2,), 10.),)"),
                         eval("{'bias': torch.full((2,), 100.)}")});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  const std::string guards = result.guards->format();
  EXPECT_THAT(guards, HasSubstr("ConstantMatch L['scale'] 3\n"));
  EXPECT_THAT(guards, HasSubstr("LengthMatch L['rest'] tuple len=1\n"));
  EXPECT_THAT(guards, HasSubstr("TensorMatch L['rest'][0] f32[2]\n"));
  EXPECT_THAT(guards, HasSubstr("DictKeys L['extra'] dict keys=('bias',)\n"));
  EXPECT_THAT(guards, HasSubstr("TensorMatch L['extra']['bias'] f32[2]\n"));
  PyRef out = check_and_run(result, call.frame);
  ASSERT_TRUE(out);
  EXPECT_TRUE(test::torch_equal(out.get(), eval("torch.full((2,), 113.)").get()));
}

TEST(TraceFrame, ArgumentCapturedByANestedFunction) {
  // x is a cell variable; before MAKE_CELL runs its slot holds the argument.
  Call call("captures", {eval("torch.ones(3)")});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  EXPECT_THAT(result.guards->format(), HasSubstr("TensorMatch L['x'] f32[3]\n"));
  PyRef out = check_and_run(result, call.frame);
  ASSERT_TRUE(out);
  EXPECT_TRUE(test::torch_equal(out.get(), eval("torch.full((3,), 2.)").get()));
}

TEST(TraceFrame, FloatGuardKeepsTheSignOfZero) {
  // 0.0 == -0.0 in Python, but x * 0.0 and x * -0.0 differ (the sign of the
  // zeros, visible through 1 / result or torch.signbit). A graph traced with
  // n=0.0 bakes 0.0 in, so its guards must not accept n=-0.0.
  Call traced("scale", {eval("torch.ones(2)"), eval("0.0")});
  TraceResult result = traced.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  Call negative_zero("scale", {eval("torch.ones(2)"), eval("-0.0")});
  PyRef out = check_and_run(result, negative_zero.frame);
  if (!out) return;  // the guards rejected -0.0: correct
  PyRef expected = negative_zero.call_directly();
  PyRef signbit = eval("torch.signbit");
  PyRef out_sign = PyRef::steal(PyObject_CallOneArg(signbit.get(), out.get()));
  PyRef expected_sign = PyRef::steal(PyObject_CallOneArg(signbit.get(), expected.get()));
  EXPECT_TRUE(test::torch_equal(out_sign.get(), expected_sign.get()))
      << "guards:\n"
      << result.guards->format() << "graph on n=-0.0 returned " << test::repr_of(out.get())
      << ", the function returns " << test::repr_of(expected.get());
}

TEST(TraceFrame, BoundMethodGlobalLeaksNoReferences) {
  Call call("uses_bound", {eval("torch.ones(2)")});
  {
    TraceResult warm_up = call.trace();
    ASSERT_TRUE(warm_up.ok) << warm_up.reason;
    EXPECT_THAT(warm_up.guards->format(), HasSubstr("G['bound'].__self__"));
  }
  // The source G['bound'].__self__ names the attribute with an interned
  // string; tracing must give back every reference it takes to it.
  PyRef self_name = PyRef::steal(PyUnicode_InternFromString("__self__"));
  const Py_ssize_t before = Py_REFCNT(self_name.get());
  for (int i = 0; i < 3; ++i) {
    TraceResult result = call.trace();
    ASSERT_TRUE(result.ok) << result.reason;
  }
  EXPECT_EQ(Py_REFCNT(self_name.get()), before);
}

// A graph break: the trace stops before the instruction CPython must run and
// keeps the graph of what came before, plus the state to resume from.
TEST(TraceFrame, PrintIsASideEffect) {
  Call call("prints", {eval("torch.ones(2)")});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  ASSERT_TRUE(result.partial);
  EXPECT_EQ(result.code, BreakCode::SideEffect) << break_code_name(result.code);
  EXPECT_THAT(result.reason,
              HasSubstr(std::string(kFile) + ":" + std::to_string(line_of("print(y)")) + ": "));
  EXPECT_THAT(result.reason, HasSubstr("print"));
  EXPECT_EQ(result.hint, break_code_hint(BreakCode::SideEffect));
  const auto instructions = kiln::cpython::decode_bytecode(call.code);
  EXPECT_EQ(instructions.at(result.partial->instruction).op, kiln::cpython::Op::Call);
  // The graph computes y = x + 1 (needed after the break) and returns it.
  ASSERT_TRUE(result.graph);
  EXPECT_EQ(result.graph->call_count(), 1);
  EXPECT_EQ(result.partial->outputs.size(), 1u);
  ASSERT_TRUE(result.guards);
}

TEST(TraceFrame, BranchOnTensorValueIsDataDependent) {
  Call call("branches", {eval("torch.ones(2)")});
  TraceResult result = call.trace();
  ASSERT_TRUE(result.ok) << result.reason;
  ASSERT_TRUE(result.partial);
  const auto instructions = kiln::cpython::decode_bytecode(call.code);
  EXPECT_EQ(instructions.at(result.partial->instruction).op, kiln::cpython::Op::PopJumpIfFalse);
  EXPECT_EQ(result.code, BreakCode::DataDependent) << break_code_name(result.code);
  EXPECT_THAT(result.reason, HasSubstr(std::string(kFile) + ":" +
                                       std::to_string(line_of("if x.sum() > 0:")) + ": "));
  EXPECT_EQ(result.hint, break_code_hint(BreakCode::DataDependent));
}

TEST(TraceFrame, KeepsTheCallersPendingError) {
  Call ok_call("add_relu", {eval("torch.ones(2)"), eval("torch.ones(2)")});
  Call bad_call("prints", {eval("torch.ones(2)")});
  for (const Call* call : {&ok_call, &bad_call}) {
    PyErr_SetString(PyExc_KeyError, "pending from the caller");
    TraceResult result = trace_frame(call->code, call->func.get(), call->frame);
    ASSERT_TRUE(PyErr_Occurred());
    EXPECT_TRUE(PyErr_ExceptionMatches(PyExc_KeyError));
    EXPECT_EQ(test::take_error(), "KeyError: 'pending from the caller'");
  }
}

TEST(TraceFrame, HoldsNoReferencesToArguments) {
  PyRef x = eval("torch.ones(4)");
  PyRef y = eval("torch.ones(4)");
  const Py_ssize_t x_before = Py_REFCNT(x.get());
  const Py_ssize_t y_before = Py_REFCNT(y.get());
  {
    Call call("add_relu", {x, y});
    for (int i = 0; i < 3; ++i) {
      TraceResult result = call.trace();
      ASSERT_TRUE(result.ok) << result.reason;
    }
    TraceResult broken = Call("prints", {x}).trace();
    EXPECT_TRUE(broken.partial);
  }
  EXPECT_EQ(Py_REFCNT(x.get()), x_before);
  EXPECT_EQ(Py_REFCNT(y.get()), y_before);
}

TEST(BreakReason, NamesAndHints) {
  EXPECT_STREQ(break_code_name(BreakCode::DataDependent), "DataDependent");
  EXPECT_STREQ(break_code_name(BreakCode::SideEffect), "SideEffect");
  EXPECT_STREQ(break_code_name(BreakCode::UnsupportedFrame), "UnsupportedFrame");
  EXPECT_THAT(break_code_hint(BreakCode::SideEffect), HasSubstr("printing"));
  TraceAbort abort(BreakCode::InlineDepth, "too deep");
  EXPECT_EQ(abort.code, BreakCode::InlineDepth);
  EXPECT_STREQ(abort.what(), "too deep");
  EXPECT_EQ(abort.location, "");
}

}  // namespace
}  // namespace kiln::tracer
