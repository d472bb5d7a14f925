// Calls of Python builtins, std-module callables and container methods:
// the tracer finds the callee's model in stdlib/model_registry.h and lends
// it a context (stdlib/builtin_context.h) that acts on this frame.
#include "stdlib/model_registry.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

// The FrameTracer's side of stdlib::BuiltinContext, for one call.
class ModelContext final : public stdlib::BuiltinContext {
 public:
  ModelContext(FrameTracer& frame, TraceState& state) : frame_(frame), state_(state) {}

  std::vector<ValuePtr> unpack(const ValuePtr& iterable) override {
    if (stdlib::is_unbounded(*iterable)) {
      abort(BreakCode::UnsupportedCall, "iteration over an endless " + describe_value(*iterable));
    }
    if (iterable->is(ValueKind::Iterator) && iterable->position < iterable->items.size()) {
      state_.note_mutation(iterable);
    }
    return frame_.unpack(iterable, -1);
  }
  ValuePtr iterate(const ValuePtr& iterable) override { return frame_.get_iter(iterable); }
  ValuePtr next_item(const ValuePtr& iterator) override { return frame_.next_item(iterator); }
  ValuePtr call(const ValuePtr& callable, std::vector<ValuePtr> args, KwArgs kwargs) override {
    return frame_.call_value(callable, std::move(args), std::move(kwargs));
  }
  bool truthy(const ValuePtr& value) override { return frame_.truthiness(value); }
  ValuePtr binary_op(int nb_op, const ValuePtr& a, const ValuePtr& b) override {
    return frame_.binary_op(nb_op, a, b);
  }
  ValuePtr compare(int py_cmp, const ValuePtr& a, const ValuePtr& b) override {
    return frame_.compare_op(py_cmp, a, b);
  }
  ValuePtr unary_op(cpython::Op op, const ValuePtr& a) override { return frame_.unary_op(op, a); }
  ValuePtr load_attr(const ValuePtr& base, PyObject* name) override { return frame_.load_attr(base, name); }
  ValuePtr call_python_special(const ValuePtr& self, const char* name, std::vector<ValuePtr> args) override {
    return frame_.call_python_special(self, name, std::move(args));
  }
  ValuePtr pending_attr_store(const ValuePtr& base, PyObject* name) override {
    if (base->source < 0 || !(base->is(ValueKind::Module) || base->is(ValueKind::Object))) return nullptr;
    return state_.stored_attr(base, name);
  }
  ValuePtr subscript(const ValuePtr& base, const ValuePtr& index) override {
    return frame_.subscript(base, index);
  }
  void store_subscript(const ValuePtr& container, const ValuePtr& key, const ValuePtr& value) override {
    frame_.store_subscript(container, key, value);
  }
  ValuePtr call_torch(const std::string& name, PyObject* target, const std::vector<ValuePtr>& args,
                      const KwArgs& kwargs) override {
    return state_.call_torch(name, target, args, kwargs, false);
  }
  ValuePtr constant(PyObject* obj) override { return state_.wrap_unguarded(obj); }
  ValuePtr tensor_size(const ValuePtr& tensor, int dim) override { return state_.tensor_size(tensor, dim); }
  ValuePtr size_call(const std::string& name, PyObject* fn, const std::vector<ValuePtr>& operands) override {
    return state_.sym_arithmetic(name, fn, operands);
  }
  ValuePtr read_attr(const ValuePtr& base, const char* name) override {
    PyRef attr_name = PyRef::steal(PyUnicode_InternFromString(name));
    PyRef value = PyRef::steal(PyObject_GetAttr(base->obj.get(), attr_name.get()));
    if (!value) abort_python_error(std::string("reading ") + name);
    if (base->source < 0) return state_.wrap_unguarded(value.get());
    return state_.wrap(value.get(), state_.sources().attr(base->source, attr_name.get()));
  }
  void guard_type(const ValuePtr& value, PyObject* type) override {
    if (value->source >= 0) state_.guards().add_type_match(value->source, type);
  }
  ValuePtr try_load_attr(const ValuePtr& base, PyObject* name) override {
    try {
      return frame_.load_attr(base, name);
    } catch (PythonRaise& raised) {
      if (!PyErr_GivenExceptionMatches(reinterpret_cast<PyObject*>(Py_TYPE(raised.exception.get())),
                                       PyExc_AttributeError)) {
        throw;
      }
      return nullptr;
    }
  }
  [[noreturn]] void raise_exact() override { raise_python_error(); }
  void guard_has_attr(const ValuePtr& value, PyObject* name, bool present) override {
    if (value->source >= 0) state_.guards().add_has_attr(value->source, name, present);
  }
  void note_write(const ValuePtr& target) override {
    if (target->source >= 0 && (target->is(ValueKind::List) || target->is(ValueKind::Dict))) {
      state_.note_container_write(target);  // written back after the graph
    } else {
      state_.note_mutation(target);
    }
  }
  std::string take_python_error() override { return tracer::take_python_error(); }

 private:
  FrameTracer& frame_;
  TraceState& state_;
};

ValuePtr FrameTracer::call_modelled(const ValuePtr& callee, std::vector<ValuePtr> args, KwArgs kwargs) {
  const stdlib::Model* model = stdlib::find_model(*callee);
  if (!model || !model->call) {
    if (callee->is(ValueKind::ContainerMethod)) {
      abort_trace(BreakCode::UnsupportedCall,
                  std::string(value_kind_name(callee->self->kind)) + "." + callee->name + "() is not traced yet");
    }
    abort_trace(BreakCode::UnsupportedCall, "call of " + describe_value(*callee));
  }
  // A model consumes its arguments now (Note [Generators]); next() alone
  // takes one item at a time.
  const bool takes_one = model->name == "next" || model->name == "builtins.next";
  for (const ValuePtr& arg : args) {
    if (!takes_one && arg->is(ValueKind::Iterator) && arg->generator) drain(arg);
  }
  for (const auto& kw : kwargs) {
    if (kw.second->is(ValueKind::Iterator) && kw.second->generator) drain(kw.second);
  }
  ModelContext context(*this, state_);
  stdlib::BuiltinCall call{callee, model->name, args, kwargs};
  return model->call(context, call);
}

}  // namespace kiln::tracer
