// The tracer's entry point: symbolically interprets one frame's bytecode
// into a graph plus the guards it depends on.
#pragma once

#include <Python.h>

#include <memory>
#include <string>

#include "graph/graph.h"
#include "guards/guard_set.h"
#include "tracer/break_reason.h"

namespace kiln::tracer {

// What a trace produced: a graph and its guards, or why it stopped.
struct TraceResult {
  bool ok = false;
  std::unique_ptr<guards::GuardSet> guards;
  std::unique_ptr<graph::Graph> graph;
  BreakCode code = BreakCode::UnsupportedOpcode;
  std::string reason;  // "file.py:12: message" (without the hint)
  std::string hint;
};

// Traces a frame about to run `code` as function `func` (borrowed, may be
// null) with arguments visible through `frame`. Never leaves a Python error
// set: failures come back as !ok with a reason.
TraceResult trace_frame(PyCodeObject* code, PyObject* func, const guards::FrameView& frame);

}  // namespace kiln::tracer
