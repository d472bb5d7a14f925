// Tests of the bytecode assembler (cpython/bytecode_builder.h). They run
// in the embedded interpreter and use only version-neutral builder calls and
// plain Python (no torch), so the same file passes on 3.11 and 3.12; the
// encodings of the version that is not running are checked by assembling
// with its opcode table and decoding the result (ForeignTableTest).
#include <Python.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpython/assembly_traits.h"
#include "cpython/bytecode_builder.h"
#include "cpython/bytecode_decoder.h"
#include "cpython/exception_table.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::cpython {
namespace {

using test::PyRef;
using test::take_error;

constexpr const char* kFile = "kiln_builder_test.py";

// Python-side helpers: calling, comparing and disassembling.
constexpr const char* kHelpers = R"(
import dis, io, types

def run(fn, args, kwargs):
    try:
        result = fn(*args, **kwargs)
        if isinstance(result, types.GeneratorType):
            result = ('generator', list(result))
        return ('ok', result)
    except BaseException as e:
        frames, tb = [], e.__traceback__.tb_next
        while tb is not None:
            frames.append((tb.tb_frame.f_code.co_name, tb.tb_lineno))
            tb = tb.tb_next
        return ('raised', type(e).__name__, str(e), frames)

def compare(orig, copy, cases):
    for args, kwargs in cases:
        a, b = run(orig, args, kwargs), run(copy, args, kwargs)
        if a != b:
            return f'{orig.__name__}{args}: original {a!r} != copy {b!r}'
    return ''

def like(fn, code):
    f = types.FunctionType(code, fn.__globals__, code.co_name,
                           fn.__defaults__, fn.__closure__)
    f.__kwdefaults__ = fn.__kwdefaults__
    return f

def function(code, closure=None):
    return types.FunctionType(code, globals(), code.co_name, None, closure)

def disassemble(code):
    out = io.StringIO()
    dis.dis(code, file=out)
    return out.getvalue()

def exception_entries(code):
    return [(e.start, e.end, e.target, e.depth, e.lasti)
            for e in dis._parse_exception_table(code)]

def template():
    pass
)";

PyObject* helpers() {
  static PyObject* module = [] {
    PyRef globals = test::exec_module(kHelpers, "kiln_builder_helpers.py",
                                      "kiln_builder_helpers");
    return globals.release();  // kept for the whole test run
  }();
  return module;
}

// Calls helper `name` with `args` (a new reference, or null after a test
// failure).
PyRef call_helper(const char* name, std::initializer_list<PyObject*> args) {
  PyObject* function = PyDict_GetItemString(helpers(), name);
  PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  Py_ssize_t i = 0;
  for (PyObject* arg : args) {
    Py_INCREF(arg);
    PyTuple_SET_ITEM(tuple.get(), i++, arg);
  }
  PyRef result = PyRef::steal(PyObject_Call(function, tuple.get(), nullptr));
  if (!result) ADD_FAILURE() << name << " raised: " << take_error();
  return result;
}

PyCodeObject* code_of(PyObject* function) {
  return reinterpret_cast<PyCodeObject*>(PyFunction_GetCode(function));
}

PyCodeObject* template_code() { return code_of(PyDict_GetItemString(helpers(), "template")); }

PyRef make_function(const PyRef& code, PyObject* closure = Py_None) {
  return call_helper("function", {code.get(), closure});
}

std::string repr(const PyRef& value) { return value ? test::repr_of(value.get()) : "<null>"; }

// fn(*args) as the repr of run()'s result: ('ok', value) or ('raised', ...).
std::string outcome(const PyRef& function, const std::string& args_expression) {
  PyRef args = PyRef::steal(PyRun_String(args_expression.c_str(), Py_eval_input,
                                         helpers(), helpers()));
  if (!args) return "bad args: " + take_error();
  PyRef kwargs = PyRef::steal(PyDict_New());
  return repr(call_helper("run", {function.get(), args.get(), kwargs.get()}));
}

// Builds, failing the test (and returning null) on a Python error.
PyRef build(BytecodeBuilder& builder, const CodeLayout& layout, const char* name) {
  PyRef code = PyRef::steal(builder.build(layout, name));
  if (!code) ADD_FAILURE() << "build failed: " << take_error();
  return code;
}

CodeLayout args_layout(std::initializer_list<const char*> args,
                       std::initializer_list<const char*> locals = {}) {
  CodeLayout layout;
  for (const char* name : args) layout.add(name, kFastLocal);
  layout.argcount = static_cast<int>(args.size());
  for (const char* name : locals) layout.add(name, kFastLocal);
  return layout;
}

std::vector<int> identity_map(PyCodeObject* code) {
  std::vector<int> map(layout_of(code).names.size());
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int>(i);
  return map;
}

// NB_* codes of BINARY_OP (the same on 3.11 and 3.12).
constexpr int kNbAdd = 0;
constexpr int kNbMultiply = 5;
constexpr int kNbRemainder = 6;
constexpr int kNbTrueDivide = 11;

// ---------------------------------------------------------------------------
// (1) Functions built from scratch

