// The tracer's entry point: symbolically interprets one frame's bytecode
// into a graph plus the guards it depends on.
#pragma once

#include <Python.h>

#include <memory>
#include <string>

#include "graph/graph.h"
#include "guards/guard_set.h"
#include "tracer/break_reason.h"
#include "tracer/dynamic_shapes.h"
#include "tracer/value.h"

namespace kiln::tracer {

// A store the traced code made to state the caller can see, replayed after
// the graph runs: target.name = value (an attribute), or globals[name] =
// value. See Note [Side effects] in trace_state.cpp.
struct SideEffect {
  // Attr: target.name = value; Global: globals[name] = value; ListContents
  // / DictContents: the caller's list or dict gets value's items (same
  // object, new contents).
  // Call: callee(*value), a logging call deferred to after the graph
  // (Note [Deferred logging] in trace_calls.cpp).
  enum class Kind : uint8_t { Attr, Global, ListContents, DictContents, Call } kind = Kind::Attr;
  int target_source = -1;  // Attr, *Contents: the object's source in the guard set
  base::PyRef name;
  base::PyRef globals;  // Global: the dict written
  base::PyRef callee;   // Call: the bound method called
};

// Where a trace stopped at an instruction that CPython must run (a graph
// break), and the symbolic state just before it. The graph then covers the
// code up to that instruction and returns the tensors of `outputs`.
struct BreakInfo {
  int instruction = -1;           // index into decode_bytecode(code)
  std::vector<ValuePtr> stack;    // value stack before it, bottom first
  std::vector<ValuePtr> locals;   // localsplus slots before it (null: unbound)
  std::vector<int> outputs;       // graph nodes returned, in tuple order
  // Stores made before the break, applied by the transformed code before
  // the instruction CPython runs (their values are rebuilt like locals).
  struct PendingStore {
    SideEffect effect;
    ValuePtr value;
  };
  std::vector<PendingStore> stores;
  // Tensor locals with dynamic dims, as (name, dim): the resume functions
  // trace them as dynamic from their first call (Note [Dynamic shapes]).
  std::vector<std::pair<std::string, int>> dynamic_locals;
};

// What a trace produced: a graph and its guards, or why it stopped.
struct TraceResult {
  bool ok = false;
  // Set when the frame was traced up to a graph break (ok is true then;
  // code/reason/hint say why it broke).
  std::unique_ptr<BreakInfo> partial;
  // For a whole-frame graph: stores to replay after it; the graph then
  // returns (frame result, value of store 0, value of store 1, ...).
  std::vector<SideEffect> effects;
  std::unique_ptr<guards::GuardSet> guards;
  std::unique_ptr<graph::Graph> graph;
  BreakCode code = BreakCode::UnsupportedOpcode;
  std::string reason;  // "file.py:12: message" (without the hint)
  std::string hint;
  // Set when dynamic sizes were asked for but the trace had to use static
  // ones; says why (Note [Dynamic shapes]).
  std::string specialized;
  // With `specialized`: the trace kept dim 0s dynamic (and only those).
  bool leading_only = false;
  // The trace kept the tensor dims dynamic without the dynamic ints asked
  // for (Note [Dynamic ints]): later traces list them static.
  bool ints_static = false;
  // The dynamic trace needed shifted sample points (Note [Shifted sample
  // points]); later traces of the code should start with them.
  bool shifted_points = false;
};

// Traces a frame about to run `code` as function `func` (borrowed, may be
// null) with arguments visible through `frame`, leaving the `dynamic` input
// dims symbolic where it can. Never leaves a Python error set: failures
// come back as !ok with a reason.
TraceResult trace_frame(PyCodeObject* code, PyObject* func, const guards::FrameView& frame,
                        const DynamicDims& dynamic = {});

}  // namespace kiln::tracer
