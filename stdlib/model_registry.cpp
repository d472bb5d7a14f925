#include "stdlib/model_registry.h"

namespace kiln::stdlib {
namespace {

// The key a callable is registered under. A builtin function or method is
// keyed by its PyMethodDef: CPython makes a new object for each access to
// `itertools.chain.from_iterable` or `xs.append`, but they share the def
// with the descriptor in the type's dict.
const void* key_of(PyObject* callable) {
  if (PyCFunction_Check(callable)) {
    return reinterpret_cast<PyCFunctionObject*>(callable)->m_ml;
  }
  if (Py_IS_TYPE(callable, &PyMethodDescr_Type) || Py_IS_TYPE(callable, &PyClassMethodDescr_Type)) {
    return reinterpret_cast<PyMethodDescrObject*>(callable)->d_method;
  }
  return callable;
}

std::string display_name(const char* module, const char* attr) {
  return std::string(module) == "builtins" ? attr : std::string(module) + "." + attr;
}

// module.attr, or null (no Python error left) if either is missing.
PyRef lookup(const char* module, const char* attr) {
  PyRef mod = PyRef::steal(PyImport_ImportModule(module));
  PyRef found = mod ? PyRef::steal(PyObject_GetAttrString(mod.get(), attr)) : PyRef();
  if (!found) PyErr_Clear();
  return found;
}

}  // namespace

void ModelRegistry::add(const char* module, const char* attr, ModelFn fn) {
  PyRef callable = lookup(module, attr);
  if (!callable) return;
  callables_[key_of(callable.get())] = Model{fn, display_name(module, attr), nullptr};
  keep_alive_.push_back(std::move(callable));
}

void ModelRegistry::add_instances(const char* module, const char* attr, ModelFn fn, TakeFn take) {
  PyRef type = lookup(module, attr);
  if (!type || !PyType_Check(type.get())) return;
  instance_types_[type.get()] = Model{fn, display_name(module, attr), take};
  keep_alive_.push_back(std::move(type));
}

void ModelRegistry::add_object(PyObject* callable, std::string name, ModelFn fn) {
  callables_[key_of(callable)] = Model{fn, std::move(name), nullptr};
  keep_alive_.push_back(PyRef::borrow(callable));
}

const Model* ModelRegistry::find(PyObject* callable) const {
  auto found = callables_.find(key_of(callable));
  return found == callables_.end() ? nullptr : &found->second;
}

const Model* ModelRegistry::find_instances(PyObject* type) const {
  auto found = instance_types_.find(type);
  return found == instance_types_.end() ? nullptr : &found->second;
}

const ModelRegistry& model_registry() {
  static const ModelRegistry* registry = [] {
    auto* built = new ModelRegistry();  // never freed: it holds Python objects past finalization
#define KILN_REGISTER_MODEL(family) register_##family##_model(*built);
    KILN_STDLIB_MODELS(KILN_REGISTER_MODEL)
#undef KILN_REGISTER_MODEL
    return built;
  }();
  return *registry;
}

const Model* find_model(const Value& callee) {
  if (!callee.obj) return nullptr;
  const ModelRegistry& registry = model_registry();
  switch (callee.kind) {
    case ValueKind::StdObject:
      return registry.find_instances(callee.obj.get());
    case ValueKind::Builtin:
    case ValueKind::ContainerMethod:
    case ValueKind::Function:  // a Python function kiln evaluates rather than inlines
      return registry.find(callee.obj.get());
    case ValueKind::Object:
      if (const Model* model = registry.find(callee.obj.get())) return model;
      return registry.find_instances(reinterpret_cast<PyObject*>(Py_TYPE(callee.obj.get())));
    default:
      return nullptr;
  }
}

bool is_unbounded(const Value& value) {
  if (!value.is(ValueKind::StdObject)) return false;
  const Model* model = find_model(value);
  return model && model->take;
}

std::vector<ValuePtr> take_unbounded(BuiltinContext& context, const ValuePtr& iterator, size_t n) {
  const Model* model = find_model(*iterator);
  if (!model || !model->take) {
    context.abort(BreakCode::UnsupportedValue, "taking items of " + tracer::describe_value(*iterator));
  }
  return model->take(context, iterator, n);
}

ValuePtr make_std_object(PyObject* type, std::vector<ValuePtr> args, const KwArgs& kwargs) {
  ValuePtr keywords = tracer::make_sequence(ValueKind::Dict, {});
  for (const auto& [key, value] : kwargs) {
    keywords->keys.push_back(PyRef::steal(PyUnicode_FromString(key.c_str())));
    keywords->items.push_back(value);
  }
  ValuePtr object = tracer::make_sequence(
      ValueKind::StdObject, {tracer::make_sequence(ValueKind::Tuple, std::move(args)), keywords});
  object->obj = PyRef::borrow(type);
  return object;
}

}  // namespace kiln::stdlib
