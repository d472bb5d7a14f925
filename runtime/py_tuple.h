// Python tuples made from C++ values.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/py_ref.h"

namespace kiln::runtime {

// A tuple of Python ints (sizes, strides), or null with a Python error set.
PyRef int_tuple(const std::vector<int64_t>& values);

}  // namespace kiln::runtime
