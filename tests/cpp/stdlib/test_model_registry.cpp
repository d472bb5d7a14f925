// Tests of stdlib/model_registry.h: which callables find a model, by the
// object itself, by its C method (bound copies, descriptors) or by the type
// of an instance.
#include <Python.h>
#include <gtest/gtest.h>

#include "stdlib/model_registry.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::stdlib {
namespace {

using test::eval;

// A value of `kind` standing for the Python object `expression` evaluates to.
ValuePtr value_of(ValueKind kind, const std::string& expression) {
  return tracer::make_object(kind, eval(expression));
}

const Model* model_of(ValueKind kind, const std::string& expression) {
  return find_model(*value_of(kind, expression));
}

TEST(ModelRegistry, FindsBuiltinsAndStdFunctionsByIdentity) {
  const Model* len = model_of(ValueKind::Builtin, "len");
  ASSERT_NE(len, nullptr);
  EXPECT_EQ(len->name, "len");
  const Model* reduce = model_of(ValueKind::Builtin, "__import__('functools').reduce");
  ASSERT_NE(reduce, nullptr);
  EXPECT_EQ(reduce->name, "functools.reduce");
  const Model* sqrt = model_of(ValueKind::Builtin, "__import__('math').sqrt");
  ASSERT_NE(sqrt, nullptr);
  EXPECT_EQ(sqrt->name, "math.sqrt");
  const Model* zip = model_of(ValueKind::Object, "zip");
  ASSERT_NE(zip, nullptr);
  EXPECT_EQ(zip->name, "zip");
}

TEST(ModelRegistry, BoundCopiesShareTheirMethodsModel) {
  // Each read of chain.from_iterable or xs.append makes a new object.
  const Model* from_iterable = model_of(ValueKind::Builtin, "__import__('itertools').chain.from_iterable");
  ASSERT_NE(from_iterable, nullptr);
  EXPECT_EQ(from_iterable->name, "itertools.chain.from_iterable");
  const Model* descriptor = model_of(ValueKind::ContainerMethod, "list.append");
  const Model* bound = model_of(ValueKind::Builtin, "[].append");
  ASSERT_NE(descriptor, nullptr);
  EXPECT_EQ(descriptor, bound);
  EXPECT_EQ(descriptor->name, "list.append");
}

TEST(ModelRegistry, InstancesOfModelledTypes) {
  const Model* partial = model_of(ValueKind::Object, "__import__('functools').partial(len)");
  ASSERT_NE(partial, nullptr);
  EXPECT_EQ(partial->name, "functools.partial");
  ValuePtr count = make_std_object(eval("__import__('itertools').count").get(), {}, {});
  EXPECT_TRUE(is_unbounded(*count));
  ValuePtr getter = make_std_object(eval("operator.itemgetter").get(), {}, {});
  EXPECT_FALSE(is_unbounded(*getter));
  ASSERT_NE(find_model(*getter), nullptr);
  EXPECT_EQ(find_model(*getter)->name, "operator.itemgetter");
}

TEST(ModelRegistry, UnmodelledCallablesFindNothing) {
  EXPECT_EQ(model_of(ValueKind::Builtin, "vars"), nullptr);
  EXPECT_EQ(model_of(ValueKind::Builtin, "'abc'.upper"), nullptr);
  EXPECT_EQ(model_of(ValueKind::Object, "__import__('itertools').groupby"), nullptr);
  EXPECT_EQ(model_of(ValueKind::Object, "type('C', (), {})()"), nullptr);
  EXPECT_EQ(model_of(ValueKind::TorchCallable, "torch.relu"), nullptr);
}

}  // namespace
}  // namespace kiln::stdlib
