// Reading a class's own namespace. Python 3.12 keeps the dicts of static
// builtin types (object, tuple, list) outside tp_dict, which is then null:
// read them through type.__dict__, which works for every type on 3.11 and
// 3.12 alike.
#pragma once

#include <Python.h>

#include "base/py_ref.h"

namespace kiln::base {

// The attribute `name` defined by `type` itself (not inherited), as a new
// reference, or null with no Python error set when it has none.
PyRef own_class_attr(PyTypeObject* type, PyObject* name);

// As own_class_attr, with the name as a C string.
PyRef own_class_attr(PyTypeObject* type, const char* name);

}  // namespace kiln::base
