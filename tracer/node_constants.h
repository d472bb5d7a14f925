// Python objects that graph nodes hold as constants though the trace keeps
// them as other kinds of values: the builtin scalar types torch takes as
// dtypes, and functions the trace made (Note [Functions made in the trace
// as arguments] in node_constants.cpp).
#pragma once

#include <Python.h>

#include "base/py_ref.h"
#include "tracer/value.h"

namespace kiln::tracer {

// `value` as an object a graph node can hold as a constant argument (made
// now for a function the trace made), or null when it cannot be one.
PyRef node_constant_of(const ValuePtr& value);

}  // namespace kiln::tracer
