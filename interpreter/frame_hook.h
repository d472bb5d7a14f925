// kiln's PEP 523 frame evaluator: looks up a frame's code cache, checks
// guards, runs a cached graph or traces a new one, and otherwise lets
// CPython run the frame.
#pragma once

#include <Python.h>

namespace kiln::interpreter {

// Installs kiln's evaluator for this interpreter (idempotent).
void install_frame_hook();

// Restores CPython's own evaluator.
void uninstall_frame_hook();

// Registers the Python exception type raised for fullgraph failures
// (kiln.Unsupported); takes a reference.
void set_unsupported_error(PyObject* type);

}  // namespace kiln::interpreter
