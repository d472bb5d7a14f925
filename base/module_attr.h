// One attribute of an importable module, read once by callers that keep it
// for the process (torch and stdlib types and functions the tracer checks).
#pragma once

#include <Python.h>

namespace kiln::base {

// `module`.`name` after importing `module`: a new reference, or null with no
// Python error set when either is missing. Callers that keep it in a static
// hold it for the process.
PyObject* import_attr(const char* module, const char* name);

}  // namespace kiln::base
