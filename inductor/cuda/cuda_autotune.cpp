#include "inductor/cuda/cuda_autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kiln::inductor::cuda {

// Note [CUDA autotuning]
// kiln.compile(mode="max-autotune") (or "max-autotune-no-cudagraphs":
// kiln's max-autotune does not add CUDA graphs, whose replay copies each
// output) turns on autotuning for the CUDA kernels of the graphs it
// compiles. On a kernel's first launch, tune_cuda_kernel
// (cuda_kernel_runner.cpp) looks up autotune_key(kernel) here; on a miss it
// compiles every configuration of launch_candidates (Note [CUDA launch
// configurations]; each through compile_cuda_cached, so a configuration's
// cubin is shared like any kernel's), launches each on the real inputs
// and on scratch outputs (so that the outputs returned are written by the
// winner alone, by the launch that follows), a few untimed launches then
// a few timed by CUDA events on torch's current stream, and keeps the
// fastest, ties to the default. The choice is cached for the process by
// key (architecture + the default source, which spells out sizes,
// strides and dtypes), so identical kernels, and later compiles of the
// same program, time nothing. A candidate that fails to compile or launch
// is logged and skipped; when none can be timed the default runs. While a
// CUDA graph is being captured nothing is timed (the default runs and
// nothing is cached). Candidates and times are logged under
// KILN_LOGS=autotune; kiln.stats()["kernels_autotuned"] counts kernels
// whose candidates were timed. Without max-autotune, the default
// configuration runs and nothing is timed.

std::string autotune_key(const Kernel& kernel, const std::string& arch) {
  return arch + '\n' + generate_cuda_source(kernel).text;
}

std::optional<size_t> fastest_candidate(const std::vector<CandidateTiming>& timings) {
  std::optional<size_t> best;
  for (size_t i = 0; i < timings.size(); ++i) {
    const CandidateTiming& t = timings[i];
    if (!t.error.empty() || !std::isfinite(t.ms) || t.ms < 0) continue;
    if (!best || t.ms < timings[*best].ms) best = i;
  }
  return best;
}

std::string format_timings(const std::vector<CandidateTiming>& timings, std::optional<size_t> winner) {
  std::string text;
  for (size_t i = 0; i < timings.size(); ++i) {
    const CandidateTiming& t = timings[i];
    text += (winner && *winner == i ? "  * " : "    ") + format_launch_config(t.config) + (i == 0 ? " (default)" : "");
    if (t.error.empty()) {
      char ms[32];
      std::snprintf(ms, sizeof ms, ": %.4f ms", t.ms);
      text += ms;
    } else {
      text += ": failed: " + t.error;
    }
    text += '\n';
  }
  return text;
}

std::optional<LaunchConfig> AutotuneCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = choices_.find(key);
  if (found == choices_.end()) return std::nullopt;
  return found->second;
}

LaunchConfig AutotuneCache::insert(const std::string& key, const LaunchConfig& config) {
  std::lock_guard<std::mutex> lock(mutex_);
  return choices_.emplace(key, config).first->second;
}

size_t AutotuneCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return choices_.size();
}

AutotuneCache& autotune_cache() {
  static auto* cache = new AutotuneCache();
  return *cache;
}

namespace {

std::mutex g_override_mutex;
int g_override = -1;
std::vector<ForcedLaunch>* g_forced = new std::vector<ForcedLaunch>();  // never freed

}  // namespace

void set_launch_candidate_override(int index) {
  std::lock_guard<std::mutex> lock(g_override_mutex);
  g_override = index < 0 ? -1 : index;
  g_forced->clear();
}

LaunchConfig launch_config_for(const Kernel& kernel) {
  std::lock_guard<std::mutex> lock(g_override_mutex);
  if (g_override < 0) return default_launch_config(kernel);
  const std::vector<LaunchConfig> candidates = launch_candidates(kernel);
  ForcedLaunch forced;
  forced.kernel = kernel.name;
  forced.index = std::min(static_cast<size_t>(g_override), candidates.size() - 1);
  forced.count = candidates.size();
  forced.config = candidates[forced.index];
  g_forced->push_back(forced);
  return forced.config;
}

std::vector<ForcedLaunch> forced_launches() {
  std::lock_guard<std::mutex> lock(g_override_mutex);
  return *g_forced;
}

}  // namespace kiln::inductor::cuda
