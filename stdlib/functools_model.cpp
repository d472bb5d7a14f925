// functools: partial objects, made before the call or inside the traced
// function, are called by calling their function (inlined or a graph node)
// with the stored arguments first; reduce folds its function over the
// items, each step traced like any call; an lru_cache wrapper calls the
// function it wraps.
#include <algorithm>

#include "stdlib/model_registry.h"
#include "stdlib/model_support.h"

namespace kiln::stdlib {
namespace {

ValuePtr make_partial(BuiltinContext& context, BuiltinCall& call) {
  if (call.args.empty()) {
    context.abort(BreakCode::PythonException, "TypeError: type 'partial' takes at least one argument");
  }
  return make_std_object(call.callee->obj.get(), std::move(call.args), call.kwargs);
}

// The function, positional and keyword arguments a partial holds.
struct PartialParts {
  ValuePtr func;
  std::vector<ValuePtr> args;
  KwArgs kwargs;
};

PartialParts parts_of(BuiltinContext& context, const ValuePtr& partial) {
  PartialParts parts;
  ValuePtr args;
  ValuePtr keywords;
  if (partial->is(ValueKind::StdObject)) {
    args = partial->items[0];
    keywords = partial->items[1];
    parts.func = args->items.at(0);
    parts.args.assign(args->items.begin() + 1, args->items.end());
  } else {
    // A partial made outside: func, args and keywords are guarded through
    // its source, since __setstate__ or the keywords dict could change them.
    parts.func = context.read_attr(partial, "func");
    args = context.read_attr(partial, "args");
    keywords = context.read_attr(partial, "keywords");
    if (!args->is(ValueKind::Tuple) || !keywords->is(ValueKind::Dict)) {
      context.abort(BreakCode::UnsupportedValue, "a partial with unusual args or keywords");
    }
    parts.args = args->items;
  }
  for (size_t i = 0; i < keywords->keys.size(); ++i) {
    parts.kwargs.emplace_back(PyUnicode_AsUTF8(keywords->keys[i].get()), keywords->items[i]);
  }
  return parts;
}

ValuePtr call_partial(BuiltinContext& context, BuiltinCall& call) {
  PartialParts parts = parts_of(context, call.callee);
  parts.args.insert(parts.args.end(), call.args.begin(), call.args.end());
  // Keywords given at the call override the stored ones.
  for (auto& [key, value] : call.kwargs) {
    auto same = [&key](const auto& entry) { return entry.first == key; };
    auto found = std::find_if(parts.kwargs.begin(), parts.kwargs.end(), same);
    if (found != parts.kwargs.end()) {
      found->second = value;
    } else {
      parts.kwargs.emplace_back(key, value);
    }
  }
  return context.call(parts.func, std::move(parts.args), std::move(parts.kwargs));
}

ValuePtr reduce_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 3);
  const ValuePtr fn = call.args[0];
  std::vector<ValuePtr> items = context.unpack(call.args[1]);
  size_t first = 0;
  ValuePtr total;
  if (call.args.size() == 3) {
    total = call.args[2];
  } else if (!items.empty()) {
    total = items[first++];
  } else {
    context.abort(BreakCode::PythonException, "TypeError: reduce() of empty iterable with no initial value");
  }
  for (size_t i = first; i < items.size(); ++i) total = context.call(fn, {total, items[i]}, {});
  return total;
}

// An lru_cache (or cache) wrapper called with constant arguments returns
// what its cache holds for them, the same object every call until
// cache_clear(): the call runs now (a cache hit after the first), and an
// immutable result is a constant (transformers' is_torch_greater_or_equal(
// "2.9.0") and is_*_available(), whose first call reads package metadata
// through importlib, code no trace should enter). Other calls are traced
// as the function the wrapper wraps, as Dynamo does: the cache only saves
// work, except for a function with effects, traced as if called each time.
ValuePtr call_lru_cached(BuiltinContext& context, BuiltinCall& call) {
  PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(call.args.size())));
  PyRef kwargs = PyRef::steal(PyDict_New());
  bool constant = call.callee->is(ValueKind::Object) && call.callee->obj;  // a wrapper made before the call
  for (size_t i = 0; constant && i < call.args.size(); ++i) {
    PyRef arg = python_constant(*call.args[i]);
    constant = static_cast<bool>(arg);
    if (constant) PyTuple_SET_ITEM(args.get(), static_cast<Py_ssize_t>(i), arg.release());
  }
  for (const auto& [key, value] : call.kwargs) {
    PyRef arg = constant ? python_constant(*value) : PyRef();
    constant = static_cast<bool>(arg);
    if (constant) PyDict_SetItemString(kwargs.get(), key.c_str(), arg.get());
  }
  if (constant) {
    PyRef result = PyRef::steal(PyObject_Call(call.callee->obj.get(), args.get(), kwargs.get()));
    if (result) {
      ValuePtr value = context.constant(result.get());
      if (value->is(ValueKind::Constant)) return value;
    } else {
      PyErr_Clear();  // traced below, where the exception is raised as the trace's
    }
  }
  const ValuePtr wrapped = context.read_attr(call.callee, "__wrapped__");
  return context.call(wrapped, std::move(call.args), std::move(call.kwargs));
}

}  // namespace

void register_functools_model(ModelRegistry& registry) {
  registry.add_instances("functools", "_lru_cache_wrapper", call_lru_cached);
  registry.add("functools", "partial", make_partial);
  registry.add_instances("functools", "partial", call_partial);
  registry.add("functools", "reduce", reduce_model);
}

}  // namespace kiln::stdlib