TEST(BytecodeBuilderTest, AddTimesTwo) {
  // def f(a, b): return a + b * 2
  BytecodeBuilder b(template_code());
  b.resume();
  b.load_fast(0);
  b.load_fast(1);
  b.load_const(test::py_int(2).get());
  b.binary_op(kNbMultiply);
  b.binary_op(kNbAdd);
  b.return_value();
  PyRef code = build(b, args_layout({"a", "b"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "(1, 3)"), "('ok', 7)");
  EXPECT_EQ(outcome(f, "('x', 'y')"), "('ok', 'xyy')");
  PyRef stacksize = PyRef::steal(PyObject_GetAttrString(code.get(), "co_stacksize"));
  EXPECT_EQ(PyLong_AsLong(stacksize.get()), 3);
  EXPECT_TRUE(call_helper("disassemble", {code.get()}));
}

TEST(BytecodeBuilderTest, LoopWithForwardAndBackwardJumps) {
  // def f(xs):
  //     total = 0
  //     for x in xs:
  //         if x % 2 == 0: total += x       (forward POP_JUMP)
  //     i = 0
  //     do: total += i; i += 1  while i < 3 (backward POP_JUMP)
  //     return total
  BytecodeBuilder b(template_code());
  const int total = 1, x = 2, i = 3;
  const int head = b.new_label(), exit = b.new_label(), skip = b.new_label(),
            again = b.new_label();
  b.resume();
  b.load_const(test::py_int(0).get());
  b.store_fast(total);
  b.load_fast(0);
  b.get_iter();
  b.bind(head);
  b.emit_jump("FOR_ITER", exit);
  b.store_fast(x);
  b.load_fast(x);
  b.load_const(test::py_int(2).get());
  b.binary_op(kNbRemainder);
  b.load_const(test::py_int(0).get());
  b.compare_op(Py_EQ);
  b.emit_jump("POP_JUMP_IF_FALSE", skip);
  b.load_fast(total);
  b.load_fast(x);
  b.binary_op(kNbAdd);
  b.store_fast(total);
  b.bind(skip);
  b.emit_jump("JUMP", head);
  b.bind(exit);
  b.load_const(test::py_int(0).get());
  b.store_fast(i);
  b.bind(again);
  b.load_fast(total);
  b.load_fast(i);
  b.binary_op(kNbAdd);
  b.store_fast(total);
  b.load_fast(i);
  b.load_const(test::py_int(1).get());
  b.binary_op(kNbAdd);
  b.store_fast(i);
  b.load_fast(i);
  b.load_const(test::py_int(3).get());
  b.compare_op(Py_LT);
  b.emit_jump("POP_JUMP_IF_TRUE", again);
  b.load_fast(total);
  b.return_value();
  PyRef code = build(b, args_layout({"xs"}, {"total", "x", "i"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "([1, 2, 3, 4, 6], )"), "('ok', 15)");
  EXPECT_EQ(outcome(f, "([], )"), "('ok', 3)");
}

TEST(BytecodeBuilderTest, EveryComparisonEncodesItsOperator) {
  // def f(a, b): return (a < b, a <= b, a == b, a != b, a > b, a >= b)
  BytecodeBuilder b(template_code());
  b.resume();
  for (int op : {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE}) {
    b.load_fast(0);
    b.load_fast(1);
    b.compare_op(op);
  }
  b.build_tuple(6);
  b.return_value();
  PyRef code = build(b, args_layout({"a", "b"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  // Floats and ints so that 3.12's specialized comparisons, which read the
  // mask bits, are exercised once the code warms up.
  for (int round = 0; round < 100; ++round) {
    ASSERT_EQ(outcome(f, "(1, 2)"), "('ok', (True, True, False, True, False, False))");
    ASSERT_EQ(outcome(f, "(2.5, 2.5)"), "('ok', (False, True, True, False, False, True))");
    ASSERT_EQ(outcome(f, "('b', 'a')"), "('ok', (False, False, False, True, True, True))");
  }
}

TEST(BytecodeBuilderTest, BackwardJumpsOfEveryKind) {
  // Targets placed before the jumps, so every kind is encoded backward.
  //   def f(a, b, xs):
  //       (a or b), then (a and b), then (b is None), then sum(xs)-ish
  BytecodeBuilder b(template_code());
  const int start = b.new_label(), ret = b.new_label(), none_case = b.new_label(),
            loop_exit = b.new_label(), body = b.new_label(), head = b.new_label(),
            start2 = b.new_label(), start3 = b.new_label(), start4 = b.new_label();
  b.resume();
  b.emit_jump("JUMP", start);
  b.bind(ret);
  b.build_tuple(4);
  b.return_value();
  b.bind(none_case);
  b.load_const(test::py_str("none").get());
  b.emit_jump("JUMP", start4);
  b.bind(loop_exit);
  b.load_fast(3);
  b.emit_jump("JUMP", ret);
  b.bind(start);  // a or b
  b.load_fast(0);
  b.emit_jump("JUMP_IF_TRUE_OR_POP", start2);
  b.load_fast(1);
  b.bind(start2);  // a and b
  b.load_fast(0);
  b.emit_jump("JUMP_IF_FALSE_OR_POP", start3);
  b.load_fast(1);
  b.bind(start3);  // "none" if b is None else "some"
  b.load_fast(1);
  b.emit_jump("POP_JUMP_IF_NONE", none_case);
  b.load_const(test::py_str("some").get());
  b.bind(start4);  // total = 0; for x in xs: total += x
  b.load_const(test::py_int(0).get());
  b.store_fast(3);
  b.load_fast(2);
  b.get_iter();
  b.emit_jump("JUMP", head);
  b.bind(body);
  b.load_fast(3);
  b.binary_op(kNbAdd);
  b.store_fast(3);
  b.bind(head);
  b.emit_jump("FOR_ITER", loop_exit);  // backward: goes through a trampoline
  b.emit_jump("JUMP_NO_INTERRUPT", body);
  PyRef code = build(b, args_layout({"a", "b", "xs"}, {"total"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "(0, 5, [1, 2])"), "('ok', (5, 0, 'some', 3))");
  EXPECT_EQ(outcome(f, "(7, None, [])"), "('ok', (7, None, 'none', 0))");
  EXPECT_EQ(outcome(f, "('', '', range(5))"), "('ok', ('', '', 'some', 10))");
  EXPECT_TRUE(call_helper("disassemble", {code.get()}));
}

TEST(BytecodeBuilderTest, CallsOfEveryShape) {
  // def f(xs, d):
  //     out = []
  //     out.append(len(xs))                 method call, global call
  //     out.append(dict(a=1, b=xs))         keyword call
  //     out.append(max(*xs))                CALL_FUNCTION_EX
  //     out.append(sorted(xs, **d))         CALL_FUNCTION_EX with kwargs
  //     return out
  BytecodeBuilder b(template_code());
  const int xs = 0, d = 1, out = 2;
  PyRef append = test::py_str("append");
  b.resume();
  b.build_list(0);
  b.store_fast(out);
  b.load_fast(out);
  b.load_method(append.get());
  b.load_global(test::py_str("len").get(), true);
  b.load_fast(xs);
  b.call(1);
  b.call(1);
  b.pop_top();
  b.load_fast(out);
  b.load_method(append.get());
  b.load_global(test::py_str("dict").get(), true);
  b.load_const(test::py_int(1).get());
  b.load_fast(xs);
  PyRef kwnames = PyRef::steal(Py_BuildValue("(ss)", "a", "b"));
  b.call_kw(2, kwnames.get());
  b.call(1);
  b.pop_top();
  b.load_fast(out);
  b.load_method(append.get());
  b.load_global(test::py_str("max").get(), true);
  b.load_fast(xs);
  b.call_function_ex(false);
  b.call(1);
  b.pop_top();
  b.load_fast(out);
  b.load_attr(append.get());  // a plain attribute: [bound method]
  b.push_null();
  b.swap(2);                  // [NULL, bound method]
  b.load_global(test::py_str("sorted").get(), true);
  b.load_fast(xs);
  b.build_tuple(1);
  b.load_fast(d);
  b.call_function_ex(true);
  b.call(1);
  b.pop_top();
  b.load_fast(out);
  b.return_value();
  PyRef code = build(b, args_layout({"xs", "d"}, {"out"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "([3, 1, 2], {'reverse': True})"),
            "('ok', [3, {'a': 1, 'b': [3, 1, 2]}, 3, [3, 2, 1]])");
}

TEST(BytecodeBuilderTest, ReturnConstAndUnpack) {
  // def f(p):
  //     a, b = p
  //     if a: return "yes"
  //     return b
  BytecodeBuilder b(template_code());
  const int no = b.new_label();
  b.resume();
  b.load_fast(0);
  b.unpack_sequence(2);
  b.store_fast(1);
  b.store_fast(2);
  b.load_fast(1);
  b.emit_jump("POP_JUMP_IF_FALSE", no);
  b.return_const(test::py_str("yes").get());
  b.bind(no);
  b.load_fast(2);
  b.copy(1);
  b.pop_top();
  b.return_value();
  PyRef code = build(b, args_layout({"p"}, {"a", "b"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "((1, 2), )"), "('ok', 'yes')");
  EXPECT_EQ(outcome(f, "((0, 2), )"), "('ok', 2)");
  EXPECT_EQ(outcome(f, "((0, 2, 3), )").substr(0, 20), "('raised', 'ValueErr");
}

TEST(BytecodeBuilderTest, CellsAndFreeVariables) {
  // def outer(x):
  //     def inner(): return x
  //     return inner
  // with x an argument that is also a cell, and inner built here too.
  BytecodeBuilder inner_builder(template_code());
  CodeLayout inner_layout;
  inner_layout.add("x", kFastFree);
  inner_layout.flags |= CO_NESTED;
  inner_builder.copy_free_vars(1);
  inner_builder.resume();
  inner_builder.load_deref(0);
  inner_builder.return_value();
  PyRef inner = build(inner_builder, inner_layout, "inner");
  ASSERT_TRUE(inner);

  BytecodeBuilder b(template_code());
  CodeLayout layout;
  layout.add("x", kFastLocal | kFastCell);
  layout.add("inner", kFastLocal);
  layout.argcount = 1;
  b.make_cell(0);
  b.resume();
  b.load_closure(0);
  b.build_tuple(1);
  b.load_const(inner.get());
  b.make_function(0x08);  // closure
  b.store_fast(1);
  b.load_const(test::py_int(5).get());  // x = x + 5 through the cell
  b.load_deref(0);
  b.binary_op(kNbAdd);
  b.store_deref(0);
  b.load_fast(1);
  b.return_value();
  PyRef code = build(b, layout, "outer");
  ASSERT_TRUE(code);
  PyRef varnames = PyRef::steal(PyObject_GetAttrString(code.get(), "co_varnames"));
  PyRef cellvars = PyRef::steal(PyObject_GetAttrString(code.get(), "co_cellvars"));
  EXPECT_EQ(repr(varnames), "('x', 'inner')");
  EXPECT_EQ(repr(cellvars), "('x',)");
  PyRef outer = make_function(code);
  PyRef made = PyRef::steal(PyObject_CallFunction(outer.get(), "i", 10));
  ASSERT_TRUE(made) << take_error();
  PyRef value = PyRef::steal(PyObject_CallNoArgs(made.get()));
  ASSERT_TRUE(value) << take_error();
  EXPECT_EQ(repr(value), "15");
}

TEST(BytecodeBuilderTest, ExceptionHandlerFromScratch) {
  // def f(a, b):
  //     try: return a / b        (line 10)
  //     except: return "caught"  (line 11)
  BytecodeBuilder b(template_code());
  const int try_start = b.new_label(), handler = b.new_label(),
            handled = b.new_label(), cleanup = b.new_label(), end = b.new_label();
  b.resume();
  b.set_line(10);
  b.bind(try_start);
  b.load_fast(0);
  b.load_fast(1);
  b.binary_op(kNbTrueDivide);
  b.return_value();
  b.set_line(11);
  b.bind(handler);
  b.emit("PUSH_EXC_INFO");
  b.pop_top();
  b.bind(handled);
  b.emit("POP_EXCEPT");
  b.return_const(test::py_str("caught").get());
  b.bind(cleanup);
  b.set_line(-1);
  b.copy(3);
  b.emit("POP_EXCEPT");
  b.emit("RERAISE", 1);
  b.bind(end);
  b.add_exception_entry(try_start, handler, handler, 0, false);
  b.add_exception_entry(handler, handled, cleanup, 1, true);
  PyRef code = build(b, args_layout({"a", "b"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "(1, 4)"), "('ok', 0.25)");
  EXPECT_EQ(outcome(f, "(1, 0)"), "('ok', 'caught')");
  PyRef entries = call_helper("exception_entries", {code.get()});
  // Offsets in bytes: RESUME, LOAD_FAST, LOAD_FAST, BINARY_OP + 1 cache,
  // RETURN_VALUE; the handler then starts at byte 12.
  EXPECT_EQ(repr(entries).substr(0, 22), "[(2, 12, 12, 0, False)");
  PyRef stacksize = PyRef::steal(PyObject_GetAttrString(code.get(), "co_stacksize"));
  EXPECT_EQ(PyLong_AsLong(stacksize.get()), 4);  // lasti, exc and COPY 3
}

TEST(BytecodeBuilderTest, TracebacksPointAtSetLines) {
  // def f(a):          lines: 20 loads, 21 divides
  BytecodeBuilder b(template_code());
  b.resume();
  b.set_line(20);
  b.load_const(test::py_int(1).get());
  b.load_fast(0);
  b.set_line(21);
  b.binary_op(kNbTrueDivide);
  b.set_line(22);
  b.return_value();
  PyRef code = build(b, args_layout({"a"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "(0, )"),
            "('raised', 'ZeroDivisionError', 'division by zero', [('f', 21)])");
}

TEST(BytecodeBuilderTest, CheckedLoadsRaiseForUnboundLocals) {
  // def f(): return x     with x a local nobody assigned. 3.11's LOAD_FAST
  // checks anyway; 3.12's would crash, so checked loads use LOAD_FAST_CHECK.
  BytecodeBuilder b(template_code());
  b.check_unbound_locals(true);
  b.resume();
  b.load_fast(0);
  b.return_value();
  PyRef code = build(b, args_layout({}, {"x"}), "f");
  ASSERT_TRUE(code);
  PyRef f = make_function(code);
  EXPECT_EQ(outcome(f, "()").substr(0, 30), "('raised', 'UnboundLocalError'");
}

TEST(BytecodeBuilderTest, ErrorsAreReportedByBuild) {
  {
    BytecodeBuilder b(template_code());
    b.resume();
    b.emit("NOT_AN_OPCODE");
    EXPECT_FALSE(b.error().empty());
    EXPECT_EQ(b.build(args_layout({}), "f"), nullptr);
    EXPECT_NE(take_error().find("NOT_AN_OPCODE"), std::string::npos);
  }
  {
    BytecodeBuilder b(template_code());
    const int nowhere = b.new_label();
    b.resume();
    b.emit_jump("JUMP", nowhere);
    EXPECT_EQ(b.build(args_layout({}), "f"), nullptr);
    EXPECT_NE(take_error().find("unbound label"), std::string::npos);
  }
  {
    // Two paths reach the return with different depths.
    BytecodeBuilder b(template_code());
    const int join = b.new_label();
    b.resume();
    b.load_fast(0);
    b.load_fast(0);
    b.emit_jump("POP_JUMP_IF_TRUE", join);
    b.load_fast(0);
    b.bind(join);
    b.return_value();
    EXPECT_EQ(b.build(args_layout({"a"}), "f"), nullptr);
    EXPECT_NE(take_error().find("stack depth"), std::string::npos);
  }
  {
    BytecodeBuilder b(template_code());
    b.resume();
    b.return_const(Py_None);
    CodeLayout layout;
    layout.add("free", kFastFree);
    layout.add("late_local", kFastLocal);
    EXPECT_EQ(b.build(layout, "f"), nullptr);
    EXPECT_NE(take_error().find("out of order"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------
// (2) and (4): round trips of real functions

// Functions to copy, and the calls that check each copy. Generated parts
// (many constants, many locals, long jumps) are appended in round_trip_source.
constexpr const char* kRoundTripSource = R"(
import contextlib

G = 10

def combine(a, b):
    return a * 100 + b

def loops(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        if i > 50:
            break
        total += i
    while n > 0:
        n -= 2
        total += n
    else:
        total += 1000
    return total

def branches(a, b=None, *, c=3):
    if a is None:
        return 'none'
    elif b is not None and a > b or c == 4:
        x = a if a > 0 else -a
    else:
        x = not a
    return (x, a < b < c if b is not None else a <= c, a or b, a and c)

def outer(a, b):
    c = a + 1
    def inner(x):
        nonlocal c
        c += x
        return a + c
    r = [inner(i) for i in range(b)]
    return r, c, inner.__code__.co_freevars

def make_closure(k):
    def closure(x, *rest):
        return x * k + len(rest)
    return closure

closure = make_closure(7)

def calls(xs, **kw):
    out = []
    out.append(len(xs))
    out.append(sorted(xs, reverse=True))
    out.append(combine(*xs[:2]))
    out.append(dict(kw, z=1))
    out.append(max(xs, key=lambda v: -v))
    s = 'a,b'
    out.append(s.split(','))
    out.append(f'{xs!r:>20} {len(xs)}')
    return out

def comprehensions(n):
    evens = [i for i in range(n) if i % 2 == 0]
    squares = {i: i * i for i in evens}
    odd = {i for i in range(n) if i % 2}
    gen = sum(i for i in range(n))
    nested = [[j for j in range(i)] for i in range(3)]
    return evens, squares, sorted(odd), gen, nested

def exceptions(x):
    log = []
    try:
        log.append(10 // x)
    except ZeroDivisionError as e:
        log.append('zero')
    except TypeError:
        log.append('type')
        try:
            raise ValueError('inner')
        except ValueError as e2:
            log.append(str(e2))
    else:
        log.append('else')
    finally:
        log.append('finally')
    try:
        if x == 1:
            raise KeyError(x)
    except KeyError:
        log.append('key')
    return log

class Manager:
    def __init__(self, log):
        self.log = log
    def __enter__(self):
        self.log.append('enter')
        return self
    def __exit__(self, *exc):
        self.log.append(('exit', exc[0] is not None))
        return exc[0] is KeyError

def with_blocks(x):
    log = []
    with Manager(log) as m:
        log.append(m is not None)
        if x:
            raise KeyError(x)
    with Manager(log), Manager(log):
        log.append('two')
    with contextlib.suppress(ValueError):
        raise ValueError()
    return log

def raises(x):
    y = x + 1
    if y > 2:
        raise ValueError(f'too big: {y}')
    z = [1, 2][y]
    return z

def unpacking(seq):
    a, *rest, b = seq
    (c, d), e = (a, b), rest
    seq2 = [*rest, *seq]
    m = {**{'a': a}, 'b': b}
    return a, rest, b, c, d, e, seq2, m, seq[1:-1], seq[::2]

def matching(v):
    match v:
        case [x, y]:
            return ('pair', x, y)
        case {'k': k}:
            return ('map', k)
        case int() | float() if v > 0:
            return 'positive'
        case _:
            return 'other'

def globals_and_attrs(x):
    global G
    old = G
    G = x
    new = G
    G = old
    obj = type('O', (), {})()
    obj.attr = x
    del obj.attr
    items = [1, 2, 3]
    del items[0]
    items[0] = old
    return old, new, items, hasattr(obj, 'attr')

def generator(n):
    for i in range(n):
        yield i * 2
    yield from range(2)
    return 'done'

def asserts(x):
    assert x > 0, 'must be positive'
    return x

CASES = {
    'loops': [(5,), (0,), (100,), (-3,)],
    'branches': [(None,), (1, 0), (1, 2), (-1, 2), (0,), (5, None), (2, 1)],
    'outer': [(1, 3), (0, 0)],
    'closure': [(2,), (2, 3, 4)],
    'calls': [([3, 1, 2],), ([5, 4], )],
    'comprehensions': [(6,), (0,)],
    'exceptions': [(2,), (0,), ('s',), (1,)],
    'with_blocks': [(0,), (1,)],
    'raises': [(0,), (5,), (1,), ('s',)],
    'unpacking': [((1, 2, 3, 4),), ([1, 2],), ((1,),)],
    'matching': [([1, 2],), ({'k': 3},), (4,), (-1.5,), ('s',)],
    'globals_and_attrs': [(1,), (2,)],
    'generator': [(3,), (0,)],
    'asserts': [(1,), (-1,)],
    'many_constants': [(0,), (1,)],
    'many_locals': [(1,)],
    'long_jumps': [(10,), (3,)],
}
KWARGS = {'calls': {'q': 2}}
)";

std::string round_trip_source() {
  std::string source = kRoundTripSource;
  // More than 256 constants: LOAD_CONST needs EXTENDED_ARG.
  source += "\ndef many_constants(i):\n    values = [";
  for (int k = 0; k < 300; ++k) source += std::to_string(k) + ".5, ";
  source += "]\n    return values[i] + values[-1]\n";
  // More than 256 locals: LOAD_FAST/STORE_FAST need EXTENDED_ARG.
  source += "\ndef many_locals(x):\n    v0 = x\n";
  for (int k = 1; k < 300; ++k)
    source += "    v" + std::to_string(k) + " = v" + std::to_string(k - 1) + " + 1\n";
  source += "    return v299\n";
  // Jumps over more than 255 code units, forward and backward.
  source += "\ndef long_jumps(n):\n    total = 0\n    for i in range(n):\n"
            "        if i % 2:\n";
  for (int k = 0; k < 120; ++k)
    source += "            total += i * " + std::to_string(k) + "\n";
  source += "        else:\n            total -= 1\n    return total\n";
  return source;
}

PyObject* round_trip_module() {
  static PyObject* module = [] {
    PyRef globals = test::exec_module(round_trip_source(), kFile, "kiln_builder_round_trip");
    return globals.release();
  }();
  return module;
}

std::vector<std::string> round_trip_names() {
  std::vector<std::string> names;
  PyObject* cases = PyDict_GetItemString(round_trip_module(), "CASES");
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(cases, &pos, &key, &value)) names.push_back(PyUnicode_AsUTF8(key));
  return names;
}

// Copies the whole of fn into a builder (seeded with fn's constants and
// names so indices match when `seed`) and builds it with fn's layout.
PyRef round_trip(PyObject* fn, bool seed) {
  PyCodeObject* code = code_of(fn);
  PyObject* code_object = reinterpret_cast<PyObject*>(code);
  const auto code_attr = [&](const char* name) {
    return PyRef::steal(PyObject_GetAttrString(code_object, name));
  };
  BytecodeBuilder b(code);
  if (seed) {
    PyRef consts = code_attr("co_consts");
    PyRef names = code_attr("co_names");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts.get()); ++i)
      EXPECT_EQ(b.add_const(PyTuple_GET_ITEM(consts.get(), i)), i);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names.get()); ++i)
      EXPECT_EQ(b.add_name(PyTuple_GET_ITEM(names.get(), i)), i);
  }
  const int count = static_cast<int>(decode_bytecode(code).size());
  std::string error;
  if (!b.copy_from(code, 0, count, identity_map(code), nullptr, &error)) {
    ADD_FAILURE() << "copy_from failed: " << error;
    return PyRef();
  }
  PyRef name = code_attr("co_name");
  PyRef qualname = code_attr("co_qualname");
  PyRef copy = PyRef::steal(b.build(layout_of(code), PyUnicode_AsUTF8(name.get()),
                                    PyUnicode_AsUTF8(qualname.get())));
  if (!copy) ADD_FAILURE() << "build failed: " << take_error();
  return copy;
}

PyRef attr(const PyRef& object, const char* name) {
  PyRef value = PyRef::steal(PyObject_GetAttrString(object.get(), name));
  if (!value) ADD_FAILURE() << "no attribute " << name << ": " << take_error();
  return value;
}

TEST(RoundTripTest, CopiesBehaveLikeTheOriginals) {
  PyObject* module = round_trip_module();
  PyObject* cases = PyDict_GetItemString(module, "CASES");
  PyObject* kwargs = PyDict_GetItemString(module, "KWARGS");
  for (const std::string& name : round_trip_names()) {
    SCOPED_TRACE(name);
    PyObject* fn = PyDict_GetItemString(module, name.c_str());
    ASSERT_NE(fn, nullptr);
    for (bool seed : {false, true}) {
      PyRef copy = round_trip(fn, seed);
      ASSERT_TRUE(copy);
      PyRef copied_fn = call_helper("like", {fn, copy.get()});
      // [(args, kwargs), ...]
      PyObject* args_list = PyDict_GetItemString(cases, name.c_str());
      PyObject* kw = PyDict_GetItemString(kwargs, name.c_str());
      PyRef no_kwargs = PyRef::steal(PyDict_New());
      PyRef calls = PyRef::steal(PyList_New(0));
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(args_list); ++i) {
        PyRef pair = PyRef::steal(Py_BuildValue("(OO)", PyList_GET_ITEM(args_list, i),
                                                kw != nullptr ? kw : no_kwargs.get()));
        PyList_Append(calls.get(), pair.get());
      }
      PyRef mismatch = call_helper("compare", {fn, copied_fn.get(), calls.get()});
      ASSERT_TRUE(mismatch);
      EXPECT_STREQ(PyUnicode_AsUTF8(mismatch.get()), "");
      PyRef listing = call_helper("disassemble", {copy.get()});
      EXPECT_TRUE(listing);
    }
  }
}

TEST(RoundTripTest, SeededCopiesAreIdenticalCode) {
  // With the same constant and name indices, the copy must be CPython's own
  // code: same bytes, stack size, exception table and positions (the
  // location table's bytes may group entries differently).
  PyObject* module = round_trip_module();
  for (const std::string& name : round_trip_names()) {
    SCOPED_TRACE(name);
    PyObject* fn = PyDict_GetItemString(module, name.c_str());
    PyRef original = PyRef::borrow(PyFunction_GetCode(fn));
    PyRef copy = round_trip(fn, true);
    ASSERT_TRUE(copy);
    for (const char* field : {"co_code", "co_stacksize", "co_exceptiontable",
                              "co_consts", "co_names", "co_varnames", "co_cellvars",
                              "co_freevars", "co_nlocals", "co_flags", "co_argcount",
                              "co_kwonlyargcount", "co_posonlyargcount", "co_qualname"}) {
      PyRef want = attr(original, field);
      PyRef got = attr(copy, field);
      ASSERT_TRUE(want && got);
      EXPECT_EQ(PyObject_RichCompareBool(want.get(), got.get(), Py_EQ), 1)
          << field << ": original " << repr(want) << "\n copy " << repr(got);
    }
    PyRef want_positions = PyRef::steal(PyRun_String(
        "lambda c: list(c.co_positions())", Py_eval_input, helpers(), helpers()));
    PyRef a = PyRef::steal(PyObject_CallOneArg(want_positions.get(), original.get()));
    PyRef b = PyRef::steal(PyObject_CallOneArg(want_positions.get(), copy.get()));
    EXPECT_EQ(PyObject_RichCompareBool(a.get(), b.get(), Py_EQ), 1);
    // The exception table decodes back to CPython's entries.
    PyRef want_entries = call_helper("exception_entries", {original.get()});
    PyRef got_entries = call_helper("exception_entries", {copy.get()});
    EXPECT_EQ(repr(want_entries), repr(got_entries));
  }
}

TEST(RoundTripTest, UnseededCopiesHaveCPythonsStackSize) {
  PyObject* module = round_trip_module();
  for (const std::string& name : round_trip_names()) {
    SCOPED_TRACE(name);
    PyObject* fn = PyDict_GetItemString(module, name.c_str());
    PyRef original = PyRef::borrow(PyFunction_GetCode(fn));
    PyRef copy = round_trip(fn, false);
    ASSERT_TRUE(copy);
    EXPECT_EQ(repr(attr(original, "co_stacksize")), repr(attr(copy, "co_stacksize")));
    EXPECT_EQ(repr(call_helper("exception_entries", {original.get()})),
              repr(call_helper("exception_entries", {copy.get()})));
  }
}

TEST(ExceptionTableTest, EncodesAndDecodesLargeValues) {
  const std::vector<ExceptionTableEntry> entries = {
      {0, 3, 10, 0, false}, {3, 70, 5000, 2, true}, {70, 300000, 65, 63, false}};
  const std::string bytes = encode_exception_table(entries);
  std::vector<ExceptionTableEntry> decoded;
  ASSERT_TRUE(decode_exception_table(reinterpret_cast<const uint8_t*>(bytes.data()),
                                     bytes.size(), &decoded));
  EXPECT_EQ(decoded, entries);
}

// ---------------------------------------------------------------------------
// (3) Resume functions: a prologue rebuilds the stack and jumps into copied
// original code.

constexpr const char* kResumeSource = R"(
def combine(a, b):
    return a * 100 + b

def loop_body(xs, k):
    total = 0
    for x in xs:
        y = x * k
        total = total + y
    return total

def with_cell(xs):
    total = 0
    def add(v):
        nonlocal total
        total += v
    for x in xs:
        add(x)
    return total

def make_adder(start):
    total = start
    def add(v):
        nonlocal total
        total += v
    return add, add.__closure__[0]

def call_mid(a, b):
    r = combine(a, b)
    return r + 1

def guarded(xs):
    out = []
    for x in xs:
        try:
            v = 10 // x
        except ZeroDivisionError:
            v = -1
        out.append(v)
    return out

def body_of(xs):
    total = 0
    for x in xs:
        if x > 2:
            total += x * 10
            continue
        total += 1
    return total
)";

PyObject* resume_module() {
  static PyObject* module = [] {
    PyRef globals = test::exec_module(kResumeSource, "kiln_resume_test.py", "kiln_resume_test");
    return globals.release();
  }();
  return module;
}

PyObject* resume_fn(const char* name) { return PyDict_GetItemString(resume_module(), name); }

// Index of the first instruction with `op` whose arg is `arg` (-1: any).
int find(const std::vector<Instruction>& code, Op op, int arg = -1, int after = 0) {
  for (const Instruction& ins : code)
    if (ins.index >= after && ins.op == op && (arg < 0 || ins.arg == arg)) return ins.index;
  ADD_FAILURE() << "no " << op_name(op) << " " << arg;
  return -1;
}

// Calls `fn` made from `code` in the resume module's globals.
PyRef resume_call(const PyRef& code, const std::string& args, PyObject* closure = Py_None) {
  PyRef fn = PyRef::steal(PyFunction_New(code.get(), resume_module()));
  if (closure != Py_None) PyFunction_SetClosure(fn.get(), closure);
  PyRef tuple = PyRef::steal(PyRun_String(args.c_str(), Py_eval_input, resume_module(),
                                          resume_module()));
  if (!tuple) {
    ADD_FAILURE() << take_error();
    return PyRef();
  }
  PyRef result = PyRef::steal(PyObject_Call(fn.get(), tuple.get(), nullptr));
  if (!result) ADD_FAILURE() << "resume function raised: " << take_error();
  return result;
}

TEST(ResumeFunctionTest, JumpsIntoALoopWithTheIteratorOnTheStack) {
  PyCodeObject* original = code_of(resume_fn("loop_body"));
  const std::vector<Instruction> ins = decode_bytecode(original);
  const CodeLayout old_layout = layout_of(original);  // xs, k, total, x, y
  // Resume right after `y = x * k`, stack [iterator]; live: total, y, k, x.
  const int resume_at = find(ins, Op::StoreFast, old_layout.index_of("y")) + 1;
  const int loop_head = find(ins, Op::ForIter);
  for (bool checked : {false, true}) {
    SCOPED_TRACE(checked ? "checked loads" : "plain loads");
    CodeLayout layout = args_layout({"__stack0", "total", "y", "k", "x"}, {"xs"});
    std::vector<int> local_map(old_layout.names.size());
    for (size_t i = 0; i < local_map.size(); ++i)
      local_map[i] = layout.index_of(old_layout.names[i]);

    BytecodeBuilder b(original);
    b.check_unbound_locals(checked);
    const int entry = b.new_label();
    b.resume();
    b.load_fast(0);  // the iterator, back on the stack
    b.emit_jump("JUMP", entry);
    // The whole loop, from its head; the prologue enters it mid-body.
    std::vector<int> labels;
    std::string error;
    ASSERT_TRUE(b.copy_from(original, loop_head, static_cast<int>(ins.size()), local_map,
                            nullptr, &error, &labels))
        << error;
    b.bind_at(entry, labels[static_cast<size_t>(resume_at - loop_head)]);
    PyRef code = build(b, layout, "resume_loop_body");
    ASSERT_TRUE(code);
    // loop_body([1, 2, 3, 4], 10) broke after y = 2 * 10 with total = 10.
    PyRef result = resume_call(code, "(iter([3, 4]), 10, 20, 10, 2)");
    EXPECT_EQ(repr(result), "100");
    EXPECT_EQ(repr(resume_call(code, "(iter([]), 5, 6, 1, 1)")), "11");
    EXPECT_TRUE(call_helper("disassemble", {code.get()}));
  }
}

TEST(ResumeFunctionTest, CellsOfTheOriginalBecomeFreeVariables) {
  PyCodeObject* original = code_of(resume_fn("with_cell"));
  const std::vector<Instruction> ins = decode_bytecode(original);
  const CodeLayout old_layout = layout_of(original);  // xs, add, x | total (cell)
  ASSERT_EQ(old_layout.kinds[static_cast<size_t>(old_layout.index_of("total"))], kFastCell);
  // Resume after `x = next(it)`, before add(x): stack [iterator].
  const int resume_at = find(ins, Op::StoreFast, old_layout.index_of("x")) + 1;
  const int loop_head = find(ins, Op::ForIter);
  CodeLayout layout = args_layout({"__stack0", "add", "x"}, {"xs"});
  layout.add("total", kFastFree);  // the original frame's cell, shared
  std::vector<int> local_map(old_layout.names.size());
  for (size_t i = 0; i < local_map.size(); ++i)
    local_map[i] = layout.index_of(old_layout.names[i]);

  BytecodeBuilder b(original);
  const int entry = b.new_label();
  b.copy_free_vars(layout.free_count());
  b.resume();
  b.load_fast(0);
  b.emit_jump("JUMP", entry);
  std::vector<int> labels;
  std::string error;
  ASSERT_TRUE(b.copy_from(original, loop_head, static_cast<int>(ins.size()), local_map,
                          nullptr, &error, &labels))
      << error;
  b.bind_at(entry, labels[static_cast<size_t>(resume_at - loop_head)]);
  PyRef code = build(b, layout, "resume_with_cell");
  ASSERT_TRUE(code);
  PyRef freevars = attr(code, "co_freevars");
  EXPECT_EQ(repr(freevars), "('total',)");
  // with_cell([1, 2, 3]) stopped before add(2) with total = 1.
  PyRef pair = PyRef::steal(PyObject_CallFunction(resume_fn("make_adder"), "i", 1));
  ASSERT_TRUE(pair) << take_error();
  PyObject* add = PyTuple_GET_ITEM(pair.get(), 0);
  PyObject* cell = PyTuple_GET_ITEM(pair.get(), 1);
  PyRef closure = PyRef::steal(PyTuple_Pack(1, cell));
  PyDict_SetItemString(resume_module(), "_add", add);
  PyRef result = resume_call(code, "(iter([3]), _add, 2)", closure.get());
  EXPECT_EQ(repr(result), "6");
  // The function made before the break and the resumed code share the cell.
  PyRef contents = PyRef::steal(PyCell_Get(cell));
  EXPECT_EQ(repr(contents), "6");
}

TEST(ResumeFunctionTest, NullsOnTheStackAreRecreatedWithPushNull) {
  PyCodeObject* original = code_of(resume_fn("call_mid"));
  const std::vector<Instruction> ins = decode_bytecode(original);
  const CodeLayout old_layout = layout_of(original);  // a, b, r
  // Resume after the last argument of combine(a, b) is loaded: the stack is
  // [NULL, combine, a, b]; the NULL can't be passed and is pushed again.
  const int resume_at = find(ins, Op::LoadFast, old_layout.index_of("b")) + 1;
  CodeLayout layout = args_layout({"__stack1", "__stack2", "__stack3"}, {"a", "b", "r"});
  std::vector<int> local_map(old_layout.names.size());
  for (size_t i = 0; i < local_map.size(); ++i)
    local_map[i] = layout.index_of(old_layout.names[i]);
  BytecodeBuilder b(original);
  b.resume();
  b.push_null();
  for (int i = 0; i < 3; ++i) b.load_fast(i);
  // Fall through into the copied code: no jump needed at its start.
  std::string error;
  ASSERT_TRUE(b.copy_from(original, resume_at, static_cast<int>(ins.size()), local_map,
                          nullptr, &error))
      << error;
  PyRef code = build(b, layout, "resume_call_mid");
  ASSERT_TRUE(code);
  EXPECT_EQ(repr(resume_call(code, "(combine, 5, 7)")), "508");
  EXPECT_EQ(repr(resume_call(code, "(lambda a, b: a - b, 5, 7)")), "-1");
}

TEST(ResumeFunctionTest, ExceptionTablesAreCarriedIntoTheCopy) {
  PyCodeObject* original = code_of(resume_fn("guarded"));
  const std::vector<Instruction> ins = decode_bytecode(original);
  const CodeLayout old_layout = layout_of(original);  // xs, out, x, v
  const int resume_at = find(ins, Op::StoreFast, old_layout.index_of("x")) + 1;
  const int loop_head = find(ins, Op::ForIter);
  CodeLayout layout = args_layout({"__stack0", "out", "x"}, {"xs", "v"});
  std::vector<int> local_map(old_layout.names.size());
  for (size_t i = 0; i < local_map.size(); ++i)
    local_map[i] = layout.index_of(old_layout.names[i]);
  BytecodeBuilder b(original);
  const int entry = b.new_label();
  b.resume();
  b.load_fast(0);
  b.emit_jump("JUMP", entry);
  std::vector<int> labels;
  std::string error;
  ASSERT_TRUE(b.copy_from(original, loop_head, static_cast<int>(ins.size()), local_map,
                          nullptr, &error, &labels))
      << error;
  b.bind_at(entry, labels[static_cast<size_t>(resume_at - loop_head)]);
  PyRef code = build(b, layout, "resume_guarded");
  ASSERT_TRUE(code);
  // guarded([5, 0, 2, 0]) stopped before the division by 0 with out = [2].
  EXPECT_EQ(repr(resume_call(code, "(iter([2, 0]), [2], 0)")), "[2, -1, 5, -1]");
}

TEST(ResumeFunctionTest, JumpsOutOfACopiedRangeGoToTheCallersLabels) {
  // One iteration of body_of's loop body as a function of (x, total).
  PyCodeObject* original = code_of(resume_fn("body_of"));
  const std::vector<Instruction> ins = decode_bytecode(original);
  const CodeLayout old_layout = layout_of(original);  // xs, total, x
  const int body_start = find(ins, Op::StoreFast, old_layout.index_of("x")) + 1;
  const int loop_head = find(ins, Op::ForIter);
  // The body ends with the jump back to the loop head; it isn't copied.
  int body_end = -1;
  for (const Instruction& i : ins)
    if (i.op == Op::Jump && i.target == loop_head) body_end = i.index;
  ASSERT_GT(body_end, body_start);
  CodeLayout layout = args_layout({"x", "total"}, {"xs"});
  std::vector<int> local_map(old_layout.names.size());
  for (size_t i = 0; i < local_map.size(); ++i)
    local_map[i] = layout.index_of(old_layout.names[i]);
  BytecodeBuilder b(original);
  const int done = b.new_label();
  std::vector<int> asked;
  b.resume();
  std::string error;
  ASSERT_TRUE(b.copy_from(original, body_start, body_end, local_map,
                          [&](int index) {
                            asked.push_back(index);
                            return done;
                          },
                          &error))
      << error;
  b.bind(done);
  b.load_fast(layout.index_of("total"));
  b.return_value();
  PyRef code = build(b, layout, "body");
  ASSERT_TRUE(code);
  for (int target : asked) EXPECT_TRUE(target == body_end || target == loop_head) << target;
  EXPECT_EQ(repr(resume_call(code, "(1, 0)")), "1");
  EXPECT_EQ(repr(resume_call(code, "(3, 5)")), "35");
  EXPECT_FALSE(asked.empty());

  // Without a label for outside targets the copy fails.
  BytecodeBuilder strict(original);
  EXPECT_FALSE(strict.copy_from(original, body_start, body_end, local_map, nullptr, &error));
  EXPECT_NE(error.find("no label"), std::string::npos) << error;
  // A local missing from the map fails too.
  std::vector<int> partial(local_map.size(), -1);
  EXPECT_FALSE(strict.copy_from(original, body_start, body_end, partial,
                                [&](int) { return done; }, &error));
  EXPECT_NE(error.find("local_map"), std::string::npos) << error;
}

// ---------------------------------------------------------------------------
// Encodings of both versions, checked from whichever one runs

// Listing of assembled bytes decoded with `table`: "NAME arg -> target".
std::string listing(const OpcodeTable& table, const BytecodeBuilder::Assembled& assembled) {
  const std::vector<Instruction> decoded = decode_code_units(
      table, reinterpret_cast<const uint8_t*>(assembled.code.data()), assembled.code.size());
  std::string text;
  for (const Instruction& ins : decoded) {
    text += std::to_string(ins.index) + " " + ins.raw_name + " " + std::to_string(ins.raw_arg);
    if (ins.target >= 0) text += " -> " + std::to_string(ins.target);
    text += "\n";
  }
  return text;
}

// One small function in version-neutral calls, for any table.
BytecodeBuilder::Assembled assemble_sample(const OpcodeTable& table, int padding) {
  BytecodeBuilder b(template_code(), table);
  const int head = b.new_label(), exit = b.new_label(), after = b.new_label();
  b.resume();
  b.load_fast(0);
  b.get_iter();
  b.bind(head);
  b.emit_jump("FOR_ITER", exit);
  b.store_fast(1);
  b.load_fast(1);
  b.emit_jump("POP_JUMP_IF_NONE", after);
  for (int i = 0; i < padding; ++i) b.nop();
  b.load_global(test::py_str("print").get(), true);
  b.load_fast(1);
  b.call(1);
  b.pop_top();
  b.bind(after);
  b.load_fast(1);
  b.emit_jump("POP_JUMP_IF_TRUE", head);
  b.load_fast(1);
  b.load_method(test::py_str("m").get());
  b.pop_top();
  b.pop_top();
  b.emit_jump("JUMP", head);
  b.bind(exit);
  b.load_fast(0);
  b.load_fast(1);
  b.compare_op(Py_LE);
  b.return_const(Py_None);
  BytecodeBuilder::Assembled assembled;
  std::string error;
  EXPECT_TRUE(b.assemble(&assembled, &error)) << error;
  return assembled;
}

TEST(ForeignTableTest, Python311Encoding) {
  const OpcodeTable& table = opcode_table(11);
  EXPECT_EQ(listing(table, assemble_sample(table, 0)),
            "0 RESUME 0\n"
            "1 LOAD_FAST 0\n"
            "2 GET_ITER 0\n"
            "3 FOR_ITER 35 -> 19\n"
            "4 STORE_FAST 1\n"
            "5 LOAD_FAST 1\n"
            "6 POP_JUMP_FORWARD_IF_NONE 15 -> 12\n"
            "7 LOAD_GLOBAL 1\n"
            "8 LOAD_FAST 1\n"
            "9 PRECALL 1\n"
            "10 CALL 1\n"
            "11 POP_TOP 0\n"
            "12 LOAD_FAST 1\n"
            "13 POP_JUMP_BACKWARD_IF_TRUE 21 -> 3\n"
            "14 LOAD_FAST 1\n"
            "15 LOAD_METHOD 1\n"
            "16 POP_TOP 0\n"
            "17 POP_TOP 0\n"
            "18 JUMP_BACKWARD 36 -> 3\n"
            "19 LOAD_FAST 0\n"
            "20 LOAD_FAST 1\n"
            "21 COMPARE_OP 1\n"
            "22 LOAD_CONST 0\n"
            "23 RETURN_VALUE 0\n");
  // 300 NOPs after the POP_JUMP: every jump over them gets an EXTENDED_ARG
  // (the decoder folds it into raw_arg), which moves later targets by one.
  const std::string padded = listing(table, assemble_sample(table, 300));
  EXPECT_NE(padded.find("6 POP_JUMP_FORWARD_IF_NONE 315 -> 312\n"), std::string::npos)
      << padded;
  EXPECT_NE(padded.find("313 POP_JUMP_BACKWARD_IF_TRUE 324 -> 3\n"), std::string::npos)
      << padded;
  EXPECT_NE(padded.find("3 FOR_ITER 338 -> 319\n"), std::string::npos) << padded;
}

TEST(ForeignTableTest, Python312Encoding) {
  const OpcodeTable& table = opcode_table(12);
  // The backward POP_JUMP_IF_TRUE becomes POP_JUMP_IF_FALSE over a
  // JUMP_BACKWARD; FOR_ITER exits through an END_FOR trampoline after the
  // code; LOAD_ATTR's low bit makes the method load; COMPARE_OP carries the
  // mask; None is returned by RETURN_CONST.
  EXPECT_EQ(listing(table, assemble_sample(table, 0)),
            "0 RESUME 0\n"
            "1 LOAD_FAST 0\n"
            "2 GET_ITER 0\n"
            "3 FOR_ITER 36 -> 23\n"
            "4 STORE_FAST 1\n"
            "5 LOAD_FAST 1\n"
            "6 POP_JUMP_IF_NONE 11 -> 11\n"
            "7 LOAD_GLOBAL 1\n"
            "8 LOAD_FAST 1\n"
            "9 CALL 1\n"
            "10 POP_TOP 0\n"
            "11 LOAD_FAST 1\n"
            "12 POP_JUMP_IF_FALSE 1 -> 14\n"
            "13 JUMP_BACKWARD 19 -> 3\n"
            "14 LOAD_FAST 1\n"
            "15 LOAD_ATTR 3\n"
            "16 POP_TOP 0\n"
            "17 POP_TOP 0\n"
            "18 JUMP_BACKWARD 33 -> 3\n"
            "19 LOAD_FAST 0\n"
            "20 LOAD_FAST 1\n"
            "21 COMPARE_OP 26\n"
            "22 RETURN_CONST 0\n"
            "23 END_FOR 0\n"
            "24 JUMP_BACKWARD_NO_INTERRUPT 7 -> 19\n");
  const std::string padded = listing(table, assemble_sample(table, 300));
  EXPECT_NE(padded.find("6 POP_JUMP_IF_NONE 311 -> 311\n"), std::string::npos) << padded;
  EXPECT_NE(padded.find("312 POP_JUMP_IF_FALSE 2 -> 314\n"), std::string::npos) << padded;
  EXPECT_NE(padded.find("313 JUMP_BACKWARD 322 -> 3\n"), std::string::npos) << padded;
}

TEST(ForeignTableTest, TraitsResolveOnEveryVersion) {
  for (int minor : {11, 12}) {
    const AssemblyTraits& t = assembly_traits(opcode_table(minor));
    EXPECT_GE(t.call, 0);
    EXPECT_EQ(t.precall >= 0, minor == 11);
    EXPECT_EQ(t.load_method >= 0, minor == 11);
    EXPECT_EQ(t.return_const >= 0, minor == 12);
    EXPECT_EQ(t.end_for >= 0, minor == 12);
    EXPECT_EQ(t.pop_jump_backward[0] >= 0, minor == 11);
    EXPECT_EQ(t.compare_arg(Py_GE), minor == 11 ? Py_GE : (Py_GE << 4) | 12);
  }
}

}  // namespace
}  // namespace kiln::cpython
