// The math module: pure functions of numbers, run for real on constants.
// On a tensor they would read its value (math.sqrt(t) is float(t) first),
// except math.prod, which multiplies whatever it gets.
#include "stdlib/model_registry.h"
#include "stdlib/model_support.h"

namespace kiln::stdlib {
namespace {

ValuePtr fold(BuiltinContext& context, BuiltinCall& call) {
  return fold_constants(context, call.callee->obj.get(), call, false);
}

ValuePtr fsum_model(BuiltinContext& context, BuiltinCall& call) {
  return fold_constants(context, call.callee->obj.get(), call, true);
}

ValuePtr prod_model(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr start = take_keyword(call.kwargs, "start");
  expect_args(context, call, 1, 1);
  if (!holds_tensor(*call.args[0]) && (!start || !holds_tensor(*start))) {
    if (start) call.kwargs.emplace_back("start", start);
    return fold_constants(context, call.callee->obj.get(), call, true);
  }
  // prod() is start * items[0] * items[1] * ..., left to right.
  ValuePtr total = start ? start : int_value(context, 1);
  for (const ValuePtr& item : context.unpack(call.args[0])) {
    total = context.binary_op(5 /* NB_MULTIPLY */, total, item);
  }
  return total;
}

}  // namespace

void register_math_model(ModelRegistry& registry) {
  PyRef math = PyRef::steal(PyImport_ImportModule("math"));
  if (!math) {
    PyErr_Clear();
    return;
  }
  // Every function of math is pure; list them from the module itself.
  PyObject* names = PyModule_GetDict(math.get());
  PyObject* key;
  PyObject* value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(names, &pos, &key, &value)) {
    if (PyCFunction_Check(value) && PyUnicode_Check(key)) registry.add("math", PyUnicode_AsUTF8(key), fold);
  }
  registry.add("math", "fsum", fsum_model);
  // A dtype's numeric limits (torch.finfo(x.dtype).min, masks in attention
  // code): a call on a constant dtype folds like math's functions.
  registry.add("torch", "finfo", fold);
  registry.add("torch", "iinfo", fold);
  registry.add("math", "prod", prod_model);
}

}  // namespace kiln::stdlib
