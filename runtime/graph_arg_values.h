// Building the Python values of graph::Args at run time, shared by the
// executors: node refs index an array of live values, constants are reused.
#pragma once

#include <Python.h>

#include "graph/graph.h"

namespace kiln::runtime {

// Builds the Python value of `arg`; Node refs read values[arg.node]
// (borrowed, must be live). Returns a new reference, or null with a Python
// error set.
PyObject* materialize_arg(const graph::Arg& arg, PyObject* const* values);

}  // namespace kiln::runtime
