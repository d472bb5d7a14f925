#include "tracer/tracer.h"

#include <algorithm>

#include "base/log.h"
#include "runtime/aten_bridge.h"
#include "tracer/frame_tracer.h"

namespace kiln::tracer {

namespace {

// One trace with the given dynamic dims; throws Specialize.
TraceResult trace_attempt(PyCodeObject* code, PyObject* func, const guards::FrameView& frame,
                          const DynamicDims& dynamic) {
  TraceResult result;
  // Traced `with torch.no_grad():` blocks switch the real mode while
  // tracing; the frame itself has not run yet, so put it back after.
  const bool grad_mode = runtime::grad_mode_enabled();
  const runtime::SavedTensorHooksPaused hooks_paused;
  // The tracer may run Python code (torch on meta tensors); an error left
  // over from the caller would be misattributed, so start clean.
  PyObject *saved_type, *saved_value, *saved_traceback;
  PyErr_Fetch(&saved_type, &saved_value, &saved_traceback);
  try {
    TraceState state(frame, dynamic);
    FrameTracer top(state, code, frame.globals, func, -1, 0);
    // Arguments are the only locals bound when a frame starts.
    const int nargs = code->co_argcount + code->co_kwonlyargcount +
                      ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                      ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
    std::vector<ValuePtr> locals(code->co_nlocalsplus);
    for (int i = 0; i < nargs; ++i) {
      PyObject* value = frame.localsplus[i];
      if (!value) continue;
      const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
      locals[i] = state.wrap(value, state.sources().local(i, name ? name : "?"));
    }
    top.set_locals(std::move(locals));
    ValuePtr returned;
    try {
      returned = top.run();
    } catch (Specialize& specialize) {
      specialize.used_ints = state.has_int_symbols();
      throw;
    }
    if (state.break_info()) {
      graph::Arg outputs;
      outputs.kind = graph::Arg::Kind::Tuple;
      for (int node : state.break_info()->outputs) outputs.items.push_back(graph::Arg::of_node(node));
      state.graph().set_output(std::move(outputs));
      result.partial = std::move(state.break_info());
      result.code = state.break_code;
      result.reason = state.break_reason;
      result.hint = break_code_hint(state.break_code);
    } else if (!state.stores.empty()) {
      // (result, stored values...): see Note [Side effects].
      std::vector<ValuePtr> roots{returned};
      for (const auto& store : state.stores) roots.push_back(store.value);
      state.plan_output_identity(roots);
      graph::Arg outputs;
      outputs.kind = graph::Arg::Kind::Tuple;
      outputs.items.push_back(state.lower_output(returned));
      for (const auto& store : state.stores) {
        const bool contents = store.effect.kind == SideEffect::Kind::ListContents ||
                              store.effect.kind == SideEffect::Kind::DictContents;
        outputs.items.push_back(contents ? state.lower_contents(store.value) : state.lower_output(store.value));
        result.effects.push_back(store.effect);
      }
      state.graph().set_output(std::move(outputs));
    } else {
      state.plan_output_identity({returned});
      state.graph().set_output(state.lower_output(returned));
    }
    result.ok = true;
    result.graph = state.take_graph();
    state.guard_distinct_objects();
    result.guards = state.take_guards();
  } catch (const TraceAbort& abort) {
    result.ok = false;
    result.code = abort.code;
    // An abort with no instruction to name comes from the frame's end: what
    // it returns or stores cannot leave a graph (torch's ModuleList.__iter__
    // returns an iterator). Say so, at the frame's own line.
    const std::string location = abort.location.empty() ? std::string(PyUnicode_AsUTF8(code->co_filename)) + ":" +
                                                              std::to_string(code->co_firstlineno)
                                                        : abort.location;
    const std::string what = abort.location.empty() ? std::string(abort.what()) + " (what the frame returns or stores)"
                                                    : std::string(abort.what());
    result.reason = location + ": " + what + abort.detail;
    result.hint = break_code_hint(abort.code);
  } catch (const Specialize&) {
    PyErr_Clear();
    runtime::set_grad_mode(grad_mode);
    PyErr_Restore(saved_type, saved_value, saved_traceback);
    throw;
  }
  PyErr_Clear();
  runtime::set_grad_mode(grad_mode);
  PyErr_Restore(saved_type, saved_value, saved_traceback);
  return result;
}

// trace_attempt, again while a trace stops at a custom Function whose
// backward kiln cannot trace: the class is refused from then on and its
// call traced as one node (Note [Traced Function backwards]). Each retry
// refuses one more class, so this ends.
TraceResult trace_once(PyCodeObject* code, PyObject* func, const guards::FrameView& frame,
                       const DynamicDims& dynamic) {
  for (;;) {
    const size_t refused = refused_function_count();
    TraceResult result = trace_attempt(code, func, frame, dynamic);
    if (refused_function_count() == refused) return result;
    KILN_LOG(breaks, "retracing with a custom Function's call as one node: " << result.reason);
  }
}

// How far a trace got: a whole graph beats a graph break, a later break an
// earlier one, and any graph a failure.
int progress(const TraceResult& result) {
  if (!result.ok) return -1;
  if (!result.partial) return 1 << 30;
  return result.partial->instruction;
}

// The dynamic dims to try, in order: as asked; without the ints asked (Note
// [Dynamic ints]); if that specializes and several dims were asked, shifted
// sample points (Note [Shifted sample points]); then dim 0s only (the
// batch). Static sizes come last.
std::vector<DynamicDims> attempts_for(const DynamicDims& dynamic) {
  std::vector<DynamicDims> attempts{dynamic};
  if (dynamic.has_ints()) {
    // Dynamic ints go first (Note [Dynamic ints]); trace_frame skips the
    // attempt right after when the one with ints had none to drop.
    for (DynamicDims& attempt : attempts_for(dynamic.without_ints())) attempts.push_back(std::move(attempt));
    return attempts;
  }
  const bool several = dynamic.all_arguments || dynamic.dims.size() >= 2 || !dynamic.changed_sizes.empty();
  if (!dynamic.shifted_points && several) {
    attempts.push_back(dynamic);
    attempts.back().shifted_points = true;
  }
  const bool beyond_leading = dynamic.all_arguments ||
      std::any_of(dynamic.dims.begin(), dynamic.dims.end(), [](const auto& d) { return d.second != 0; });
  if (beyond_leading && dynamic.changed_sizes.empty()) {
    attempts.push_back(dynamic);
    attempts.back().leading_only = true;
    attempts.back().shifted_points = false;
  }
  return attempts;
}

}  // namespace

TraceResult trace_frame(PyCodeObject* code, PyObject* func, const guards::FrameView& frame,
                        const DynamicDims& dynamic) {
  if (dynamic.empty()) return trace_once(code, func, frame, dynamic);
  // Dims guessed to change together with a changed one (Note [Sizes that
  // change together]) are tried first and dropped if they cost anything.
  std::vector<DynamicDims> attempts;
  size_t guessed = 0;
  if (!dynamic.changed_sizes.empty()) {
    attempts = attempts_for(dynamic);
    guessed = attempts.size();
    DynamicDims plain = dynamic;
    plain.changed_sizes.clear();
    plain.known_sources.clear();
    if (!plain.empty()) {
      for (DynamicDims& attempt : attempts_for(plain)) attempts.push_back(std::move(attempt));
    }
  } else {
    attempts = attempts_for(dynamic);
  }
  std::string why;
  bool ints_blamed = false;  // a trace with dynamic ints specialized on them
  for (size_t a = 0; a < attempts.size(); ++a) {
    const DynamicDims& attempt = attempts[a];
    try {
      TraceResult result = trace_once(code, func, frame, attempt);
      if (result.ok && !result.partial) {
        result.specialized = attempt.leading_only ? why : "";
        result.leading_only = attempt.leading_only;
        result.ints_static = ints_blamed && !attempt.has_ints();
        result.shifted_points = attempt.shifted_points;
        return result;
      }
      if (a < guessed) {  // a guess that breaks the graph is no guess to keep
        KILN_LOG(dynamic, "a trace with guessed dynamic dims stops early: " << result.reason);
        continue;
      }
      // Symbolic sizes must never cost a graph: if the static trace gets
      // further, it wins.
      TraceResult fixed = trace_once(code, func, frame, {});
      if (progress(fixed) <= progress(result)) {
        result.specialized = attempt.leading_only ? why : "";
        result.leading_only = attempt.leading_only;
        result.ints_static = ints_blamed && !attempt.has_ints();
        result.shifted_points = attempt.shifted_points;
        return result;
      }
      fixed.specialized = "with dynamic sizes the trace stops earlier: " + result.reason;
      return fixed;
    } catch (const Specialize& specialize) {
      // Without ints, a trace that read none would fail the same way: the
      // int-free attempt right after is skipped.
      if (attempt.has_ints() && specialize.used_ints) ints_blamed = true;
      if (!specialize.used_ints && attempt.has_ints() && a + 1 < attempts.size() && !attempts[a + 1].has_ints()) {
        ++a;
      }
      if (a < guessed) {
        KILN_LOG(dynamic, "a trace with guessed dynamic dims specializes: " << specialize.what() << " ("
                                                                            << specialize.location << ")");
        continue;
      }
      why = specialize.what();
      if (!specialize.location.empty()) why += " (" + specialize.location + ")";
    }
  }
  TraceResult fixed = trace_once(code, func, frame, {});
  fixed.specialized = why;
  return fixed;
}

}  // namespace kiln::tracer
