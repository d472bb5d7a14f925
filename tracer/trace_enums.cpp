// Enum members: read from their class, compared, and asked for .name and
// .value. A member is an Object guarded by identity (an IdMatch on its
// source), and a member's name and value never change, so what is read
// from it folds to constants.
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

ValuePtr FrameTracer::enum_attr(const ValuePtr& base, PyObject* name) {
  PyObject* obj = base->obj.get();
  if (is_enum_class(obj)) {
    // Color.RED: members live in the class's _member_map_; the class is
    // guarded by identity and the member is guarded by its own identity.
    PyRef members = PyRef::steal(PyObject_GetAttrString(obj, "_member_map_"));
    PyObject* member = members && PyDict_Check(members.get()) ? PyDict_GetItemWithError(members.get(), name) : nullptr;
    PyErr_Clear();
    if (!member) return nullptr;
    return base->source >= 0 ? state_.wrap(member, state_.sources().attr(base->source, name))
                             : state_.wrap_unguarded(member);
  }
  if (is_enum_member(obj)) {
    const char* attrs[][2] = {{"name", "_name_"}, {"value", "_value_"}, {"_name_", "_name_"}, {"_value_", "_value_"}};
    for (const auto& pair : attrs) {
      if (PyUnicode_CompareWithASCIIString(name, pair[0]) != 0) continue;
      PyRef value = PyRef::steal(PyObject_GetAttrString(obj, pair[1]));
      if (!value) abort_trace(BreakCode::PythonException, take_python_error());
      // Fixed for this member, which is guarded by identity.
      ValuePtr wrapped = state_.wrap_unguarded(value.get());
      if (!wrapped->is(ValueKind::Constant) && !wrapped->is(ValueKind::Tuple)) {
        abort_trace(BreakCode::UnsupportedAttribute, "an enum value that is not a Python constant");
      }
      return wrapped;
    }
  }
  return nullptr;
}

ValuePtr FrameTracer::compare_enum(int cmp, const ValuePtr& a, const ValuePtr& b) {
  if (cmp != Py_EQ && cmp != Py_NE) return nullptr;
  const bool a_member = a->is(ValueKind::Object) && is_enum_member(a->obj.get());
  const bool b_member = b->is(ValueKind::Object) && is_enum_member(b->obj.get());
  if (!a_member && !b_member) return nullptr;
  for (const ValuePtr& side : {a, b}) {
    if (!side->is(ValueKind::Constant) && !(side->is(ValueKind::Object) && is_enum_member(side->obj.get()))) {
      return nullptr;
    }
    if (!native_equality(Py_TYPE(side->obj.get()))) return nullptr;
  }
  PyRef result = PyRef::steal(PyObject_RichCompare(a->obj.get(), b->obj.get(), cmp));
  if (!result) abort_trace(BreakCode::PythonException, take_python_error());
  return state_.wrap_unguarded(result.get());
}

}  // namespace kiln::tracer
