// libkiln (include/kiln/embed.h) in attach mode: test_main.cpp started the
// interpreter and holds the GIL on this thread, as a host running Python
// itself would.
#include <ATen/ops/add.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <Python.h>
#include <gtest/gtest.h>
#include <c10/core/GradMode.h>
#include <kiln/embed.h>

#include <fstream>
#include <thread>

#include "tests/cpp/runtime/python_test_util.h"

namespace kiln {
namespace {

constexpr const char* kModelSource = R"(
import torch

class ModelError(Exception):
    pass

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x).relu()

net = Net()

def pair(x, y):
    return x + y, [x * y]

def fails(x):
    raise ModelError(f"bad input of shape {tuple(x.shape)}")

def returns_int(x):
    return 3

def returns_mixed(x):
    return (x, "text")

def varargs(*xs):
    return xs[0]

def optional_second(x, y=None):
    return x if y is None else x + y

not_callable = 5
)";

// The runtime and the test model, loaded once from a file in the temp dir.
struct Fixture {
  Runtime runtime = Runtime::attach();
  Module model = load();

  Module load() {
    const std::string path = ::testing::TempDir() + "kiln_embed_test_model.py";
    std::ofstream(path) << kModelSource;
    return runtime.load_file(path);
  }
};

Fixture& fixture() {
  static Fixture* instance = new Fixture();  // never destroyed: the host finalizes Python
  return *instance;
}

TEST(EmbedApi, AttachesToTheHostInterpreter) {
  EXPECT_FALSE(fixture().runtime.owns_interpreter());
  // start() while Python runs attaches too, and hands out the same runtime.
  EXPECT_FALSE(Runtime::start().owns_interpreter());
  EXPECT_EQ(fixture().model.name(), "kiln_embed_test_model");
}

TEST(EmbedApi, CallsAModuleAndItsCompiledForward) {
  c10::NoGradGuard no_grad;
  Function eager = fixture().model.function("net");
  Function compiled = fixture().model.function("net.forward").compile({.backend = "eager", .fullgraph = true});
  EXPECT_EQ(compiled.name(), "compiled kiln_embed_test_model.net.forward");
  at::Tensor x = at::randn({2, 4});
  std::vector<at::Tensor> expected = eager.call({x});
  std::vector<at::Tensor> got = compiled.call({x});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(at::equal(got[0], expected[0]));
}

TEST(EmbedApi, ReturnsTheTensorsOfTuplesAndLists) {
  Function pair = fixture().model.function("pair").compile({.backend = "eager"});
  at::Tensor x = at::ones({3}), y = at::ones({3});
  // (x + y, [x * y]) is a tuple whose second item is a list: not flat tensors.
  EXPECT_THROW(pair.call({x, y}), Error);
  Function optional_second = fixture().model.function("optional_second");
  EXPECT_EQ(optional_second.call({x}).size(), 1u);
  EXPECT_TRUE(at::equal(optional_second.call({x, y})[0], at::add(x, y)));
}

