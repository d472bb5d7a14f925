#include "inductor/reduction_split.h"

#include <algorithm>

namespace kiln::inductor {
namespace {

// Note [Split reductions]
// A reducing kernel's threads split its parallel dim, the first kept dim
// (Note [Kernel threads]). A kernel with no kept dim (x.sum(), var_mean
// over everything) or only a few kept points (a [2, 8M] tensor summed
// over dim 1) would keep one or two threads busy, so such a kernel splits
// its outermost reduced dim instead, into `chunks` ranges of chunk_size
// indices, and runs in steps, one call per step (the step is word 0 of a
// workspace the runner passes as one more data pointer, after the
// outputs; the calls of a step take chunk indices as [begin, end)):
//   - partial step of phase p: each chunk reduces its range, for every
//     kept point, into the partial of each stage-p Reduce (float max/min
//     already NaN when the range held a NaN); earlier stages' Reduces are
//     read from the combined values;
//   - combine step of phase p (one call, begin 0): per kept point, each
//     stage-p partial of chunk 0, 1, ... folds in that fixed order with
//     the Reduce's op (float sums in sequence, max/min letting NaN win,
//     as torch's amax/amin do) into the combined value;
//   - store step: outputs constant along the reduced dims are stored by
//     chunk 0 from the combined values; outputs that vary along them
//     (softmax's exp(x - max) / sum) are stored by each chunk over its
//     range.
// So multi-stage kernels (var_mean's second pass needs the mean, softmax
// needs the max, then the sum) split as well, each phase a pass of its
// own. Chunks depend only on the kernel's sizes, never on the thread
// count, and combine in one order, so a result is the same bits on any
// number of threads (though not the bits of the unsplit kernel, whose
// float sums associate differently). A tile-mode kernel (an outer
// reduction over a few columns, e.g. [8M, 2].sum(0)) splits the same way,
// each lane's accumulator a partial of its own kept point. Row stashes are
// not used by split kernels: a row's phases run in different calls.
constexpr int64_t kMaxKeptPoints = 16;       // more kept points: split those across threads
constexpr int64_t kMinChunkPoints = 32768;   // a chunk's work at least (kernel points)
constexpr int64_t kMaxChunks = 64;           // partials per kept point at most
constexpr int64_t kChunkAlign = 16;          // chunk starts aligned for vector loops

}  // namespace

ReductionSplit split_reduction(const Kernel& k) {
  ReductionSplit split;
  if (k.reduced.empty()) return split;
  int64_t kept = 1, reduced = 1;
  for (int d = 0; d < static_cast<int>(k.sizes.size()); ++d) {
    (is_reduced(k, d) ? reduced : kept) *= k.sizes[d];
  }
  const int dim = k.reduced.front();
  const int64_t extent = k.sizes[dim];
  if (kept == 0 || reduced == 0 || kept >= kMaxKeptPoints) return split;
  int64_t chunks = std::min({kMaxChunks, kept * reduced / kMinChunkPoints, extent});
  if (chunks < 2) return split;
  int64_t size = (extent + chunks - 1) / chunks;
  if (extent >= kChunkAlign * chunks) size = (size + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  chunks = (extent + size - 1) / size;
  if (chunks < 2) return split;
  split.chunks = chunks;
  split.dim = dim;
  split.chunk_size = size;
  split.kept_points = kept;
  const std::vector<int> stages = expr_stages(k);
  for (size_t id = 0; id < k.exprs.size(); ++id) {
    if (k.exprs[id].kind != ExprKind::Reduce) continue;
    split.reductions.push_back(static_cast<int>(id));
    split.phases = std::max(split.phases, stages[id]);
  }
  const std::vector<bool> varies = expr_varies(k);
  for (const KernelOutput& out : k.outputs) {
    bool full = varies[out.value];
    for (int d : k.reduced) full = full || (out.strides[d] != 0 && k.sizes[d] > 1);
    split.store_pass = split.store_pass || full;
  }
  return split;
}

int64_t split_steps(const ReductionSplit& split) { return 2 * int64_t{split.phases} + 1; }

int64_t split_workspace_words(const ReductionSplit& split) {
  const int64_t slots = static_cast<int64_t>(split.reductions.size());
  return kSplitHeaderWords + (split.chunks + 1) * split.kept_points * slots;
}

}  // namespace kiln::inductor
