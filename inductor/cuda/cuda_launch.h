// How a kernel's rows map onto CUDA threads: the shape launch
// configurations are chosen from, the default heuristic and the checks a
// configuration must pass (Note [CUDA kernels], Note [CUDA launch
// configurations]); the public choices are declared in cuda_source.h.
#pragma once

#include <cstdint>

#include "inductor/cuda/cuda_source.h"

namespace kiln::inductor::cuda::detail {

constexpr int kPointwiseBlock = 256;
constexpr int kTileBlock = 256;
constexpr int64_t kSerialRow = 16;      // rows up to this many points: one thread each
constexpr int64_t kWarpRow = 512;       // up to this: one warp each
// Rows up to kWarpRow points share warps: the power of two of threads per
// row (2..32) giving each at most kWarpRowItems points, kRowBlock threads a
// block. A warp per row of 256 bfloat16s (session 7, H100) left each lane
// one 16-byte load and the SM too few bytes in flight: softmax over
// [64, 6, 256, 256] ran at a third of the memory's bandwidth.
constexpr int kWarpRowItems = 16;
constexpr int kRowBlock = 256;
constexpr int kSplitThreads = 8;            // split tile rows: threads per row, at least
// ... when there are at most this many rows. Was 65536: a GELU backward's
// bias-gradient partials, [64, 256, 1536] summed over 256 (98304 rows),
// then ran one thread a row, 256 dependent loads each.
constexpr int64_t kSplitMaxRows = int64_t{1} << 24;
constexpr int64_t kSplitMinPoints = 64;     // ... of at least this many points
// Tall outer reductions (a bias gradient: [16384, 384].sum(0)) have few
// rows; up to 32 threads share each, until the kernel has this many.
constexpr int64_t kSplitTargetThreads = 65536;
constexpr int kSplitUnroll = 8;             // reduced points a split-tile thread loads ahead
constexpr int kPersistentItems = 8;     // points per thread of a persistent serial or warp row
// Block rows: points per thread the default aims for (threads per row the
// power of two that gives at most this many, 128..1024). 16 rather than 8:
// a row's registers are its points plus a per-thread overhead (indices,
// accumulators), so fewer threads per row leave room for more rows per SM
// in flight, and each combine has fewer warps to gather (Note [CUDA launch
// configurations]; 8 was the default before, and is a candidate).
constexpr int kBlockRowItems = 16;
constexpr int kMaxItems = 32;           // candidates: most points per thread in registers
constexpr int kMaxBlock = 1024;
constexpr int64_t kMaxGrid = int64_t{1} << 20;
constexpr int64_t kInt32Limit = int64_t{1} << 30;

// The smallest power of two >= n.
int64_t pow2_at_least(int64_t n);

// A kernel's rows (Note [CUDA kernels]): what its launch configurations
// are chosen from.
struct RowShape {
  bool reduces = false;    // some dim is reduced
  int tile = -1;           // the tile dim (outer reductions), or -1
  int64_t rows = 1;        // kept points
  int64_t row_points = 1;  // reduced points per row
};

// The rows of kernel `k`.
RowShape row_shape(const Kernel& k);

// Points per thread of `tpr` threads over a row of `shape`.
int64_t items_per_thread(const RowShape& shape, int tpr);

// `config` with max_items the points each thread actually keeps (0 when the
// row loops over memory), so that configurations generating the same code
// compare equal.
LaunchConfig normalized(LaunchConfig config, const RowShape& shape);

// The heuristic (Note [CUDA kernels]).
LaunchConfig default_for(const RowShape& shape);

// Throws CudaError unless generate_cuda_source can lay `k` out as `config`
// says (Note [CUDA launch configurations]).
void check_config(const Kernel& k, const LaunchConfig& config);

}  // namespace kiln::inductor::cuda::detail
