#include "interpreter/code_cache.h"

#include <algorithm>
#include <unordered_set>

#include "interpreter/compile_config.h"

namespace kiln::interpreter {
namespace {

// Every live CodeCache, so reset() can reach them; entries leave this set
// when CPython frees their code object.
std::unordered_set<CodeCache*>& live_caches() {
  static std::unordered_set<CodeCache*> caches;
  return caches;
}

void free_code_cache(void* extra) {
  auto* cache = static_cast<CodeCache*>(extra);
  live_caches().erase(cache);
  delete cache;
}

Py_ssize_t extra_index() {
  static Py_ssize_t index = _PyEval_RequestCodeExtraIndex(free_code_cache);
  return index;
}

}  // namespace

CodeCache* code_cache(PyCodeObject* code, bool create) {
  const Py_ssize_t index = extra_index();
  if (index < 0) return nullptr;
  void* extra = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject*>(code), index, &extra) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  if (extra || !create) return static_cast<CodeCache*>(extra);
  auto* cache = new CodeCache();
  if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), index, cache) < 0) {
    PyErr_Clear();
    delete cache;
    return nullptr;
  }
  live_caches().insert(cache);
  return cache;
}

void clear_all_code_caches() {
  // Entries die only after every cache is empty: their Python objects'
  // finalizers may call kiln.reset() again, or free code objects.
  std::vector<std::shared_ptr<CacheEntry>> doomed;
  for (CodeCache* cache : live_caches()) {
    for (auto& entry : cache->entries) doomed.push_back(std::move(entry));
    cache->entries.clear();
    cache->limit_logged = false;
  }
}

}  // namespace kiln::interpreter

namespace kiln::interpreter {

void prune_dead_entries(CodeCache* cache) {
  const uint64_t epoch = dead_config_epoch();
  if (cache->pruned_epoch == epoch) return;
  cache->pruned_epoch = epoch;
  std::vector<std::shared_ptr<CacheEntry>> kept;
  std::vector<std::shared_ptr<CacheEntry>> doomed;  // dies after the swap, see clear_all
  for (auto& entry : cache->entries) {
    (is_dead_config(entry->config_id) ? doomed : kept).push_back(std::move(entry));
  }
  cache->entries.swap(kept);
  std::erase_if(cache->dynamic, [](const CodeCache::DynamicState& state) {
    return is_dead_config(state.config_id);
  });
}

CodeCache::DynamicState& CodeCache::dynamic_state(uint64_t config_id) {
  for (DynamicState& state : dynamic) {
    if (state.config_id == config_id) return state;
  }
  dynamic.push_back(DynamicState{.config_id = config_id});
  return dynamic.back();
}

}  // namespace kiln::interpreter
