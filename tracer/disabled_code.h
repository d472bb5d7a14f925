// Code of functions marked torch.compiler.disable / torch._dynamo.disable:
// the frame hook runs their frames as CPython does, so the marker holds
// for everything the function runs, as it does under torch.compile.
#pragma once

#include <Python.h>

namespace kiln::tracer {

// Records `code` (kept for the process) as the code of a disabled function.
void mark_disabled_code(PyCodeObject* code);

// True when `code` was recorded; one flag test while none was.
bool is_disabled_code(PyCodeObject* code);

// Records the code of a disable marker's wrapper `func` and of what it
// calls (_torchdynamo_orig_callable, or __wrapped__), where a function.
void mark_disabled_target(PyObject* func);

}  // namespace kiln::tracer
