// Where torch's meta kernels give a result another layout than its CPU and
// CUDA kernels do, the real layout for a fake (the tracer's, and a size instance's replay) (Note [Meta
// layouts] in meta_layouts.cpp).
#pragma once

#include <Python.h>

#include <string>

#include "base/py_ref.h"
#include "graph/tensor_meta.h"

namespace kiln::tracer {

// `result` (the fake a call of `name` on the tuple `fake_args` made on the
// meta device) with the strides the real call gives on a `device` tensor;
// the result itself where meta and real agree, null with a Python error
// set when the conversion fails.
base::PyRef with_real_layout(const std::string& name, PyObject* fake_args, base::PyRef result,
                             graph::DeviceType device);

}  // namespace kiln::tracer
