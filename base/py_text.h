// Python objects as text, for logs, graph text and error messages.
#pragma once

#include <Python.h>

#include <string>

namespace kiln::base {

// repr(obj) as UTF-8; "<unprintable>" (and no Python error left) if repr fails.
std::string py_repr(PyObject* obj);

}  // namespace kiln::base
