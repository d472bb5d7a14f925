// Splitting a reduction's reduced range across threads when its kept points
// are too few to keep the threads busy (x.sum(), a [2, 8M] tensor summed
// over dim 1): which kernels split, into which chunks, and the workspace
// through which the chunks' partial results meet (Note [Split reductions]).
// The code generator and the kernel runner both follow the plan, which is
// a function of the kernel alone.
#pragma once

#include <cstdint>
#include <vector>

#include "inductor/kernel_ir.h"

namespace kiln::inductor {

// How a reducing kernel runs split; chunks == 0 for a kernel that is not.
struct ReductionSplit {
  int64_t chunks = 0;           // pieces of dim's range, each a partial result
  int dim = -1;                 // the outermost reduced dim, whose range chunks cut
  int64_t chunk_size = 0;       // indices of dim per chunk (the last may have fewer)
  int64_t kept_points = 0;      // points of the kept dims
  std::vector<int> reductions;  // the Reduce expressions; slot i is reductions[i]
  int phases = 0;               // the highest stage (Note [Reduction kernels])
  bool store_pass = false;      // some output varies along the reduced dims
};

// The split plan of `kernel` (Note [Split reductions]).
ReductionSplit split_reduction(const Kernel& kernel);

// Workspace words (int64) before the partial results: word 0 is the step.
constexpr int64_t kSplitHeaderWords = 8;

// The steps a split kernel runs, in order: per phase p (from 1) a partial
// step 2p - 2 and a combine step 2p - 1, then the store step 2 * phases.
int64_t split_steps(const ReductionSplit& split);

// Words of the workspace: the header; the partials, chunk c's of slot s at
// kept point k in word header + (c * kept_points + k) * slots + s; then the
// combined values, slot s at kept point k in word header + chunks *
// kept_points * slots + k * slots + s. A slot holds one value of its
// Reduce's dtype at the word's start (bool as a byte).
int64_t split_workspace_words(const ReductionSplit& split);

}  // namespace kiln::inductor
