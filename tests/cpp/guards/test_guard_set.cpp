// Tests of guards/guard_set.h: every guard kind holds on the values it was
// made from and fails on a changed one; check_verbose() explains failures;
// check() leaves no Python error and no leaked references.
#include <Python.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "guards/guard_set.h"
#include "runtime/aten_bridge.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::guards {
namespace {

using test::eval;
using test::PyRef;
using ::testing::HasSubstr;

graph::TensorMeta meta_of(const PyRef& tensor) {
  graph::TensorMeta meta;
  runtime::read_tensor_meta(tensor.get(), &meta);
  return meta;
}

// Runs check() with `locals` as the frame's fast locals (and `globals`, when
// given); fails the test if a Python error is left set.
bool check_locals(const GuardSet& guards, std::vector<PyObject*> locals,
                  PyObject* globals = nullptr) {
  FrameView frame{.localsplus = locals.data(), .globals = globals};
  SourceValues values;
  const bool ok = guards.check(frame, values);
  EXPECT_FALSE(PyErr_Occurred()) << "check() left " << test::take_error();
  return ok;
}

std::string verbose_locals(const GuardSet& guards, std::vector<PyObject*> locals,
                           PyObject* globals = nullptr) {
  FrameView frame{.localsplus = locals.data(), .globals = globals};
  std::string text = guards.check_verbose(frame);
  EXPECT_FALSE(PyErr_Occurred()) << "check_verbose() left " << test::take_error();
  return text;
}

// A guard set over one local x with a TensorMatch on `traced`.
struct TensorGuard {
  explicit TensorGuard(const PyRef& traced) {
    guards.add_tensor_match(guards.sources().local(0, "x"), meta_of(traced));
  }
  GuardSet guards;
};

TEST(TensorMatch, HoldsOnTheTracedTensorAndAnEqualOne) {
  PyRef x = eval("torch.ones(2, 3)");
  TensorGuard g(x);
  EXPECT_TRUE(check_locals(g.guards, {x.get()}));
  PyRef other = eval("torch.zeros(2, 3)");  // values do not matter
  EXPECT_TRUE(check_locals(g.guards, {other.get()}));
  EXPECT_EQ(verbose_locals(g.guards, {other.get()}), "");
}

TEST(TensorMatch, FailsOnDtype) {
  PyRef x = eval("torch.ones(2, 3)");
  TensorGuard g(x);
  PyRef changed = eval("torch.ones(2, 3, dtype=torch.float64)");
  EXPECT_FALSE(check_locals(g.guards, {changed.get()}));
  const std::string why = verbose_locals(g.guards, {changed.get()});
  EXPECT_THAT(why, HasSubstr("L['x']"));
  EXPECT_THAT(why, HasSubstr("dtype float64 != expected float32"));
}

TEST(TensorMatch, FailsOnSizes) {
  PyRef x = eval("torch.ones(2, 3)");
  TensorGuard g(x);
  PyRef changed = eval("torch.ones(2, 4)");
  EXPECT_FALSE(check_locals(g.guards, {changed.get()}));
  const std::string why = verbose_locals(g.guards, {changed.get()});
  EXPECT_THAT(why, HasSubstr("L['x']"));
  EXPECT_THAT(why, HasSubstr("sizes"));
  EXPECT_EQ(why, "L['x']: sizes (2, 4) != expected (2, 3)");
}

TEST(TensorMatch, FailsOnStridesOfATransposedTensor) {
  PyRef x = eval("torch.ones(3, 3)");
  TensorGuard g(x);
  PyRef transposed = eval("torch.ones(3, 3).t()");
  EXPECT_FALSE(check_locals(g.guards, {transposed.get()}));
  EXPECT_EQ(verbose_locals(g.guards, {transposed.get()}),
            "L['x']: strides (1, 3) != expected (3, 1)");
}

TEST(TensorMatch, FailsOnRequiresGrad) {
  PyRef x = eval("torch.ones(2)");
  TensorGuard g(x);
  PyRef grad = eval("torch.ones(2).requires_grad_()");
  EXPECT_FALSE(check_locals(g.guards, {grad.get()}));
  EXPECT_EQ(verbose_locals(g.guards, {grad.get()}), "L['x']: requires_grad True != expected False");
  // And the other way round.
  TensorGuard needs_grad(grad);
  EXPECT_TRUE(check_locals(needs_grad.guards, {grad.get()}));
  EXPECT_FALSE(check_locals(needs_grad.guards, {x.get()}));
}

TEST(TensorMatch, FailsOnANonTensor) {
  PyRef x = eval("torch.ones(2)");
  TensorGuard g(x);
  PyRef not_tensor = eval("[1.0, 1.0]");
  EXPECT_FALSE(check_locals(g.guards, {not_tensor.get()}));
  EXPECT_EQ(verbose_locals(g.guards, {not_tensor.get()}), "L['x'] is a list, expected a tensor");
}

TEST(TensorMatch, AcceptsATensorSubclassWithTheSameMeta) {
  // The guard is on metadata; the exact type is a TypeMatch's business.
  PyRef x = eval("torch.ones(2)");
  TensorGuard g(x);
  PyRef parameter = eval("torch.nn.Parameter(torch.ones(2), requires_grad=False)");
  EXPECT_TRUE(check_locals(g.guards, {parameter.get()}));
}

TEST(TypeMatch, ExactTypeOnly) {
  PyRef globals = test::exec_module(
      "class Base: pass\n"
      "class Derived(Base): pass\n");
  PyRef base_type = test::item(globals, "Base");
  PyRef traced = PyRef::steal(PyObject_CallNoArgs(base_type.get()));
  GuardSet guards;
  guards.add_type_match(guards.sources().local(0, "m"), base_type.get());
  PyRef another = PyRef::steal(PyObject_CallNoArgs(base_type.get()));
  PyRef derived = PyRef::steal(PyObject_CallNoArgs(test::item(globals, "Derived").get()));
  PyRef number = eval("3");
  EXPECT_TRUE(check_locals(guards, {traced.get()}));
  EXPECT_TRUE(check_locals(guards, {another.get()}));
  EXPECT_FALSE(check_locals(guards, {derived.get()}));
  EXPECT_FALSE(check_locals(guards, {number.get()}));
  EXPECT_EQ(verbose_locals(guards, {derived.get()}), "L['m'] has type Derived, expected Base");
  EXPECT_EQ(verbose_locals(guards, {number.get()}), "L['m'] has type int, expected Base");
}

TEST(IdMatch, SameObjectOnly) {
  PyRef traced = eval("[1, 2]");
  PyRef equal = eval("[1, 2]");
  GuardSet guards;
  guards.add_id_match(guards.sources().local(0, "obj"), traced.get());
  EXPECT_TRUE(check_locals(guards, {traced.get()}));
  EXPECT_FALSE(check_locals(guards, {equal.get()}));
  EXPECT_EQ(verbose_locals(guards, {equal.get()}),
            "L['obj'] is a different object than when traced");
}

TEST(IdMatch, KeepsTheObjectAlive) {
  PyRef traced = eval("object()");
  const Py_ssize_t before = Py_REFCNT(traced.get());
  {
    GuardSet guards;
    guards.add_id_match(guards.sources().local(0, "obj"), traced.get());
    EXPECT_EQ(Py_REFCNT(traced.get()), before + 1);
  }
  EXPECT_EQ(Py_REFCNT(traced.get()), before);
}

TEST(IdMatch, OnAGlobal) {
  PyRef globals = eval("{'torch': torch}");
  PyRef other_globals = eval("{'torch': operator}");
  GuardSet guards;
  guards.add_id_match(guards.sources().global(test::py_str("torch").get()), eval("torch").get());
  EXPECT_TRUE(check_locals(guards, {}, globals.get()));
  EXPECT_FALSE(check_locals(guards, {}, other_globals.get()));
  EXPECT_EQ(verbose_locals(guards, {}, other_globals.get()),
            "G['torch'] is a different object than when traced");
}

TEST(ConstantMatch, IntAgainstEqualIntFloatAndBool) {
  // 1000 is outside CPython's small-int cache: these are distinct objects.
  PyRef traced = PyRef::steal(PyLong_FromLong(1000));
  PyRef equal = PyRef::steal(PyLong_FromLong(1000));
  ASSERT_NE(traced.get(), equal.get());
  GuardSet guards;
  guards.add_constant_match(guards.sources().local(0, "n"), traced.get());
  EXPECT_TRUE(check_locals(guards, {traced.get()}));
  EXPECT_TRUE(check_locals(guards, {equal.get()}));
  PyRef other = PyRef::steal(PyLong_FromLong(1001));
  EXPECT_FALSE(check_locals(guards, {other.get()}));
  EXPECT_EQ(verbose_locals(guards, {other.get()}), "L['n'] == 1001, expected 1000");
  // 1000.0 == 1000 in Python, but a float would trace differently.
  PyRef as_float = eval("1000.0");
  EXPECT_FALSE(check_locals(guards, {as_float.get()}));
  EXPECT_EQ(verbose_locals(guards, {as_float.get()}), "L['n'] == 1000.0, expected 1000");
}

TEST(ConstantMatch, BoolIsNotInt) {
  GuardSet one;
  one.add_constant_match(one.sources().local(0, "n"), test::py_int(1).get());
  EXPECT_TRUE(check_locals(one, {test::py_int(1).get()}));
  EXPECT_FALSE(check_locals(one, {Py_True}));
  EXPECT_EQ(verbose_locals(one, {Py_True}), "L['n'] == True, expected 1");

  GuardSet truth;
  truth.add_constant_match(truth.sources().local(0, "flag"), Py_True);
  EXPECT_TRUE(check_locals(truth, {Py_True}));
  EXPECT_FALSE(check_locals(truth, {Py_False}));
  EXPECT_FALSE(check_locals(truth, {test::py_int(1).get()}));
}

TEST(ConstantMatch, FloatsCompareBitwise) {
  // 0.0 == -0.0, but x * 0.0 and x * -0.0 differ in the sign of zeros.
  GuardSet zero;
  zero.add_constant_match(zero.sources().local(0, "n"), eval("0.0").get());
  EXPECT_TRUE(check_locals(zero, {eval("0.0").get()}));
  EXPECT_FALSE(check_locals(zero, {eval("-0.0").get()}));
  EXPECT_EQ(verbose_locals(zero, {eval("-0.0").get()}), "L['n'] == -0.0, expected 0.0");
  // NaN != NaN, yet a graph traced with a NaN is right for any NaN object.
  GuardSet nan;
  nan.add_constant_match(nan.sources().local(0, "n"), eval("float('nan')").get());
  PyRef another_nan = eval("float('nan')");
  EXPECT_TRUE(check_locals(nan, {another_nan.get()}));
  EXPECT_FALSE(check_locals(nan, {eval("1.5").get()}));
}

TEST(ConstantMatch, NoneStringsAndDtypes) {
  GuardSet guards;
  SourceTable& s = guards.sources();
  guards.add_constant_match(s.local(0, "mode"), test::py_str("sum").get());
  guards.add_constant_match(s.local(1, "bias"), Py_None);
  guards.add_constant_match(s.local(2, "dtype"), eval("torch.float32").get());
  PyRef sum = PyRef::steal(PyUnicode_FromStringAndSize("summary", 3));  // equal, not identical
  EXPECT_TRUE(check_locals(guards, {sum.get(), Py_None, eval("torch.float32").get()}));
  EXPECT_FALSE(
      check_locals(guards, {test::py_str("mean").get(), Py_None, eval("torch.float32").get()}));
  EXPECT_FALSE(check_locals(guards, {sum.get(), Py_False, eval("torch.float32").get()}));
  EXPECT_FALSE(check_locals(guards, {sum.get(), Py_None, eval("torch.float16").get()}));
  EXPECT_EQ(verbose_locals(guards, {sum.get(), Py_None, eval("torch.float16").get()}),
            "L['dtype'] == torch.float16, expected torch.float32");
}

TEST(ConstantMatch, ComparisonThatRaisesFailsWithoutAnError) {
  PyRef globals = test::exec_module(
      "class Touchy:\n"
      "    def __eq__(self, other):\n"
      "        raise ValueError('no comparing')\n"
      "    __hash__ = object.__hash__\n"
      "    def __repr__(self):\n"
      "        raise ValueError('no repr either')\n"
      "a = Touchy()\n"
      "b = Touchy()\n");
  PyRef a = test::item(globals, "a");
  PyRef b = test::item(globals, "b");
  GuardSet guards;
  guards.add_constant_match(guards.sources().local(0, "c"), a.get());
  EXPECT_TRUE(check_locals(guards, {a.get()}));  // identity short-cuts __eq__
  EXPECT_FALSE(check_locals(guards, {b.get()}));
  EXPECT_EQ(verbose_locals(guards, {b.get()}), "L['c'] == <unprintable>, expected <unprintable>");
  EXPECT_EQ(guards.format(), "ConstantMatch L['c'] <unprintable>\n");
  EXPECT_FALSE(PyErr_Occurred());
}

TEST(LengthMatch, Tuple) {
  PyRef traced = eval("(1, 2)");
  GuardSet guards;
  guards.add_length_match(guards.sources().local(0, "t"), traced.get());
  EXPECT_TRUE(check_locals(guards, {traced.get()}));
  EXPECT_TRUE(check_locals(guards, {eval("('a', 'b')").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("(1, 2, 3)").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("[1, 2]").get()}));
  EXPECT_EQ(verbose_locals(guards, {eval("(1, 2, 3)").get()}),
            "L['t'] has type tuple and length 3, expected tuple of length 2");
  EXPECT_EQ(verbose_locals(guards, {eval("[1, 2]").get()}),
            "L['t'] has type list and length 2, expected tuple of length 2");
}

TEST(LengthMatch, List) {
  PyRef traced = eval("[1, 2, 3]");
  GuardSet guards;
  guards.add_length_match(guards.sources().local(0, "l"), traced.get());
  EXPECT_TRUE(check_locals(guards, {eval("[4, 5, 6]").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("[]").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("(1, 2, 3)").get()}));
  // A list that grew after tracing fails.
  ASSERT_EQ(PyList_Append(traced.get(), Py_None), 0);
  EXPECT_FALSE(check_locals(guards, {traced.get()}));
}

TEST(LengthMatch, Dict) {
  PyRef traced = eval("{'a': 1}");
  GuardSet guards;
  guards.add_length_match(guards.sources().local(0, "d"), traced.get());
  EXPECT_TRUE(check_locals(guards, {eval("{'b': 2}").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("{'a': 1, 'b': 2}").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("{}").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("('a',)").get()}));
  EXPECT_EQ(verbose_locals(guards, {eval("{}").get()}),
            "L['d'] has type dict and length 0, expected dict of length 1");
}

TEST(LengthMatch, TorchSize) {
  PyRef traced = eval("torch.Size([2, 3])");
  GuardSet guards;
  guards.add_length_match(guards.sources().local(0, "s"), traced.get());
  EXPECT_TRUE(check_locals(guards, {eval("torch.Size([7, 8])").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("torch.Size([2, 3, 4])").get()}));
  EXPECT_FALSE(check_locals(guards, {eval("(2, 3)").get()}));  // not exactly torch.Size
}

TEST(GradMode, FollowsTorchNoGrad) {
  GuardSet enabled;
  enabled.add_grad_mode(true);
  GuardSet disabled;
  disabled.add_grad_mode(false);
  {
    test::GradModeScope scope(true);
    ASSERT_TRUE(runtime::grad_mode_enabled());
    EXPECT_TRUE(check_locals(enabled, {}));
    EXPECT_FALSE(check_locals(disabled, {}));
    EXPECT_EQ(verbose_locals(disabled, {}), "grad mode is enabled, expected disabled");
  }
  {
    test::GradModeScope scope(false);
    ASSERT_FALSE(runtime::grad_mode_enabled());
    EXPECT_FALSE(check_locals(enabled, {}));
    EXPECT_TRUE(check_locals(disabled, {}));
    EXPECT_EQ(verbose_locals(enabled, {}), "grad mode is disabled, expected enabled");
  }
}

TEST(DefaultDtype, FollowsTorchSetDefaultDtype) {
  GuardSet guards;
  guards.add_default_dtype(runtime::default_dtype());
  ASSERT_EQ(runtime::default_dtype(), graph::DType::Float32);
  EXPECT_TRUE(check_locals(guards, {}));
  eval("torch.set_default_dtype(torch.float64)");
  EXPECT_EQ(runtime::default_dtype(), graph::DType::Float64);
  EXPECT_FALSE(check_locals(guards, {}));
  EXPECT_EQ(verbose_locals(guards, {}), "the default dtype is float64, expected float32");
  eval("torch.set_default_dtype(torch.float32)");
  EXPECT_TRUE(check_locals(guards, {}));
  EXPECT_EQ(guards.format(), "DefaultDtype float32\n");
}

TEST(Autocast, FollowsTorchAutocastAndItsDtype) {
  GuardSet off;
  off.add_autocast(runtime::autocast_state());
  ASSERT_FALSE(runtime::autocast_state().any());
  EXPECT_TRUE(check_locals(off, {}));
  EXPECT_EQ(off.format(), "Autocast off\n");
  eval("globals().__setitem__('_ac', torch.autocast('cpu', dtype=torch.bfloat16))");
  eval("_ac.__enter__()");
  const runtime::AutocastState on = runtime::autocast_state();
  EXPECT_TRUE(on.cpu && !on.cuda && on.cpu_dtype == graph::DType::BFloat16);
  EXPECT_FALSE(check_locals(off, {}));
  EXPECT_EQ(verbose_locals(off, {}), "autocast is cpu bfloat16, expected off");
  GuardSet bf16;
  bf16.add_autocast(on);
  EXPECT_TRUE(check_locals(bf16, {}));
  {
    // Prim graphs run with autocast off, and it comes back after.
    const runtime::AutocastOff autocast_off;
    EXPECT_FALSE(runtime::autocast_state().any());
    EXPECT_TRUE(check_locals(off, {}));
  }
  EXPECT_TRUE(runtime::autocast_state() == on);
  eval("_ac.__exit__(None, None, None)");
  EXPECT_FALSE(check_locals(bf16, {}));
  EXPECT_EQ(verbose_locals(bf16, {}), "autocast is off, expected cpu bfloat16");
}

TEST(GradMode, IsCheckedBeforeAnySource) {
  PyRef x = eval("torch.ones(2)");
  GuardSet guards;
  guards.add_tensor_match(guards.sources().local(0, "x"), meta_of(x));
  guards.add_grad_mode(true);
  test::GradModeScope scope(false);
  // Both the tensor and the grad mode are wrong; grad mode is reported.
  EXPECT_EQ(verbose_locals(guards, {eval("[]").get()}), "grad mode is disabled, expected enabled");
}

TEST(GuardSet, MissingSourceFails) {
  GuardSet guards;
  const int x = guards.sources().local(0, "x");
  guards.add_type_match(x, reinterpret_cast<PyObject*>(&PyLong_Type));
  EXPECT_FALSE(check_locals(guards, {nullptr}));
  EXPECT_EQ(verbose_locals(guards, {nullptr}), "L['x'] no longer exists");
}

TEST(GuardSet, UnguardedSourceThatStopsResolvingFails) {
  // A graph input may hang off a source with no guard of its own.
  PyRef self = eval("types.SimpleNamespace(w=torch.ones(1))");
  GuardSet guards;
  const int l_self = guards.sources().local(0, "self");
  guards.sources().attr(l_self, test::py_str("w").get());
  EXPECT_TRUE(check_locals(guards, {self.get()}));
  PyRef without_w = eval("types.SimpleNamespace(v=1)");
  EXPECT_FALSE(check_locals(guards, {without_w.get()}));
  EXPECT_EQ(verbose_locals(guards, {without_w.get()}), "L['self'].w no longer exists");
}

TEST(GuardSet, MissingKeyFailsThroughTheGuardOnIt) {
  PyRef d = eval("{'k': 1000}");
  GuardSet guards;
  const int l_d = guards.sources().local(0, "d");
  guards.add_length_match(l_d, d.get());
  const int k = guards.sources().dict_item(l_d, test::py_str("k").get());
  guards.add_constant_match(k, PyDict_GetItemString(d.get(), "k"));
  EXPECT_TRUE(check_locals(guards, {d.get()}));
  PyRef renamed = eval("{'j': 1000}");  // same length, other key
  EXPECT_FALSE(check_locals(guards, {renamed.get()}));
  EXPECT_EQ(verbose_locals(guards, {renamed.get()}), "L['d']['k'] no longer exists");
}

TEST(GuardSet, CheckFillsValuesForGraphInputs) {
  PyRef x = eval("torch.ones(2)");
  PyRef self = eval("types.SimpleNamespace(w=torch.ones(3))");
  GuardSet guards;
  const int l_x = guards.sources().local(0, "x");
  const int w = guards.sources().attr(guards.sources().local(1, "self"), test::py_str("w").get());
  guards.add_tensor_match(l_x, meta_of(x));
  std::vector<PyObject*> locals = {x.get(), self.get()};
  FrameView frame{.localsplus = locals.data()};
  SourceValues values;
  ASSERT_TRUE(guards.check(frame, values));
  EXPECT_EQ(values.get(l_x), x.get());
  PyRef self_w = PyRef::steal(PyObject_GetAttrString(self.get(), "w"));
  EXPECT_EQ(values.get(w), self_w.get());
}

TEST(GuardSet, AddingTheSameGuardTwiceDoesNothing) {
  PyRef x = eval("torch.ones(2)");
  GuardSet guards;
  const int l_x = guards.sources().local(0, "x");
  guards.add_tensor_match(l_x, meta_of(x));
  guards.add_tensor_match(l_x, meta_of(eval("torch.ones(5)")));
  guards.add_grad_mode(true);
  guards.add_grad_mode(false);
  EXPECT_EQ(guards.guard_count(), 2);
  // The first one wins.
  EXPECT_TRUE(check_locals(guards, {x.get()}));
  // Different kinds on one source are different guards.
  guards.add_type_match(l_x, reinterpret_cast<PyObject*>(Py_TYPE(x.get())));
  EXPECT_EQ(guards.guard_count(), 3);
}

TEST(GuardSet, FormatListsGuardsInAStableOrder) {
  PyRef x = eval("torch.ones(3, 2).t().requires_grad_()");
  PyRef ns = eval("types.SimpleNamespace()");
  GuardSet guards;
  SourceTable& s = guards.sources();
  guards.add_grad_mode(true);
  guards.add_tensor_match(s.local(0, "x"), meta_of(x));
  guards.add_type_match(s.local(1, "cfg"), reinterpret_cast<PyObject*>(Py_TYPE(ns.get())));
  guards.add_constant_match(s.local(2, "n"), test::py_int(3).get());
  guards.add_length_match(s.local(3, "t"), eval("(1, 2)").get());
  guards.add_length_match(s.local(4, "d"), eval("{'a': 1}").get());
  guards.add_id_match(s.global(test::py_str("torch").get()), eval("torch").get());
  guards.add_constant_match(s.local(5, "mode"), test::py_str("sum").get());
  const std::string expected =
      "GradMode enabled\n"
      "TensorMatch L['x'] f32[2, 3] stride=(1, 2) grad\n"
      "TypeMatch L['cfg'] types.SimpleNamespace\n"
      "ConstantMatch L['n'] 3\n"
      "LengthMatch L['t'] tuple len=2\n"
      "LengthMatch L['d'] dict len=1\n"
      "IdMatch G['torch'] <module>\n"
      "ConstantMatch L['mode'] 'sum'\n";
  EXPECT_EQ(guards.format(), expected);
  // Checking does not reorder anything.
  std::vector<PyObject*> locals(6, nullptr);
  FrameView frame{.localsplus = locals.data()};
  SourceValues values;
  EXPECT_FALSE(guards.check(frame, values));
  EXPECT_EQ(guards.format(), expected);
}

TEST(GuardSet, DictKeysHoldTheKeysInIterationOrder) {
  PyRef plain = eval("{'a': 1, 'b': 2}");
  PyRef ordered = eval("__import__('collections').OrderedDict(a=1, b=2)");
  GuardSet guards;
  SourceTable& s = guards.sources();
  std::vector<PyRef> keys{PyRef::steal(PyUnicode_FromString("a")), PyRef::steal(PyUnicode_FromString("b"))};
  guards.add_dict_keys(s.local(0, "d"), plain.get(), keys);
  guards.add_dict_keys(s.local(1, "od"), ordered.get(), keys);
  EXPECT_EQ(guards.format(),
            "DictKeys L['d'] dict keys=('a', 'b')\n"
            "DictKeys L['od'] collections.OrderedDict keys=('a', 'b')\n");
  auto holds = [&](PyObject* d, PyObject* od) {
    std::vector<PyObject*> locals{d, od};
    FrameView frame{.localsplus = locals.data()};
    SourceValues values;
    return guards.check(frame, values);
  };
  EXPECT_TRUE(holds(plain.get(), ordered.get()));
  PyRef reordered = eval("{'b': 2, 'a': 1}");
  EXPECT_FALSE(holds(reordered.get(), ordered.get()));
  // move_to_end changes an OrderedDict's order, not its dict storage's.
  PyRef moved = eval("(lambda o: (o.move_to_end('a'), o)[1])(__import__('collections').OrderedDict(a=1, b=2))");
  EXPECT_FALSE(holds(plain.get(), moved.get()));
  PyRef as_plain = eval("{'a': 1, 'b': 2}");
  EXPECT_FALSE(holds(plain.get(), as_plain.get()));  // a dict where an OrderedDict was
  std::vector<PyObject*> locals{plain.get(), moved.get()};
  FrameView frame{.localsplus = locals.data()};
  EXPECT_NE(guards.check_verbose(frame).find("with keys ('b', 'a')"), std::string::npos);
}

TEST(GuardSet, CheckLeavesReferenceCountsUnchanged) {
  PyRef x = eval("torch.ones(2, 3)");
  PyRef n = PyRef::steal(PyLong_FromLong(123456));
  PyRef t = eval("(torch.ones(1), 'a')");
  PyRef d = eval("{'k': torch.ones(2)}");
  PyRef globals = eval("{'torch': torch}");
  PyRef builtins = eval("{}");
  GuardSet guards;
  SourceTable& s = guards.sources();
  guards.add_grad_mode(runtime::grad_mode_enabled());
  guards.add_tensor_match(s.local(0, "x"), meta_of(x));
  guards.add_constant_match(s.local(1, "n"), n.get());
  const int l_t = s.local(2, "t");
  guards.add_length_match(l_t, t.get());
  guards.add_tensor_match(s.index(l_t, 0), meta_of(PyRef::borrow(PyTuple_GET_ITEM(t.get(), 0))));
  const int l_d = s.local(3, "d");
  guards.add_length_match(l_d, d.get());
  guards.add_tensor_match(s.dict_item(l_d, test::py_str("k").get()),
                          meta_of(PyRef::borrow(PyDict_GetItemString(d.get(), "k"))));
  guards.add_id_match(s.global(test::py_str("torch").get()), eval("torch").get());

  PyObject* watched[] = {x.get(),
                         n.get(),
                         t.get(),
                         d.get(),
                         PyTuple_GET_ITEM(t.get(), 0),
                         PyDict_GetItemString(d.get(), "k")};
  std::vector<Py_ssize_t> before;
  for (PyObject* obj : watched) before.push_back(Py_REFCNT(obj));

  std::vector<PyObject*> locals = {x.get(), n.get(), t.get(), d.get()};
  FrameView frame{
      .localsplus = locals.data(), .globals = globals.get(), .builtins = builtins.get()};
  {
    SourceValues values;
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(guards.check(frame, values)) << "iteration " << i;
    // While `values` lives it holds one reference per fetched value.
    EXPECT_EQ(Py_REFCNT(x.get()), before[0] + 1);
    // A failing check releases as well (another local n).
    PyRef other_n = PyRef::steal(PyLong_FromLong(654321));
    locals[1] = other_n.get();
    for (int i = 0; i < 1000; ++i) ASSERT_FALSE(guards.check(frame, values));
    locals[1] = n.get();
    for (int i = 0; i < 100; ++i) ASSERT_EQ(guards.check_verbose(frame), "");
  }
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(Py_REFCNT(watched[i]), before[i]) << "object " << i;
  }
  EXPECT_FALSE(PyErr_Occurred());
}

}  // namespace
}  // namespace kiln::guards