TEST(EmbedApi, PythonExceptionsCarryTypeMessageAndTraceback) {
  Function fails = fixture().model.function("fails").compile({.backend = "eager"});
  try {
    fails.call({at::ones({2, 5})});
    FAIL() << "no exception";
  } catch (const PythonError& e) {
    EXPECT_EQ(e.type(), "kiln_embed_test_model.ModelError");
    EXPECT_EQ(e.message(), "bad input of shape (2, 5)");
    EXPECT_NE(e.traceback().find("Traceback (most recent call last)"), std::string::npos) << e.traceback();
    EXPECT_NE(e.traceback().find("in fails"), std::string::npos) << e.traceback();
    EXPECT_NE(std::string(e.what()).find("calling compiled kiln_embed_test_model.fails"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(PyErr_Occurred());
}

TEST(EmbedApi, MissingModulesAndAttributesAreClearErrors) {
  try {
    fixture().runtime.import_module("no_such_module_kiln");
    FAIL() << "no exception";
  } catch (const PythonError& e) {
    EXPECT_EQ(e.type(), "ModuleNotFoundError");
  }
  try {
    fixture().model.function("net.backward_pass");
    FAIL() << "no exception";
  } catch (const PythonError& e) {
    EXPECT_EQ(e.type(), "AttributeError");
    EXPECT_NE(e.message().find("'backward_pass'"), std::string::npos) << e.message();
  }
  EXPECT_THROW(fixture().model.function("not_callable"), PythonError);
  EXPECT_THROW(fixture().runtime.load_file("/nonexistent/model.py"), PythonError);
  EXPECT_EQ(fixture().runtime.import_module("math").name(), "math");
}

TEST(EmbedApi, WrongInputCountsAndNonTensorResultsAreClearErrors) {
  Function forward = fixture().model.function("net.forward");
  try {
    forward.call({at::ones({1, 4}), at::ones({1, 4})});
    FAIL() << "no exception";
  } catch (const PythonError&) {
    FAIL() << "expected kiln::Error before Python is called";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kiln_embed_test_model.net.forward takes 1 input, got 2");
  }
  EXPECT_THROW(fixture().model.function("optional_second").call({}), Error);
  EXPECT_NO_THROW(fixture().model.function("varargs").call({at::ones({1}), at::ones({1})}));
  try {
    fixture().model.function("returns_int").compile({.backend = "eager"}).call({at::ones({1})});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("returned an int"), std::string::npos) << e.what();
  }
  try {
    fixture().model.function("returns_mixed").call({at::ones({1})});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a tuple whose item 1 is a str"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(PyErr_Occurred());
}

TEST(EmbedApi, WarmUpCompilesEveryPathUpFront) {
  c10::NoGradGuard no_grad;
  Function forward = fixture().model.function("net.forward").compile({.backend = "eager"});
  const int64_t traces_before_warm_up = fixture().runtime.stats().at("traces");
  forward.warm_up({{at::randn({1, 4})}, {at::randn({5, 4})}});
  const int64_t traces_before = fixture().runtime.stats().at("traces");
  EXPECT_GT(traces_before, traces_before_warm_up);
  forward.call({at::randn({1, 4})});
  forward.call({at::randn({5, 4})});
  EXPECT_EQ(fixture().runtime.stats().at("traces"), traces_before);
  test::PyRef from_python = test::eval("__import__('kiln').stats()['traces']");
  EXPECT_EQ(PyLong_AsLong(from_python.get()), traces_before);
}

TEST(EmbedApi, CallsFromManyHostThreadsMatchEager) {
  Function eager = fixture().model.function("net");
  Function compiled = fixture().model.function("net.forward").compile({.backend = "eager"});
  std::vector<at::Tensor> inputs, expected;
  {
    c10::NoGradGuard no_grad;
    for (int i = 0; i < 16; ++i) {
      inputs.push_back(at::randn({2, 4}));
      expected.push_back(eager.call({inputs.back()})[0]);
    }
    compiled.warm_up({{inputs[0]}});
  }
  std::atomic<int> mismatches = 0;
  // The host threads take the GIL themselves: this thread gives it up.
  Py_BEGIN_ALLOW_THREADS
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      c10::NoGradGuard no_grad;
      for (int i = 0; i < 100; ++i) {
        const size_t which = static_cast<size_t>(t * 5 + i) % inputs.size();
        if (!at::equal(compiled.call({inputs[which]})[0], expected[which])) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  Py_END_ALLOW_THREADS
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(EmbedApi, HandlesReleaseTheirReferences) {
  test::PyRef fn = test::eval("__import__('kiln_embed_test_model').pair");
  const Py_ssize_t before = Py_REFCNT(fn.get());
  {
    Function pair = fixture().model.function("pair");
    Function compiled = pair.compile({.backend = "eager"});
    Function copy = compiled;
    EXPECT_GT(Py_REFCNT(fn.get()), before);
  }
  EXPECT_EQ(Py_REFCNT(fn.get()), before);
}

}  // namespace
}  // namespace kiln
