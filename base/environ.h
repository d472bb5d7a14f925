// os.environ as the tracer and guards read it (Note [Environment variables]
// in tracer/trace_environ.cpp).
#pragma once

#include <Python.h>

namespace kiln::base {

// The os.environ mapping (borrowed; os is imported on first use), or null.
PyObject* environ_object();

// The function os.getenv (borrowed), or null.
PyObject* getenv_function();

// os.environ.get(name): a new reference, or null (no error set) when the
// variable is unset.
PyObject* environ_value(PyObject* name);

}  // namespace kiln::base
