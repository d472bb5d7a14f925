// Bytecode for graph breaks: the transformed code that runs a frame's graph,
// then the instruction CPython must run, then a resume function that
// continues the original code after it. See Note [Graph breaks].
#pragma once

#include <Python.h>

#include <string>

#include "graph/graph.h"
#include "guards/source.h"
#include "tracer/tracer.h"

namespace kiln::tracer {

// Note [Graph breaks]
// A trace that stops at instruction i of frame F (BreakInfo) yields a graph
// of everything before i and the symbolic stack and locals there. The
// transformed code T, called with F's argument slots as plain positional
// parameters, does:
//   1. out = graph(*inputs), inputs loaded from their sources;
//   2. rebuilds locals bound at i into temporaries, and the stack below i
//      (tensors from `out`, Python values from constants and sources) --
//      except NULLs below the operands of i, which cannot be passed on;
//   3. runs instruction i itself, copied from F (with KW_NAMES/PRECALL);
//   4. for each successor s of i (fall-through, jump target) calls
//      __resume_at_<s>_<name>(*stack, *locals) and returns its result.
// The resume code R_s takes the stack values (minus NULLs) then the bound
// locals as arguments, pushes the stack back (restoring NULLs, turning
// iterators passed as tuples back into iterators), jumps to s in a full
// copy of F's body with locals renumbered, and is traced like any frame
// when called. Frames with cell or free variables do not break (yet).

// Builds T for `code` broken as `info` says, with `graph_callable` (a
// Python callable running `graph`) in its constants. Returns a new
// reference, or null with *error set and no Python error.
PyObject* build_break_code(PyCodeObject* code, const BreakInfo& info,
                           const guards::SourceTable& sources, const graph::Graph& graph,
                           PyObject* graph_callable, std::string* error);

}  // namespace kiln::tracer
