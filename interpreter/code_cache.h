// The per-code-object cache, stored in co_extra: entries of (guards,
// compiled graph) or recorded trace failures, per compile config.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "guards/guard_set.h"
#include "interpreter/graph_callable.h"
#include "base/py_ref.h"
#include "tracer/tracer.h"

namespace kiln::interpreter {

// One compiled variant of a code object, or a failed attempt.
struct CacheEntry {
  uint64_t config_id = 0;
  bool failed = false;
  std::string reason;  // failed: "file:line: why"
  std::string hint;
  std::unique_ptr<guards::GuardSet> guards;
  std::shared_ptr<CompiledGraph> compiled;
  // Set when the trace ended at a graph break: code with the frame's
  // argument slots as positional parameters that runs the graph, then the
  // instruction CPython must run, then a resume function.
  base::PyRef transformed_code;
  // Stores the traced code made, replayed after the graph (whole-frame
  // entries; the graph then returns the result followed by their values).
  std::vector<tracer::SideEffect> effects;
};

// Everything kiln keeps for one code object.
// Entries are shared so that a caller checking or running one keeps it alive
// even if user code it triggers calls kiln.reset() (Note [Re-entrant reset]).
struct CodeCache {
  std::vector<std::shared_ptr<CacheEntry>> entries;
  // What automatic dynamic shapes learned, per compile config: input dims
  // seen changing size, or that this code must stay static.
  struct DynamicState {
    uint64_t config_id = 0;
    tracer::DynamicDims dims;
    bool static_only = false;  // a trace had to specialize
    // Dims an earlier run's profile made dynamic that this process has not
    // seen change nor kept in a trace (Note [Dynamic profiles]): dropped if
    // they make a trace fall back.
    std::vector<std::pair<std::string, int>> unseen_profile_dims;
  };
  std::vector<DynamicState> dynamic;
  // The state for a config, created on first use.
  DynamicState& dynamic_state(uint64_t config_id);
  uint64_t pruned_epoch = 0;  // dead_config_epoch() when last pruned
  bool skip = false;        // never traced (torch's or kiln's own code)
  bool untraced_below = false;  // nothing it runs is traced (Note [Imports run untraced])
  bool limit_logged = false;
  bool transform_logged = false;  // Note [Frames under torch.func transforms]
};

// Returns the code object's cache, creating it when `create`; null when
// absent and not created.
CodeCache* code_cache(PyCodeObject* code, bool create);

// Drops every entry of every code object (kiln.reset()).
void clear_all_code_caches();

// Drops the cache's entries whose compile config no longer exists.
void prune_dead_entries(CodeCache* cache);

}  // namespace kiln::interpreter
