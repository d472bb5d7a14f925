#include "interpreter/dynamic_profile.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "base/log.h"
#include "base/py_ref.h"
#include "inductor/kernel_cache_file.h"
#include "inductor/sha256.h"

namespace kiln::interpreter {

// Note [Dynamic profiles]
// Automatic dynamic shapes learn a code's dynamic dims one recompile at a
// time: generate() traces its forward for the prefill, again for the
// first decoding step (the prompt's length changed; the KV cache's
// tensors are new, so static), and once more when the cache grows. Like
// torch.compile's local profile-guided dynamism, kiln keeps what a code
// learned (the sources and dims that became dynamic) in a file per code
// under the kernel caches' directory (<cache>/dynamic/<key>.txt, the key a
// SHA-256 of the code's file, qualified name, first line and bytecode, so
// an edited function starts afresh), and a later process uses it at that
// code's first size-change recompile: every dim the earlier run learned
// becomes dynamic at once, so generate() traces twice. The first trace of
// a code stays static (a profile must not make a model that runs at one
// size trace dynamically), only automatic configs (dynamic=None) read and
// write profiles, and a process reads a code's profile once: after
// kiln.reset() the code learns as without one, so a test's counts do not
// depend on the tests before it. Only dims are kept, not the fallbacks a
// trace took (dim 0s only, static): those follow from the dims and are
// learned again. A profile can be wrong for this run (written by another
// use of a code that decorators share, or by older library code): where
// the trace it seeds falls back, the profile's dims this process has not
// seen change are dropped (and the file rewritten) instead of the fallback
// being kept, so the dims that do change are traced dynamic at their next
// change. KILN_DYNAMIC_PROFILES=0, or the disk cache off
// (KILN_CACHE_DIR=""), turns profiles off.

namespace {

constexpr const char* kHeader = "kiln dynamic profile 1";

std::string utf8(PyObject* text) {
  const char* chars = text ? PyUnicode_AsUTF8(text) : nullptr;
  if (!chars) {
    PyErr_Clear();
    return "";
  }
  return chars;
}

// The profile's path for `code`, "" when profiles are off or the code's
// bytecode cannot be read.
std::string profile_path(PyCodeObject* code) {
  if (!dynamic_profiles_enabled()) return "";
  base::PyRef bytecode = base::PyRef::steal(PyCode_GetCode(code));
  if (!bytecode || !PyBytes_Check(bytecode.get())) {
    PyErr_Clear();
    return "";
  }
  std::string identity = utf8(code->co_filename) + "\n" + utf8(code->co_qualname) + "\n" +
                         std::to_string(code->co_firstlineno) + "\n";
  identity.append(PyBytes_AS_STRING(bytecode.get()), static_cast<size_t>(PyBytes_GET_SIZE(bytecode.get())));
  return inductor::kernel_cache_dir() + "/dynamic/" + inductor::to_hex(inductor::sha256(identity)) + ".txt";
}

std::string code_label(PyCodeObject* code) {
  return utf8(code->co_qualname) + " (" + utf8(code->co_filename) + ":" + std::to_string(code->co_firstlineno) + ")";
}

}  // namespace

bool dynamic_profiles_enabled() {
  const char* flag = std::getenv("KILN_DYNAMIC_PROFILES");
  if (flag && std::string(flag) == "0") return false;
  return !inductor::kernel_cache_dir().empty();
}

int seed_from_profile(PyCodeObject* code, tracer::DynamicDims* dims) {
  const std::string path = profile_path(code);
  if (path.empty()) return 0;
  static std::mutex mutex;
  static auto* read = new std::set<std::string>();  // paths this process read; leaked with the process
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!read->insert(path).second) return 0;
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line != kHeader) return 0;
  int added = 0;
  std::string learned;
  while (std::getline(in, line)) {
    // "<dim>\t<source>"
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) continue;
    char* end = nullptr;
    const long dim = std::strtol(line.c_str(), &end, 10);
    if (end != line.c_str() + tab || dim < -1 || dim > 64) continue;  // -1: an int (Note [Dynamic ints])
    const std::string source = line.substr(tab + 1);
    if (dims->add(source, static_cast<int>(dim))) {
      ++added;
      learned += (learned.empty() ? "" : ", ") + source + " dim " + std::to_string(dim);
    }
  }
  if (added > 0) {
    KILN_LOG(dynamic, code_label(code) << ": dynamic from an earlier run's profile: " << learned);
  }
  return added;
}

void save_profile(PyCodeObject* code, const tracer::DynamicDims& dims) {
  const std::string path = profile_path(code);
  if (path.empty()) return;
  if (dims.dims.empty()) {
    std::remove(path.c_str());  // nothing left to keep (its dims were dropped)
    return;
  }
  const std::string dir = path.substr(0, path.rfind('/'));
  if (const std::string why = inductor::prepare_cache_dir(dir); !why.empty()) {
    KILN_LOG(dynamic, "dynamic profile of " << code_label(code) << " not saved: " << why);
    return;
  }
  std::ostringstream text;
  text << kHeader << "\n";
  for (const auto& [source, dim] : dims.dims) {
    if (source.find('\n') != std::string::npos) continue;  // cannot be one line: not kept
    text << dim << "\t" << source << "\n";
  }
  // A private temporary file renamed over the profile: a reader sees the
  // old profile or the new one, never half of one.
  const std::string temporary = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text.str();
    if (!out) {
      std::remove(temporary.c_str());
      KILN_LOG(dynamic, "dynamic profile of " << code_label(code) << " not saved: cannot write " << temporary);
      return;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    KILN_LOG(dynamic, "dynamic profile of " << code_label(code) << " not saved: cannot rename to " << path);
  }
}

}  // namespace kiln::interpreter
