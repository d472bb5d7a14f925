// mode="max-autotune" for CUDA kernels (Note [CUDA autotuning] in
// cuda_autotune.cpp): the in-memory cache of chosen launch configurations
// and how a winner is picked from timings. The timing itself, on the GPU,
// is cuda_kernel_runner.h's tune_cuda_kernel. No CUDA library is touched
// here.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "inductor/cuda/cuda_source.h"
#include "inductor/kernel_ir.h"

namespace kiln::inductor::cuda {

// One candidate's result: its milliseconds per launch, or why it could
// not be timed (failed to compile or launch).
struct CandidateTiming {
  LaunchConfig config;
  double ms = 0;
  std::string error;  // "" when timed
};

// The key a kernel's choice is cached under: the architecture and the
// default configuration's source (which spells out the kernel's sizes,
// strides and dtypes), so identical kernels share one choice.
std::string autotune_key(const Kernel& kernel, const std::string& arch);

// The index of the fastest timed candidate (ties: the earliest, so the
// default, listed first, wins them), or nullopt when none was timed.
std::optional<size_t> fastest_candidate(const std::vector<CandidateTiming>& timings);

// "tpr=256 rpb=1 items<=16 vec=16B: 0.231 ms" lines, the winner marked:
// what KILN_LOGS=autotune prints.
std::string format_timings(const std::vector<CandidateTiming>& timings, std::optional<size_t> winner);

// Chosen configurations by key, for the process. Thread-safe.
class AutotuneCache {
 public:
  // The configuration chosen for `key`, if any.
  std::optional<LaunchConfig> find(const std::string& key) const;
  // Records `config` for `key` unless a choice is there already; returns
  // the choice that stands.
  LaunchConfig insert(const std::string& key, const LaunchConfig& config);
  // How many choices are cached.
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, LaunchConfig> choices_;
};

// The process's cache of choices (never freed).
AutotuneCache& autotune_cache();

// What a kernel compiled under set_launch_candidate_override got.
struct ForcedLaunch {
  std::string kernel;  // the kernel's name
  size_t index = 0;    // the candidate it runs
  size_t count = 0;    // how many candidates it has
  LaunchConfig config;
};

// For benchmarks that time every candidate (benchmarks/inductor_cuda.py
// --sweep): CUDA kernels compiled from now on run candidate `index` of
// their launch_candidates (the last one when they have fewer), or their
// default with -1 (the initial state). Clears forced_launches().
void set_launch_candidate_override(int index);

// The configuration a CUDA kernel compiled now runs: its default, or the
// candidate the override names (recorded in forced_launches()).
LaunchConfig launch_config_for(const Kernel& kernel);

// The kernels compiled since the override was last set, in order.
std::vector<ForcedLaunch> forced_launches();

}  // namespace kiln::inductor::cuda