namespace kiln::guards {
namespace {

// A guard set over locals x (and y) whose dim 0 is dynamic.
struct DynamicGuard {
  explicit DynamicGuard(const PyRef& traced, int locals = 1) {
    for (int i = 0; i < locals; ++i) {
      guards.add_tensor_match(guards.sources().local(i, i == 0 ? "x" : "y"), meta_of(traced),
                              {static_cast<int8_t>(i), -1});
    }
  }
  GuardSet guards;
};

TEST(DynamicTensorMatch, AcceptsAnySizeOfAtLeastTwoInTheDynamicDim) {
  PyRef traced = eval("torch.ones(4, 3)");
  DynamicGuard g(traced);
  for (const char* expr : {"torch.ones(2, 3)", "torch.ones(4, 3)", "torch.ones(1000, 3)"}) {
    PyRef x = eval(expr);
    EXPECT_TRUE(check_locals(g.guards, {x.get()})) << expr;
  }
  PyRef one = eval("torch.ones(1, 3)");
  EXPECT_FALSE(check_locals(g.guards, {one.get()}));
  EXPECT_THAT(verbose_locals(g.guards, {one.get()}), HasSubstr("traced for sizes >= 2"));
}

TEST(DynamicTensorMatch, SizeOneAdmittedOnlyWithEverySymbolOne) {
  PyRef traced = eval("torch.ones(4, 3)");
  DynamicGuard g(traced, 2);
  g.guards.admit_size_one();
  PyRef one = eval("torch.ones(1, 3)");
  PyRef five = eval("torch.ones(5, 3)");
  EXPECT_TRUE(check_locals(g.guards, {one.get(), one.get()}));
  EXPECT_TRUE(check_locals(g.guards, {five.get(), five.get()}));
  // (1, 5): a combination the trace was not checked at.
  EXPECT_FALSE(check_locals(g.guards, {one.get(), five.get()}));
  EXPECT_THAT(verbose_locals(g.guards, {one.get(), five.get()}), HasSubstr("s0=1, s1=5) mix 1 with other sizes"));
  PyRef empty = eval("torch.ones(0, 3)");
  EXPECT_FALSE(check_locals(g.guards, {empty.get(), empty.get()}));
  EXPECT_THAT(verbose_locals(g.guards, {empty.get(), empty.get()}), HasSubstr("traced for sizes >= 1"));
  EXPECT_THAT(g.guards.format(), HasSubstr("(dynamic dims >= 2 or all 1, contiguous)"));
}

TEST(LastFailedGuardFirst, ARepeatedMissSkipsTheGuardsBeforeIt) {
  // Note [Last failed guard first]: x.a counts its reads.
  PyRef module = test::exec_module(
      "class Counted:\n"
      "    reads = 0\n"
      "    @property\n"
      "    def a(self):\n"
      "        Counted.reads += 1\n"
      "        return 1\n"
      "x = Counted()\n");
  PyRef x = test::item(module, "x");
  PyRef cls = test::item(module, "Counted");
  PyRef traced = eval("torch.ones(2, 3)");
  GuardSet guards;
  PyRef name = PyRef::steal(PyUnicode_FromString("a"));
  guards.add_constant_match(guards.sources().attr(guards.sources().local(0, "x"), name.get()), test::py_int(1).get());
  guards.add_tensor_match(guards.sources().local(1, "y"), meta_of(traced));
  auto reads = [&] { return PyLong_AsLong(PyRef::steal(PyObject_GetAttrString(cls.get(), "reads")).get()); };
  PyRef other = eval("torch.ones(4, 3)");
  EXPECT_FALSE(check_locals(guards, {x.get(), other.get()}));
  EXPECT_EQ(reads(), 1);
  // The tensor guard failed: checked first, it fails before x.a is read.
  EXPECT_FALSE(check_locals(guards, {x.get(), other.get()}));
  EXPECT_EQ(reads(), 1);
  // Once it holds, every guard is checked as always.
  EXPECT_TRUE(check_locals(guards, {x.get(), traced.get()}));
  EXPECT_EQ(reads(), 2);
  EXPECT_TRUE(check_locals(guards, {x.get(), traced.get()}));
  EXPECT_EQ(reads(), 3);
}

// Note [Objects guarded by type]: one Distinct guard over a group keeps its
// objects pairwise different, checked once every one is fetched; a repeated
// failure (Note [Last failed guard first]) is found by the walk again.
TEST(Distinct, HoldsForDifferentObjectsAndFailsWhenTwoAreOne) {
  PyRef a = eval("object()"), b = eval("object()"), c = eval("object()");
  GuardSet guards;
  std::vector<int> sources;
  for (int i = 0; i < 3; ++i) {
    const int id = guards.sources().local(i, std::string(1, static_cast<char>('a' + i)));
    guards.add_type_match(id, reinterpret_cast<PyObject*>(Py_TYPE(a.get())));
    sources.push_back(id);
  }
  guards.add_distinct(sources);
  EXPECT_TRUE(check_locals(guards, {a.get(), b.get(), c.get()}));
  EXPECT_FALSE(check_locals(guards, {a.get(), b.get(), a.get()}));
  EXPECT_FALSE(check_locals(guards, {a.get(), b.get(), a.get()}));
  EXPECT_FALSE(check_locals(guards, {b.get(), b.get(), c.get()}));
  EXPECT_TRUE(check_locals(guards, {c.get(), a.get(), b.get()}));
  EXPECT_THAT(guards.format(), HasSubstr("Distinct"));
}

// One object through two sources (Note [Objects guarded by type]): the
// later source must hold the earlier one's object, whichever it is.
TEST(SameObject, HoldsForOneObjectUnderBothNames) {
  PyRef a = eval("object()"), b = eval("object()");
  GuardSet guards;
  const int first = guards.sources().local(0, "a");
  const int second = guards.sources().local(1, "b");
  guards.add_type_match(first, reinterpret_cast<PyObject*>(Py_TYPE(a.get())));
  guards.add_same_object(second, first);
  EXPECT_TRUE(check_locals(guards, {a.get(), a.get()}));
  EXPECT_TRUE(check_locals(guards, {b.get(), b.get()}));
  EXPECT_FALSE(check_locals(guards, {a.get(), b.get()}));
  EXPECT_FALSE(check_locals(guards, {a.get(), b.get()}));  // the repeated failure, found by the walk
  EXPECT_THAT(verbose_locals(guards, {a.get(), b.get()}), HasSubstr("L['b'] is not L['a']"));
  EXPECT_THAT(guards.format(), HasSubstr("SameObject"));
}

TEST(DynamicTensorMatch, StaticDimsDtypeAndLayoutStillChecked) {
  PyRef traced = eval("torch.ones(4, 3)");
  DynamicGuard g(traced);
  PyRef wide = eval("torch.ones(4, 5)");
  EXPECT_FALSE(check_locals(g.guards, {wide.get()}));
  EXPECT_THAT(verbose_locals(g.guards, {wide.get()}), HasSubstr("size of dim 1 is 5, expected 3"));
  PyRef f64 = eval("torch.ones(6, 3, dtype=torch.float64)");
  EXPECT_FALSE(check_locals(g.guards, {f64.get()}));
  PyRef strided = eval("torch.ones(3, 6).t()");
  EXPECT_FALSE(check_locals(g.guards, {strided.get()}));
  EXPECT_THAT(verbose_locals(g.guards, {strided.get()}), HasSubstr("not contiguous"));
  PyRef sliced = eval("torch.ones(12, 3)[::2]");
  EXPECT_FALSE(check_locals(g.guards, {sliced.get()}));
  EXPECT_THAT(verbose_locals(g.guards, {sliced.get()}), HasSubstr("not contiguous"));
}

TEST(DynamicTensorMatch, SeparateSymbolsMayDiffer) {
  PyRef traced = eval("torch.ones(4, 3)");
  DynamicGuard g(traced, 2);
  PyRef a = eval("torch.ones(5, 3)");
  PyRef b = eval("torch.ones(9, 3)");
  EXPECT_TRUE(check_locals(g.guards, {a.get(), b.get()}));
}

TEST(DynamicTensorMatch, FormatNamesTheSymbols) {
  PyRef traced = eval("torch.ones(4, 3)");
  DynamicGuard g(traced);
  EXPECT_THAT(g.guards.format(), HasSubstr("TensorMatch L['x'] f32[s0, 3] (dynamic dims >= 2, contiguous)"));
}

TEST(SizeChanges, ListsDimsWhoseSizeAloneChanged) {
  PyRef traced = eval("torch.ones(4, 3)");
  TensorGuard g(traced);
  std::vector<PyObject*> locals;
  PyRef resized = eval("torch.ones(8, 3)");
  locals = {resized.get()};
  FrameView frame{.localsplus = locals.data()};
  auto changes = g.guards.size_changes(frame);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].source, "L['x']");
  EXPECT_EQ(changes[0].dim, 0);
  EXPECT_EQ(changes[0].traced, 4);
  EXPECT_EQ(changes[0].now, 8);
  PyRef other_dtype = eval("torch.ones(8, 3, dtype=torch.int64)");
  locals = {other_dtype.get()};
  FrameView frame2{.localsplus = locals.data()};
  EXPECT_TRUE(g.guards.size_changes(frame2).empty());
  EXPECT_FALSE(PyErr_Occurred());
}

