// Warnings kiln gives the user from C++ (a mark that cannot hold, a graph
// or frame left to eager execution by a kiln bug).
#pragma once

#include <Python.h>

#include <string>

namespace kiln::base {

// Issues `message` as a Python warning of `category` (UserWarning,
// RuntimeWarning). Where the warnings filter turns it into an error, the
// error is dropped: kiln's fallback still runs, so the call it belongs to
// does not fail for having been explained.
void warn(PyObject* category, const std::string& message);

}  // namespace kiln::base
