// Sets of Python constants ({"a", "b"}, set comprehensions, set methods).
// A Set value holds a private Python set; a change makes a new one, so every
// name bound to the value sees it, and nothing outside the trace does.
// Sets reached through a source are read-only here: changing one would be a
// side effect on the caller's object. Modules may be members too, by
// identity (their sources are identity-guarded): nn.Module.named_children
// deduplicates children through a set (`memo`), which timm's RegNet stages
// iterate; iterating such a set is not traced.
#include "tracer/frame_tracer.h"

namespace kiln::tracer {
namespace {

// Note [Tensors in sets]
// nn.Module._named_members (parameters(), named_parameters(), buffers())
// deduplicates through a set of tensors, and diffusers' `self.dtype` walks
// it. A tensor read through a source is a set member by the identity of the
// real tensor (its address while the trace runs); the members live in the
// Set value's `items`, beside its constants. A membership test guards what
// it relied on: a tensor not in the set is a Distinct object from each
// member (one pair guard per member, so a set holds at most 16 tensors); a
// tensor reached through a second source that is a member (tied weights)
// stops the trace, as sameness has no guard. Iterating such a set, copying
// it or its other methods stop the trace too.
constexpr size_t kMaxTensorMembers = 16;

bool is_sourced_tensor(const ValuePtr& item) {
  return item->is(ValueKind::Tensor) && item->source >= 0 && item->tensor_address != 0;
}

// The Python object of a constant or module item, or a trace abort.
PyObject* constant_item(const ValuePtr& item, const char* what) {
  if (!item->is(ValueKind::Constant) && !item->is(ValueKind::Module)) {
    abort_trace(BreakCode::UnsupportedValue, std::string(what) + " holds " + describe_value(*item) +
                                                 "; sets may hold Python constants and modules only");
  }
  return item->obj.get();
}

// Methods that return a new value and leave the set alone.
bool is_reading_method(const std::string& name) {
  static const char* kReading[] = {"union", "intersection", "difference", "symmetric_difference",
                                   "issubset", "issuperset", "isdisjoint", "copy"};
  for (const char* reading : kReading) {
    if (name == reading) return true;
  }
  return false;
}

bool is_changing_method(const std::string& name) {
  static const char* kChanging[] = {"add", "discard", "remove", "update", "clear", "pop",
                                    "difference_update", "intersection_update",
                                    "symmetric_difference_update"};
  for (const char* changing : kChanging) {
    if (name == changing) return true;
  }
  return false;
}

}  // namespace

ValuePtr FrameTracer::make_set(const std::vector<ValuePtr>& items) {
  ValuePtr set = make_object(ValueKind::Set, PyRef::steal(PySet_New(nullptr)));
  for (const ValuePtr& item : items) {
    if (is_sourced_tensor(item)) {
      if (!set_holds_tensor(set->items, item)) set->items.push_back(item);
    } else if (PySet_Add(set->obj.get(), constant_item(item, "a set")) < 0) {
      abort_trace(BreakCode::PythonException, take_python_error());
    }
  }
  return set;
}

void FrameTracer::set_insert(const ValuePtr& set, const std::vector<ValuePtr>& items) {
  if (set->source >= 0) abort_trace(BreakCode::SideEffect, "changing a set the caller passed in");
  PyRef copy = PyRef::steal(PySet_New(set->obj.get()));
  std::vector<ValuePtr> tensors = set->items;
  for (const ValuePtr& item : items) {
    if (is_sourced_tensor(item)) {
      if (!set_holds_tensor(tensors, item)) tensors.push_back(item);
    } else if (PySet_Add(copy.get(), constant_item(item, "a set")) < 0) {
      abort_trace(BreakCode::PythonException, take_python_error());
    }
  }
  state_.note_mutation(set);
  set->obj = std::move(copy);
  set->items = std::move(tensors);
}

bool FrameTracer::set_holds_tensor(const std::vector<ValuePtr>& members, const ValuePtr& tensor) {
  if (!is_sourced_tensor(tensor)) {
    abort_trace(BreakCode::UnsupportedValue, "a set test of " + describe_value(*tensor) +
                                                 ", which the trace did not read through a source");
  }
  for (const ValuePtr& member : members) {
    if (member.get() == tensor.get() || member->source == tensor->source) return true;
    if (member->tensor_address == tensor->tensor_address) {
      abort_trace(BreakCode::UnsupportedValue, "a tensor reached through two sources (" +
                                                   state_.sources().at(member->source).text + ", " +
                                                   state_.sources().at(tensor->source).text + ") tested in a set");
    }
  }
  if (members.size() >= kMaxTensorMembers) {
    abort_trace(BreakCode::UnsupportedValue, "a set holding more than 16 tensors");
  }
  for (const ValuePtr& member : members) state_.guards().add_distinct({member->source, tensor->source});
  return false;
}

ValuePtr FrameTracer::call_set_method(const ValuePtr& method, const std::vector<ValuePtr>& args,
                                      const KwArgs& kwargs) {
  const ValuePtr& self = method->self;
  const std::string& name = method->name;
  const bool changing = is_changing_method(name);
  if (!kwargs.empty() || (!changing && !is_reading_method(name))) {
    abort_trace(BreakCode::UnsupportedCall, "set." + name + "() is not traced");
  }
  if (changing && self->source >= 0) abort_trace(BreakCode::SideEffect, "set." + name + "() on a set the caller passed in");
  if (name == "add" && args.size() == 1 && is_sourced_tensor(args[0])) {
    set_insert(self, args);
    return state_.wrap_unguarded(Py_None);
  }
  if (!self->items.empty()) abort_trace(BreakCode::UnsupportedCall, "set." + name + "() of a set holding tensors");
  PyRef call_args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef arg = args[i]->is(ValueKind::Module) ? args[i]->obj : constant_to_python(args[i]);
    if (!arg) abort_trace(BreakCode::UnsupportedCall, "set." + name + "() of " + describe_value(*args[i]));
    PyTuple_SET_ITEM(call_args.get(), i, arg.release());
  }
  // Work on a copy: the value's set object is never changed in place.
  PyRef target = PyRef::steal(PySet_New(self->obj.get()));
  PyRef bound = PyRef::steal(PyObject_GetAttrString(target.get(), name.c_str()));
  PyRef result = bound ? PyRef::steal(PyObject_Call(bound.get(), call_args.get(), nullptr)) : PyRef();
  if (!result) abort_trace(BreakCode::PythonException, "set." + name + "() raised " + take_python_error());
  if (changing) {
    state_.note_mutation(self);
    self->obj = std::move(target);
  }
  return state_.wrap_unguarded(result.get());
}

}  // namespace kiln::tracer
