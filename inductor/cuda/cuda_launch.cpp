#include "inductor/cuda/cuda_launch.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kiln::inductor::cuda {
namespace detail {

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

RowShape row_shape(const Kernel& k) {
  RowShape shape;
  shape.tile = tile_dim(k);
  for (int d = 0; d < static_cast<int>(k.sizes.size()); ++d) {
    if (is_reduced(k, d)) {
      shape.reduces = true;
      shape.row_points *= k.sizes[d];
    } else {
      shape.rows *= k.sizes[d];
    }
  }
  return shape;
}

int64_t items_per_thread(const RowShape& shape, int tpr) { return (shape.row_points + tpr - 1) / tpr; }

LaunchConfig normalized(LaunchConfig config, const RowShape& shape) {
  if (!shape.reduces || shape.row_points == 0) return config;
  const int64_t items = items_per_thread(shape, config.threads_per_row);
  config.max_items = items <= config.max_items ? static_cast<int>(items) : 0;
  return config;
}

LaunchConfig default_for(const RowShape& shape) {
  LaunchConfig c;
  c.max_items = kPersistentItems;
  if (!shape.reduces) {
    c.threads_per_row = 1;
    c.rows_per_block = kPointwiseBlock;
    c.max_items = 0;
  } else if (shape.tile >= 0 && shape.rows <= kSplitMaxRows && shape.row_points >= kSplitMinPoints) {
    c.threads_per_row = kSplitThreads;
    while (c.threads_per_row < 32 && shape.rows * c.threads_per_row < kSplitTargetThreads &&
           shape.row_points >= 4 * kSplitMinPoints * c.threads_per_row) {
      c.threads_per_row *= 2;
    }
    c.rows_per_block = 32;
  } else if (shape.tile >= 0 || shape.row_points <= kSerialRow) {
    c.threads_per_row = 1;
    c.rows_per_block = kTileBlock;
  } else if (shape.row_points <= kWarpRow) {
    c.threads_per_row = static_cast<int>(
        std::clamp<int64_t>(pow2_at_least((shape.row_points + kWarpRowItems - 1) / kWarpRowItems), 2, 32));
    c.rows_per_block = kRowBlock / c.threads_per_row;
    c.max_items = kWarpRowItems;
  } else {
    c.threads_per_row = static_cast<int>(
        std::clamp<int64_t>(pow2_at_least((shape.row_points + kBlockRowItems - 1) / kBlockRowItems), 128, kMaxBlock));
    c.rows_per_block = 1;
    c.max_items = kBlockRowItems;
  }
  return normalized(c, shape);
}

void check_config(const Kernel& k, const LaunchConfig& config) {
  const RowShape shape = row_shape(k);
  auto refuse = [&](const std::string& why) {
    throw CudaError("launch configuration " + format_launch_config(config) + " does not fit kernel " + k.name +
                    ": " + why);
  };
  if (config.vector_bytes != 0 && config.vector_bytes != 8 && config.vector_bytes != 16) {
    refuse("vector accesses are 0, 8 or 16 bytes");
  }
  if (config.min_blocks_per_sm < 0 || config.min_blocks_per_sm > 32) refuse("min_blocks_per_sm is 0..32");
  if (!shape.reduces || shape.tile >= 0) {
    const LaunchConfig d = default_for(shape);
    if (config.threads_per_row != d.threads_per_row || config.rows_per_block != d.rows_per_block ||
        normalized(config, shape).max_items != d.max_items) {
      refuse("pointwise kernels and reductions with a tile dim have only their default layout");
    }
    return;
  }
  const int tpr = config.threads_per_row;
  if (!(tpr >= 1 && tpr <= kMaxBlock && (tpr & (tpr - 1)) == 0)) {
    refuse("threads_per_row is a power of two from 1 to 1024");
  }
  if (config.rows_per_block < 1 || int64_t{tpr} * config.rows_per_block > kMaxBlock) {
    refuse("a block holds 1 to 1024 threads");
  }
  if (config.max_items < 0 || config.max_items > 2 * kMaxItems) refuse("max_items is 0..64");
}

}  // namespace detail

using namespace detail;

std::string format_launch_config(const LaunchConfig& config) {
  std::string text = "tpr=" + std::to_string(config.threads_per_row) + " rpb=" +
                     std::to_string(config.rows_per_block) + " items<=" + std::to_string(config.max_items) +
                     " vec=" + std::to_string(config.vector_bytes) + "B";
  if (config.min_blocks_per_sm > 0) text += " minblocks=" + std::to_string(config.min_blocks_per_sm);
  if (config.runtime_layout) text += " layout=run-time";
  return text;
}

LaunchConfig default_launch_config(const Kernel& kernel) { return default_for(row_shape(kernel)); }

std::vector<LaunchConfig> launch_candidates(const Kernel& kernel) {
  const RowShape shape = row_shape(kernel);
  const LaunchConfig first = default_for(shape);
  std::vector<LaunchConfig> out{first};
  auto add = [&](const LaunchConfig& c) {
    const LaunchConfig n = normalized(c, shape);
    if (out.size() < kMaxLaunchCandidates && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  const bool rows = shape.reduces && shape.tile < 0 && shape.row_points > kSerialRow;
  if (rows) {
    // Each power of two of threads per row that gives every thread at
    // least two points (a warp takes any row), kept in registers up to
    // kMaxItems a thread, else looping (only with 256 threads or more: a
    // long row's loop wants many loads in flight). Rows share blocks of
    // 128 or 256 threads when they take fewer threads than that.
    for (int tpr = 4; tpr <= kMaxBlock; tpr *= 2) {
      const int64_t items = items_per_thread(shape, tpr);
      if (tpr > 32 && items < 2) break;
      if (items > kMaxItems && tpr < 256) continue;
      if (tpr < 32 && (items < 2 || shape.row_points > kWarpRow)) continue;
      LaunchConfig c = first;
      c.threads_per_row = tpr;
      c.max_items = items <= kMaxItems ? static_cast<int>(items) : 0;
      c.min_blocks_per_sm = 0;
      for (int rpb : {1, 2, 4, 8, 16, 32, 64}) {
        if ((tpr * rpb < 128 && tpr < 128) || (tpr * rpb > 256 && rpb > 1)) continue;
        c.rows_per_block = rpb;
        add(c);
      }
    }
  }
  // The default without vector accesses, where it has them (is 16 bytes a
  // step worth it?).
  LaunchConfig scalar = first;
  scalar.vector_bytes = 0;
  if (first.vector_bytes > 0 && !generate_cuda_source(kernel, first).vector.name.empty()) add(scalar);
  // The default with __launch_bounds__ asking for 1024 resident threads an
  // SM (at most 64 registers a thread), so more rows are in flight at once
  // (or registers spill: timing says which).
  if (rows && first.threads_per_row > 32) {
    LaunchConfig capped = first;
    capped.min_blocks_per_sm = std::max(1, kMaxBlock / (first.threads_per_row * first.rows_per_block));
    add(capped);
  }
  return out;
}

}  // namespace kiln::inductor::cuda
