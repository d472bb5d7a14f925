// The CPU kernel cache: compiled kernels in memory for the process and on
// disk across processes, keyed by a SHA-256 of everything that decides the
// machine code (Note [Kernel cache keys] in kernel_cache.cpp). The disk
// files, the directory and its rules are inductor/kernel_cache_file.h's,
// shared with the CUDA cubin cache. No LLVM here:
// without LLVM (KILN_WITH_LLVM=OFF) compile_cached throws CodegenError as
// compile_cpu_kernel does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/kernel_ir.h"
#include "inductor/sha256.h"

namespace kiln::inductor::cpu {

// Where compile_cached found a kernel.
enum class KernelSource { Memory, Disk, Compiled };

// Compiles `kernel` for the host CPU, unless the memory cache or the disk
// cache already holds it (then it loads it). The result has `fn` and
// `symbol`; no IR and no object bytes. A damaged or foreign disk entry is
// logged (KILN_LOGS=cache), never loaded, and replaced by a fresh compile.
// Thread-safe. Throws CodegenError when the kernel cannot be compiled.
CpuKernel compile_cached(const Kernel& kernel, KernelSource* source = nullptr);

// compile_cached for kernels that are not Kernel IR (the generated GEMMs):
// `kind` and `text` say everything that decides the machine code (kinds
// keep texts of different generators apart), `name` is for the log, and
// `compile` makes the kernel with its object bytes on a miss.
CpuKernel compile_cached_text(const std::string& kind, const std::string& text, const std::string& name,
                              const std::function<CpuKernel()>& compile, KernelSource* source = nullptr);

// The key `kernel` is cached under in this process (its name is left out:
// identical kernels share an entry).
Sha256Digest kernel_cache_key(const Kernel& kernel);

// Forgets the memory cache's entries (the kernels stay loaded, so pointers
// handed out stay valid): the next compile_cached of each goes to the disk.
void clear_kernel_memory_cache();

// Counters of compile_cached since the process started.
struct KernelCacheCounts {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compiled = 0;
  int64_t disk_rejected = 0;  // entries found damaged or foreign, then recompiled
  int64_t disk_writes = 0;
  int64_t disk_write_failures = 0;
};

// A snapshot of the counters.
KernelCacheCounts kernel_cache_counts();

}  // namespace kiln::inductor::cpu
