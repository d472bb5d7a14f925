#include "interpreter/code_cache.h"

#include <unordered_set>

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
  for (CodeCache* cache : live_caches()) {
    cache->entries.clear();
    cache->limit_logged = false;
  }
}

}  // namespace kiln::interpreter
