#include "interpreter/compile_config.h"

namespace kiln::interpreter {
namespace {

thread_local const CompileConfig* t_current_config = nullptr;
std::atomic<uint64_t> g_next_config_id{1};
std::atomic<int> g_cache_size_limit{8};

}  // namespace

uint64_t next_config_id() { return g_next_config_id++; }

const CompileConfig* current_config() { return t_current_config; }

const CompileConfig* set_current_config(const CompileConfig* config) {
  const CompileConfig* previous = t_current_config;
  t_current_config = config;
  return previous;
}

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

}  // namespace kiln::interpreter
