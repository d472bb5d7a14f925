// Which builtins and std-module callables kiln models, and the handler of
// each: resolved once to the callable objects themselves, so the tracer
// finds a model with one pointer lookup per call.
#pragma once

#include <Python.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "stdlib/builtin_context.h"

namespace kiln::stdlib {

// Evaluates one call; returns its result or aborts through the context.
using ModelFn = ValuePtr (*)(BuiltinContext& context, BuiltinCall& call);
// Takes the next n items of an unbounded iterator (itertools.count, an
// endless repeat), advancing it; the only way such an iterator is consumed.
using TakeFn = std::vector<ValuePtr> (*)(BuiltinContext& context, const ValuePtr& iterator, size_t n);

struct Model {
  ModelFn call = nullptr;
  std::string name;      // display name, e.g. "itertools.chain"
  TakeFn take = nullptr;  // set for models of unbounded iterators
};

class ModelRegistry {
 public:
  // Models calls of module.attr. Names the running Python lacks are skipped.
  void add(const char* module, const char* attr, ModelFn fn);
  // Models calls of instances of the type module.attr (partial objects,
  // itemgetters...), made by the trace (StdObject values) or before it.
  void add_instances(const char* module, const char* attr, ModelFn fn, TakeFn take = nullptr);
  // Models calls of a callable in hand (method descriptors: list.append).
  void add_object(PyObject* callable, std::string name, ModelFn fn);

  // The model for calling `callable` itself, or null.
  const Model* find(PyObject* callable) const;
  // The model for calling an instance of `type`, or null.
  const Model* find_instances(PyObject* type) const;

 private:
  std::unordered_map<const void*, Model> callables_;
  std::unordered_map<const void*, Model> instance_types_;
  std::vector<PyRef> keep_alive_;  // the keys' objects, so their ids are never reused
};

// The model families, each registering its handlers (one *_model.cpp each).
#define KILN_STDLIB_MODELS(X) \
  X(builtins)                 \
  X(containers)               \
  X(math)                     \
  X(operator)                 \
  X(functools)                \
  X(itertools)                \
  X(inspect)

#define KILN_DECLARE_MODEL(family) void register_##family##_model(ModelRegistry& registry);
KILN_STDLIB_MODELS(KILN_DECLARE_MODEL)
#undef KILN_DECLARE_MODEL

// The process-wide registry, built on first use (with the GIL held).
const ModelRegistry& model_registry();

// The model for calling `callee` (a Builtin, Object, StdObject or
// ContainerMethod value), or null when kiln does not model it.
const Model* find_model(const Value& callee);

// True for a value only a model's TakeFn can consume (an endless iterator).
bool is_unbounded(const Value& value);

// The next n items of an unbounded iterator value (see TakeFn).
std::vector<ValuePtr> take_unbounded(BuiltinContext& context, const ValuePtr& iterator, size_t n);

// A StdObject of `type` made by the trace from constructor arguments.
ValuePtr make_std_object(PyObject* type, std::vector<ValuePtr> args, const KwArgs& kwargs);

}  // namespace kiln::stdlib