// Note [Dynamic ints]: an int guarded by value whose value alone changed is
// a size change of dim -1; bools, floats and other types are not.
TEST(SizeChanges, ListsIntsWhoseValueAloneChanged) {
  GuardSet guards;
  PyRef four = eval("4");
  guards.add_constant_match(guards.sources().local(0, "n"), four.get());
  PyRef nine = eval("9"), flag = eval("True"), half = eval("2.5");
  std::vector<PyObject*> locals = {nine.get()};
  FrameView frame{.localsplus = locals.data()};
  auto changes = guards.size_changes(frame);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].source, "L['n']");
  EXPECT_EQ(changes[0].dim, -1);
  EXPECT_EQ(changes[0].traced, 4);
  EXPECT_EQ(changes[0].now, 9);
  for (PyObject* other : {flag.get(), half.get()}) {
    locals = {other};
    FrameView frame2{.localsplus = locals.data()};
    EXPECT_TRUE(guards.size_changes(frame2).empty());
  }
  EXPECT_FALSE(PyErr_Occurred());
}

// An IntSymbol binds its symbol like a dynamic dim: the same symbol must
// see the same value, and values below 2 and non-ints miss.
TEST(IntSymbol, BindsASymbolLikeADynamicDim) {
  GuardSet guards;
  guards.add_int_symbol(guards.sources().local(0, "a"), 0);
  guards.add_int_symbol(guards.sources().local(1, "b"), 0);
  PyRef five = eval("5"), six = eval("6"), one = eval("1"), flag = eval("True"), big = eval("2**70");
  EXPECT_TRUE(check_locals(guards, {five.get(), five.get()}));
  EXPECT_TRUE(check_locals(guards, {six.get(), six.get()}));
  EXPECT_FALSE(check_locals(guards, {five.get(), six.get()}));
  EXPECT_THAT(verbose_locals(guards, {five.get(), six.get()}),
              HasSubstr("L['b'] == 6, but s0 is 5 in an earlier input"));
  EXPECT_FALSE(check_locals(guards, {one.get(), one.get()}));
  EXPECT_THAT(verbose_locals(guards, {one.get(), one.get()}), HasSubstr("dynamic int s0 was traced for values >= 2"));
  EXPECT_FALSE(check_locals(guards, {flag.get(), flag.get()}));
  EXPECT_THAT(verbose_locals(guards, {flag.get(), flag.get()}), HasSubstr("L['a'] is a bool, expected an int"));
  EXPECT_FALSE(check_locals(guards, {big.get(), big.get()}));
  EXPECT_THAT(guards.format(), HasSubstr("IntSymbol L['a'] s0 (an int >= 2)"));
  EXPECT_FALSE(PyErr_Occurred());
}

}  // namespace
}  // namespace kiln::guards
