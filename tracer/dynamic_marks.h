// Dims users marked with torch._dynamo.mark_dynamic / mark_static (or
// kiln.mark_dynamic / kiln.mark_static, which set the same marks): a
// marked-dynamic dim of a frame's tensor argument is symbolic from the
// first trace, a marked-static dim never is (Note [Dynamic shapes]).
#pragma once

#include <Python.h>

#include <string>
#include <vector>

#include "guards/source.h"
#include "tracer/dynamic_shapes.h"

namespace kiln::tracer {

// Adds to *dims the marked-dynamic dims of the tensor arguments of a frame
// running `code` (maybe_mark_dynamic's too); returns the names of those
// marked by mark_dynamic ("L['x'] dim 0, ..."), "" when none.
std::string add_marked_dims(PyCodeObject* code, const guards::FrameView& frame, DynamicDims* dims);

// The dims of `tensor` marked static.
std::vector<int> static_dims(PyObject* tensor);

}  // namespace kiln::tracer
