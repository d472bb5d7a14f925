#include "interpreter/compile_config.h"

#include <mutex>
#include <unordered_set>

namespace kiln::interpreter {
namespace {

thread_local const CompileConfig* t_current_config = nullptr;
thread_local const CompileConfig* t_graph_config = nullptr;
thread_local bool t_replay_only = false;
thread_local int t_context_depth = 0;
std::atomic<uint64_t> g_next_config_id{1};
std::atomic<int> g_cache_size_limit{8};
std::atomic<Stance> g_stance{Stance::Default};
std::atomic<bool> g_cpu_kernels{true};
std::atomic<bool> g_cuda_kernels{true};
std::atomic<bool> g_parameter_kernel_cache{true};
std::atomic<bool> g_constant_subgraphs{true};
std::atomic<bool> g_batch_input_casts{true};
std::atomic<bool> g_static_regions{true};
std::atomic<inductor::MatmulPolicy> g_cpu_matmul{inductor::MatmulPolicy::Auto};
std::atomic<prims::ConvLayout> g_conv_layout{prims::ConvLayout::Auto};
std::atomic<inductor::ConvBiasPlacement> g_conv_bias{inductor::ConvBiasPlacement::Auto};

std::mutex g_dead_mutex;
std::unordered_set<uint64_t> g_dead_configs;
std::atomic<uint64_t> g_dead_epoch{0};

}  // namespace

CompileConfig::~CompileConfig() {
  std::lock_guard<std::mutex> lock(g_dead_mutex);
  g_dead_configs.insert(id);
  g_dead_epoch++;
}

bool is_dead_config(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_dead_mutex);
  return g_dead_configs.count(id) != 0;
}

uint64_t dead_config_epoch() { return g_dead_epoch; }

uint64_t next_config_id() { return g_next_config_id++; }

const CompileConfig* current_config() { return t_current_config; }

const CompileConfig* set_current_config(const CompileConfig* config) {
  const CompileConfig* previous = t_current_config;
  t_current_config = config;
  return previous;
}

const CompileConfig* graph_config() { return t_graph_config; }

GraphRunScope::GraphRunScope() : previous_current_(t_current_config), previous_graph_(t_graph_config) {
  t_graph_config = t_current_config;
  t_current_config = nullptr;
}

GraphRunScope::~GraphRunScope() {
  t_current_config = previous_current_;
  t_graph_config = previous_graph_;
}

bool replay_only() { return t_replay_only; }

ReplayOnlyScope::ReplayOnlyScope(bool on) : previous_(t_replay_only) { t_replay_only = on; }

ReplayOnlyScope::~ReplayOnlyScope() { t_replay_only = previous_; }

int context_depth() { return t_context_depth; }

ContextDepthScope::ContextDepthScope() { ++t_context_depth; }

ContextDepthScope::~ContextDepthScope() { --t_context_depth; }

Stats& stats() {
  static Stats counters;
  return counters;
}

void reset_stats() {
#define KILN_STAT_RESET(name) stats().name = 0;
  KILN_STATS(KILN_STAT_RESET)
#undef KILN_STAT_RESET
}

int cache_size_limit() { return g_cache_size_limit; }

void set_cache_size_limit(int limit) { g_cache_size_limit = limit; }

Stance stance() { return g_stance; }

void set_stance(Stance stance) { g_stance = stance; }

bool cpu_kernels() { return g_cpu_kernels; }

void set_cpu_kernels(bool enabled) { g_cpu_kernels = enabled; }

inductor::MatmulPolicy cpu_matmul() { return g_cpu_matmul; }

void set_cpu_matmul(inductor::MatmulPolicy policy) { g_cpu_matmul = policy; }

prims::ConvLayout conv_layout() { return g_conv_layout; }

void set_conv_layout(prims::ConvLayout layout) { g_conv_layout = layout; }

inductor::ConvBiasPlacement conv_bias() { return g_conv_bias; }

void set_conv_bias(inductor::ConvBiasPlacement placement) { g_conv_bias = placement; }

bool cuda_kernels() { return g_cuda_kernels; }

void set_cuda_kernels(bool enabled) { g_cuda_kernels = enabled; }

bool parameter_kernel_cache() { return g_parameter_kernel_cache; }

void set_parameter_kernel_cache(bool enabled) { g_parameter_kernel_cache = enabled; }

bool constant_subgraphs() { return g_constant_subgraphs; }

void set_constant_subgraphs(bool enabled) { g_constant_subgraphs = enabled; }

bool batch_input_casts() { return g_batch_input_casts; }

void set_batch_input_casts(bool enabled) { g_batch_input_casts = enabled; }

bool static_regions() { return g_static_regions; }

void set_static_regions(bool enabled) { g_static_regions = enabled; }

}  // namespace kiln::interpreter
