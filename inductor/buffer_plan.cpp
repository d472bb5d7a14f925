#include "inductor/buffer_plan.h"

#include <algorithm>
#include <limits>
#include <set>

#include "inductor/kernel_ir.h"

namespace kiln::inductor {

// Note [Buffer reuse]
// A kernel allocates its outputs; a later kernel may instead write into
// the buffer of an earlier kernel's output that is dead by then, which
// saves the allocation (for buffers over glibc's 32 MiB mmap threshold, a
// fresh mapping and a page fault per page on first touch) and keeps peak
// memory down. The buffer of kernel output r is dead before step s when
// every value that may share its storage was last read before s and none
// is a graph output. "May share" follows the steps that can return their
// reads' storage: views, torch calls (an extern may return an argument or
// a view of one) and dtype conversions (torch's .to returns its input when
// nothing changes); every other prim makes a fresh tensor. A recipient
// gets the smallest dead buffer of at least its bytes and at most twice
// them (a larger one would keep memory alive for nothing), any dtype; the
// buffer is its own from then on (the donor's storage passes to it), so it
// can be handed on again once it dies. The donor is never read by the
// step writing into it (it died strictly before), so outputs never overlap
// inputs (Note [CPU kernel ABI]). Graph inputs are never reused: the
// caller owns them.

int64_t tensor_span_bytes(const graph::TensorMeta& meta) {
  int64_t extent = 1;
  for (size_t d = 0; d < meta.sizes.size(); ++d) {
    if (meta.sizes[d] == 0) return 0;
    extent += (meta.sizes[d] - 1) * meta.strides[d];
  }
  return extent * item_size(meta.dtype);
}

std::vector<std::vector<int>> plan_buffer_reuse(const prims::PrimGraph& graph, const std::vector<PlanUnit>& units) {
  constexpr int kForever = std::numeric_limits<int>::max();
  const size_t value_count = graph.values().size();
  const int unit_count = static_cast<int>(units.size());
  std::vector<int> last_use(value_count, -1);
  for (int s = 0; s < unit_count; ++s) {
    for (int v : units[s].reads) last_use[v] = std::max(last_use[v], s);
  }
  for (int v : graph.outputs()) last_use[v] = kForever;

  // The kernel buffers (named by the value a kernel allocated them for)
  // each value may share storage with, and when each buffer dies.
  std::vector<std::set<int>> buffers_of(value_count);
  std::vector<int> dead_after(value_count, -1);  // per buffer
  std::vector<int> made_at(value_count, -1);
  for (int s = 0; s < unit_count; ++s) {
    const PlanUnit& unit = units[s];
    std::set<int> shared;
    if (unit.may_alias_reads) {
      for (int v : unit.reads) shared.insert(buffers_of[v].begin(), buffers_of[v].end());
    }
    for (int v : unit.outputs) {
      made_at[v] = s;
      if (unit.kernel) {
        buffers_of[v] = {v};
      } else {
        buffers_of[v] = shared;
      }
    }
  }
  for (size_t v = 0; v < value_count; ++v) {
    for (int buffer : buffers_of[v]) {
      dead_after[buffer] = std::max({dead_after[buffer], last_use[v], made_at[v]});
    }
  }

  std::vector<std::vector<int>> plan(units.size());
  // Dead buffers not handed on yet: (bytes, value). A buffer enters once
  // the step after its death begins.
  std::set<std::pair<int64_t, int>> free;
  std::vector<std::vector<int>> dies_at(units.size());
  std::vector<int64_t> bytes(value_count, 0);
  for (int s = 0; s < unit_count; ++s) {
    for (int buffer : dies_at[s]) free.insert({bytes[buffer], buffer});
    const PlanUnit& unit = units[s];
    plan[s].assign(unit.outputs.size(), -1);
    if (!unit.kernel) continue;
    for (size_t i = 0; i < unit.outputs.size(); ++i) {
      const int v = unit.outputs[i];
      const int64_t need = tensor_span_bytes(graph.value(v).meta);
      bytes[v] = need;
      if (need > 0) {
        auto found = free.lower_bound({need, -1});
        if (found != free.end() && found->first <= 2 * need) {
          plan[s][i] = found->second;
          bytes[v] = found->first;  // the storage it now owns
          free.erase(found);
        }
      }
      const int death = dead_after[v];
      if (death != kForever && death + 1 < unit_count && bytes[v] > 0) dies_at[death + 1].push_back(v);
    }
  }
  return plan;
}

}  // namespace kiln::inductor
