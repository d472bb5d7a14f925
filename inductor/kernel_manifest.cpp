#include "inductor/kernel_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "base/log.h"
#include "inductor/sha256.h"

// Note [Kernel replay]
// A refactor of the compiler should be able to prove that it changed no
// generated kernel, and a change that does change kernels should say which.
// The test suites run with KILN_KERNEL_MANIFEST set (CMake's test
// properties): each process appends "<kind> <text digest> <code digest>
// <test>" for every distinct kernel it makes, where the text is what the
// kernel caches key on (format_kernel without the name, format_gemm_spec,
// the kernel and launch configuration of a CUDA source) and the code is the
// LLVM IR before optimization or the CUDA C, with process-specific symbol
// names left out. The check (.ci/kernel_replay.sh) reduces the lines to the
// sorted set of "<kind> <text digest> <code digest>" and compares it with
// the committed manifest; a difference is listed with the tests that made
// the kernels. Appends are single write(2)s of one short line to a file
// opened O_APPEND, so the processes and threads of one run interleave
// whole lines. A test whose kernels depend on thread timing (which sizes of
// a racing call trace static) sets KILN_KERNEL_MANIFEST_PAUSE while it runs
// (pytest: @pytest.mark.timing_dependent_kernels). The CPU kernels' IR
// names the host CPU in its function attributes ("target-cpu",
// "target-features"); those are left out of the code digest, so the
// manifest is the same on every x86-64 host with the same vector units
// (each session's fresh machine rewrote every digest before). Hosts of
// other vector units generate other IR (an AVX2 host's vectors are half an
// AVX-512 host's), so the manifest keeps a code digest per class
// ("avx512=..., avx2=..."; .ci/kernel_replay.sh reads the class from
// /proc/cpuinfo): a host compares its own class's digests and, for kernels
// with none recorded, only the loop-level text.

namespace kiln::inductor {
namespace {

std::string short_digest(const std::string& text) {
  Sha256 sha;
  sha.update(text);
  return to_hex(sha.digest()).substr(0, 16);
}

// The test making the kernel: the C++ runner sets KILN_KERNEL_LABEL,
// pytest sets PYTEST_CURRENT_TEST ("path::name (call)").
std::string current_label() {
  if (const char* label = std::getenv("KILN_KERNEL_LABEL")) return label;
  if (const char* test = std::getenv("PYTEST_CURRENT_TEST")) {
    std::string label = test;
    const size_t space = label.rfind(' ');
    if (space != std::string::npos) label.resize(space);
    for (char& c : label) {
      if (c == ' ' || c == '\n') c = '_';
    }
    return label;
  }
  return "-";
}

struct Manifest {
  std::mutex mutex;
  int fd = -1;
  bool failed = false;
  std::set<std::string> seen;  // kind + text digest
};

Manifest& manifest() {
  static Manifest* m = [] {
    auto* made = new Manifest();
    if (const char* path = std::getenv("KILN_KERNEL_MANIFEST"); path && *path) {
      made->fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (made->fd < 0) {
        base::log_message(base::LogChannel::kernels, std::string("KILN_KERNEL_MANIFEST=") + path +
                                                         " cannot be opened; no kernels are recorded");
      }
    }
    return made;
  }();
  return *m;
}

// `code` without the host CPU's attribute strings (Note [Kernel replay]).
std::string without_host_attributes(std::string code) {
  for (const char* attribute : {"\"target-cpu\"=\"", "\"target-features\"=\""}) {
    const size_t prefix = std::strlen(attribute);
    for (size_t at = code.find(attribute); at != std::string::npos; at = code.find(attribute, at)) {
      const size_t close = code.find('"', at + prefix);
      if (close == std::string::npos) break;
      code.erase(at, close + 1 - at);
    }
  }
  return code;
}

}  // namespace

bool kernel_manifest_on() { return manifest().fd >= 0; }

std::string kernel_code_digest(const std::string& code) { return short_digest(without_host_attributes(code)); }

void record_kernel(const std::string& kind, const std::string& text, const std::function<std::string()>& code) {
  Manifest& m = manifest();
  if (m.fd < 0) return;
  // A test whose kernels depend on thread timing pauses the recording.
  if (const char* pause = std::getenv("KILN_KERNEL_MANIFEST_PAUSE"); pause && *pause) return;
  const std::string text_digest = short_digest(text);
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (!m.seen.insert(kind + " " + text_digest).second) return;
  }
  std::string code_digest = "-";
  try {
    code_digest = kernel_code_digest(code());
  } catch (const std::exception&) {
    // A kernel its generator refuses is recorded as such; the caller's own
    // compile reports the error.
    code_digest = "refused";
  }
  const std::string line = kind + " " + text_digest + " " + code_digest + " " + current_label() + "\n";
  std::lock_guard<std::mutex> lock(m.mutex);
  if (::write(m.fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) && !m.failed) {
    m.failed = true;
    base::log_message(base::LogChannel::kernels, "cannot append to KILN_KERNEL_MANIFEST; the kernel manifest is incomplete");
  }
}

}  // namespace kiln::inductor
