// Tests of guards/source.h: SourceTable interning and text, and fetching each
// kind of source from a FrameView built by hand over real objects.
#include <Python.h>
#include <gtest/gtest.h>

#include <string>

#include "guards/source.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::guards {
namespace {

using test::eval;
using test::py_int;
using test::py_str;
using test::PyRef;

// Fetches every source of `table` in id order, as GuardSet::check does.
void fetch_all(const SourceTable& table, const FrameView& frame, SourceValues& values) {
  values.reset(table.size());
  for (int id = 0; id < table.size(); ++id) values.set(id, fetch_source(table, id, frame, values));
}

// Fetches one source whose bases are already in `values`; returns the value
// (owned) and checks that no Python error was left behind.
PyRef fetch(const SourceTable& table, int id, const FrameView& frame, const SourceValues& values) {
  PyRef value = PyRef::steal(fetch_source(table, id, frame, values));
  EXPECT_FALSE(PyErr_Occurred()) << "fetch of " << table.at(id).text << " left "
                                 << test::take_error();
  return value;
}

TEST(SourceTable, DedupesIdenticalPaths) {
  SourceTable table;
  const int x = table.local(0, "x");
  EXPECT_EQ(table.local(0, "x"), x);
  const int y = table.local(1, "y");
  EXPECT_NE(y, x);

  // Names compare by value, not identity: a separately built equal string
  // interns to the same source.
  PyRef fc = py_str("fc");
  PyRef fc_again = PyRef::steal(PyUnicode_FromStringAndSize("fcX", 2));
  ASSERT_NE(fc.get(), fc_again.get());
  const int x_fc = table.attr(x, fc.get());
  EXPECT_EQ(table.attr(x, fc_again.get()), x_fc);
  // Same name on another base is another path.
  EXPECT_NE(table.attr(y, fc.get()), x_fc);

  PyRef g = py_str("g");
  const int global = table.global(g.get());
  EXPECT_EQ(table.global(py_str("g").get()), global);
  EXPECT_NE(table.global(py_str("h").get()), global);

  EXPECT_EQ(table.index(x, 0), table.index(x, 0));
  EXPECT_NE(table.index(x, 0), table.index(x, 1));

  // Dict keys of different types are different paths even when equal.
  const int key_int = table.dict_item(x, py_int(1).get());
  const int key_float = table.dict_item(x, PyRef::steal(PyFloat_FromDouble(1.0)).get());
  const int key_str = table.dict_item(x, py_str("1").get());
  EXPECT_EQ(table.dict_item(x, py_int(1).get()), key_int);
  EXPECT_NE(key_float, key_int);
  EXPECT_NE(key_str, key_int);

  EXPECT_EQ(table.closure_cell(0, "c"), table.closure_cell(0, "c"));
  EXPECT_NE(table.closure_cell(1, "d"), table.closure_cell(0, "c"));

  // Every distinct call above made exactly one source.
  EXPECT_EQ(table.size(), 13);
}

TEST(SourceTable, IdsArePositionsAndBasesComeFirst) {
  SourceTable table;
  PyRef layers = py_str("layers");
  PyRef key = py_str("k");
  const int self = table.local(0, "self");
  const int chain = table.index(table.attr(self, layers.get()), 2);
  const int item = table.dict_item(chain, key.get());
  for (int id = 0; id < table.size(); ++id) {
    const Source& source = table.at(id);
    EXPECT_EQ(source.id, id);
    EXPECT_LT(source.base, id) << source.text;
  }
  EXPECT_EQ(table.at(self).base, -1);
  EXPECT_EQ(table.at(chain).base, table.at(chain).id - 1);
  EXPECT_EQ(table.at(item).base, chain);
  EXPECT_EQ(table.at(chain).kind, SourceKind::Index);
  EXPECT_EQ(table.at(chain).index, 2);
}

TEST(SourceTable, TextForms) {
  SourceTable table;
  const int x = table.local(0, "x");
  const int self = table.local(1, "self");
  const int d = table.local(2, "d");
  const int t = table.local(3, "t");
  EXPECT_EQ(table.at(x).text, "L['x']");
  EXPECT_EQ(table.at(table.global(py_str("g").get())).text, "G['g']");
  EXPECT_EQ(table.at(table.attr(self, py_str("fc").get())).text, "L['self'].fc");
  EXPECT_EQ(table.at(table.dict_item(d, py_str("k").get())).text, "L['d']['k']");
  EXPECT_EQ(table.at(table.dict_item(d, py_int(7).get())).text, "L['d'][7]");
  EXPECT_EQ(table.at(table.index(t, 0)).text, "L['t'][0]");
  EXPECT_EQ(table.at(table.closure_cell(0, "scale")).text, "C['scale']");

  const int nested =
      table.index(table.attr(table.attr(self, py_str("layers").get()), py_str("w").get()), 3);
  EXPECT_EQ(table.at(nested).text, "L['self'].layers.w[3]");

  PyRef module_globals = PyRef::steal(PyDict_New());
  PyDict_SetItemString(module_globals.get(), "__name__", py_str("pkg.mod").get());
  EXPECT_EQ(table.at(table.global_in(module_globals.get(), py_str("helper").get())).text,
            "G[pkg.mod]['helper']");
  PyRef anonymous = PyRef::steal(PyDict_New());
  EXPECT_EQ(table.at(table.global_in(anonymous.get(), py_str("helper").get())).text,
            "G[?]['helper']");
}

TEST(SourceTable, GlobalInDistinguishesDicts) {
  SourceTable table;
  PyRef a = PyRef::steal(PyDict_New());
  PyRef b = PyRef::steal(PyDict_New());
  PyRef name = py_str("w");
  const int in_a = table.global_in(a.get(), name.get());
  EXPECT_EQ(table.global_in(a.get(), name.get()), in_a);
  EXPECT_NE(table.global_in(b.get(), name.get()), in_a);
  // A frame global of the same name is a different kind of source.
  EXPECT_NE(table.global(name.get()), in_a);
}

TEST(SourceTable, OwnsItsNamesAndDicts) {
  PyRef name = PyRef::steal(PyUnicode_FromString("some_unique_attribute_name"));
  PyRef dict = PyRef::steal(PyDict_New());
  const Py_ssize_t name_before = Py_REFCNT(name.get());
  const Py_ssize_t dict_before = Py_REFCNT(dict.get());
  {
    SourceTable table;
    const int x = table.local(0, "x");
    table.attr(x, name.get());
    table.attr(x, name.get());  // deduplicated: no second reference
    table.global_in(dict.get(), name.get());
    EXPECT_EQ(Py_REFCNT(name.get()), name_before + 2);
    EXPECT_EQ(Py_REFCNT(dict.get()), dict_before + 1);
  }
  EXPECT_EQ(Py_REFCNT(name.get()), name_before);
  EXPECT_EQ(Py_REFCNT(dict.get()), dict_before);
}

TEST(SourceValues, ResetReleasesHeldReferences) {
  PyRef obj = eval("object()");
  const Py_ssize_t before = Py_REFCNT(obj.get());
  {
    SourceValues values(2);
    EXPECT_EQ(values.get(0), nullptr);
    values.set(1, PyRef(obj).release());
    EXPECT_EQ(values.get(1), obj.get());
    EXPECT_EQ(Py_REFCNT(obj.get()), before + 1);
    values.reset(3);
    EXPECT_EQ(Py_REFCNT(obj.get()), before);
    EXPECT_EQ(values.get(2), nullptr);
    values.set(0, PyRef(obj).release());
  }
  EXPECT_EQ(Py_REFCNT(obj.get()), before);
}

TEST(FetchSource, LocalReturnsANewReference) {
  PyRef x = eval("torch.ones(2)");
  PyRef y = eval("[1, 2]");
  PyObject* locals[] = {x.get(), y.get(), nullptr};
  FrameView frame{.localsplus = locals};
  SourceTable table;
  const int lx = table.local(0, "x");
  const int ly = table.local(1, "y");
  const int unbound = table.local(2, "z");
  SourceValues values(table.size());

  const Py_ssize_t before = Py_REFCNT(x.get());
  {
    PyRef got = fetch(table, lx, frame, values);
    EXPECT_EQ(got.get(), x.get());
    EXPECT_EQ(Py_REFCNT(x.get()), before + 1);
  }
  EXPECT_EQ(Py_REFCNT(x.get()), before);
  EXPECT_EQ(fetch(table, ly, frame, values).get(), y.get());
  // An unbound local (a null slot) does not resolve, without an error.
  EXPECT_EQ(fetch(table, unbound, frame, values).get(), nullptr);
}

TEST(FetchSource, GlobalFallsBackToBuiltins) {
  PyRef globals = eval("{'g': 5, 'shadow': 'global'}");
  PyRef builtins = eval("{'shadow': 'builtin', 'len': len}");
  FrameView frame{.globals = globals.get(), .builtins = builtins.get()};
  SourceTable table;
  const int g = table.global(py_str("g").get());
  const int shadow = table.global(py_str("shadow").get());
  const int len = table.global(py_str("len").get());
  const int missing = table.global(py_str("missing").get());
  SourceValues values(table.size());

  EXPECT_EQ(test::repr_of(fetch(table, g, frame, values).get()), "5");
  EXPECT_EQ(test::repr_of(fetch(table, shadow, frame, values).get()), "'global'");
  EXPECT_EQ(fetch(table, len, frame, values).get(), eval("len").get());
  EXPECT_EQ(fetch(table, missing, frame, values).get(), nullptr);

  // Without builtins only the globals count.
  FrameView no_builtins{.globals = globals.get()};
  EXPECT_EQ(fetch(table, len, no_builtins, values).get(), nullptr);
}

TEST(FetchSource, GlobalInReadsItsOwnDict) {
  PyRef frame_globals = eval("{'w': 'frame'}");
  PyRef module_globals = eval("{'__name__': 'other', 'w': 'module'}");
  PyRef builtins = eval("{'b': 'builtin'}");
  FrameView frame{.globals = frame_globals.get(), .builtins = builtins.get()};
  SourceTable table;
  const int w = table.global_in(module_globals.get(), py_str("w").get());
  const int b = table.global_in(module_globals.get(), py_str("b").get());
  const int missing = table.global_in(module_globals.get(), py_str("nope").get());
  SourceValues values(table.size());
  EXPECT_EQ(test::repr_of(fetch(table, w, frame, values).get()), "'module'");
  EXPECT_EQ(test::repr_of(fetch(table, b, frame, values).get()), "'builtin'");
  EXPECT_EQ(fetch(table, missing, frame, values).get(), nullptr);
}

TEST(FetchSource, ClosureCell) {
  PyRef contents = eval("torch.zeros(1)");
  PyRef closure = PyRef::steal(PyTuple_New(2));
  PyTuple_SET_ITEM(closure.get(), 0, PyCell_New(contents.get()));
  PyTuple_SET_ITEM(closure.get(), 1, PyCell_New(nullptr));  // an empty cell
  FrameView frame{.closure = closure.get()};
  SourceTable table;
  const int full = table.closure_cell(0, "full");
  const int empty = table.closure_cell(1, "empty");
  const int beyond = table.closure_cell(2, "beyond");
  SourceValues values(table.size());
  EXPECT_EQ(fetch(table, full, frame, values).get(), contents.get());
  EXPECT_EQ(fetch(table, empty, frame, values).get(), nullptr);
  EXPECT_EQ(fetch(table, beyond, frame, values).get(), nullptr);
  FrameView no_closure{};
  EXPECT_EQ(fetch(table, full, no_closure, values).get(), nullptr);
}

TEST(FetchSource, AttrChainAndMissingAttribute) {
  PyRef self = eval("types.SimpleNamespace(fc=types.SimpleNamespace(weight=3))");
  PyObject* locals[] = {self.get()};
  FrameView frame{.localsplus = locals};
  SourceTable table;
  const int l_self = table.local(0, "self");
  const int fc = table.attr(l_self, py_str("fc").get());
  const int weight = table.attr(fc, py_str("weight").get());
  const int missing = table.attr(l_self, py_str("no_such_attribute").get());
  const int below_missing = table.attr(missing, py_str("weight").get());
  SourceValues values;
  fetch_all(table, frame, values);
  EXPECT_FALSE(PyErr_Occurred());

  EXPECT_EQ(values.get(l_self), self.get());
  EXPECT_EQ(test::repr_of(values.get(weight)), "3");
  // A missing attribute is "does not resolve", not an AttributeError.
  EXPECT_EQ(values.get(missing), nullptr);
  // ...and neither does anything derived from it.
  EXPECT_EQ(values.get(below_missing), nullptr);
}

TEST(FetchSource, AttrWhoseGetterRaisesIsCleared) {
  PyRef globals = test::exec_module(
      "class Boom:\n"
      "    @property\n"
      "    def bad(self):\n"
      "        raise RuntimeError('boom')\n"
      "obj = Boom()\n");
  PyRef obj = test::item(globals, "obj");
  PyObject* locals[] = {obj.get()};
  FrameView frame{.localsplus = locals};
  SourceTable table;
  const int bad = table.attr(table.local(0, "obj"), py_str("bad").get());
  SourceValues values;
  fetch_all(table, frame, values);
  EXPECT_EQ(values.get(bad), nullptr);
  EXPECT_FALSE(PyErr_Occurred()) << test::take_error();
}

TEST(FetchSource, DictItem) {
  PyRef d = eval("{'k': 'v', 3: 'three'}");
  PyRef mapping = eval("__import__('collections').OrderedDict(k='ordered')");
  PyObject* locals[] = {d.get(), mapping.get()};
  FrameView frame{.localsplus = locals};
  SourceTable table;
  const int l_d = table.local(0, "d");
  const int l_m = table.local(1, "m");
  const int k = table.dict_item(l_d, py_str("k").get());
  const int three = table.dict_item(l_d, py_int(3).get());
  const int missing = table.dict_item(l_d, py_str("nope").get());
  const int ordered = table.dict_item(l_m, py_str("k").get());
  const int ordered_missing = table.dict_item(l_m, py_str("nope").get());
  SourceValues values;
  fetch_all(table, frame, values);
  EXPECT_FALSE(PyErr_Occurred()) << test::take_error();
  EXPECT_EQ(test::repr_of(values.get(k)), "'v'");
  EXPECT_EQ(test::repr_of(values.get(three)), "'three'");
  EXPECT_EQ(values.get(missing), nullptr);
  // A dict subclass goes through __getitem__; a KeyError is cleared too.
  EXPECT_EQ(test::repr_of(values.get(ordered)), "'ordered'");
  EXPECT_EQ(values.get(ordered_missing), nullptr);
}

TEST(FetchSource, IndexOnTupleListAndOtherSequences) {
  PyRef t = eval("(10, 20)");
  PyRef l = eval("[30]");
  PyRef size = eval("torch.Size([4, 5])");
  PyObject* locals[] = {t.get(), l.get(), size.get()};
  FrameView frame{.localsplus = locals};
  SourceTable table;
  const int l_t = table.local(0, "t");
  const int l_l = table.local(1, "l");
  const int l_s = table.local(2, "s");
  const int t1 = table.index(l_t, 1);
  const int t2 = table.index(l_t, 2);
  const int l0 = table.index(l_l, 0);
  const int l5 = table.index(l_l, 5);
  const int s1 = table.index(l_s, 1);
  const int s9 = table.index(l_s, 9);
  SourceValues values;
  fetch_all(table, frame, values);
  EXPECT_FALSE(PyErr_Occurred()) << test::take_error();
  EXPECT_EQ(test::repr_of(values.get(t1)), "20");
  EXPECT_EQ(values.get(t2), nullptr);
  EXPECT_EQ(test::repr_of(values.get(l0)), "30");
  EXPECT_EQ(values.get(l5), nullptr);
  // torch.Size is a tuple subclass: PySequence_GetItem, IndexError cleared.
  EXPECT_EQ(test::repr_of(values.get(s1)), "5");
  EXPECT_EQ(values.get(s9), nullptr);
}

TEST(FetchSource, IndexOnNonSequenceDoesNotResolve) {
  PyRef obj = eval("object()");
  PyObject* locals[] = {obj.get()};
  FrameView frame{.localsplus = locals};
  SourceTable table;
  const int i0 = table.index(table.local(0, "o"), 0);
  SourceValues values;
  fetch_all(table, frame, values);
  EXPECT_EQ(values.get(i0), nullptr);
  EXPECT_FALSE(PyErr_Occurred()) << test::take_error();
}

}  // namespace
}  // namespace kiln::guards
