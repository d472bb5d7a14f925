// Tests of the CUDA cubin cache (inductor/cuda/cubin_cache.h) and of the
// runtime path through it (cuda_kernel.h: compile_cuda_cached), with the
// real NVRTC for sm_90a and no GPU: a miss compiles and stores, a second
// compile reads the disk and runs no NVRTC, each kind of damaged or
// foreign entry (truncated, flipped byte, other format version, other kind,
// another architecture's or another NVRTC version's file) is refused,
// recompiled and rewritten, concurrent compiles of one kernel never leave a
// torn file, and the directory is created 0700.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "inductor/cuda/cubin_cache.h"
#include "inductor/cuda/cuda_kernel.h"
#include "inductor/cuda/cuda_program.h"
#include "inductor/cuda/cuda_source.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/kernel_cache_file.h"
#include "inductor/lower_group.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/cache_test_util.h"
#include "tests/cpp/test_metas.h"

namespace kiln::inductor::cuda {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using prims::Scalar;
using test::files_in;
using test::make_dir;
using test::mode_of;
using test::read_file;
using test::TempDir;
using test::write_file;

constexpr CacheEntryKind kCubin = CacheEntryKind::CudaCubin;
constexpr const char* kArch = "sm_90a";

// A small kernel whose source differs per `variant`, and its entry's name.
std::string entry_of(const std::string& variant) { return "kiln_cache_test_" + variant; }

std::string source_of(const std::string& variant) {
  return "extern \"C\" __global__ void " + entry_of(variant) +
         "(float* out, const float* in, int n) {\n"
         "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) out[i] = in[i] * 1.5f + " +
         std::to_string(variant.size()) + ".0f;\n}\n";
}

bool is_elf(const std::string& bytes) { return bytes.size() > 100 && bytes.compare(0, 4, "\x7f" "ELF") == 0; }

// Points the caches at a fresh directory (two levels the cache must create)
// for one test, and turns the disk cache off after it.
class CubinCache : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC here: " << why;
    ASSERT_EQ(set_kernel_cache_dir(root_.path() + "/a/b"), "");
    clear_cuda_kernel_memory_cache();
  }
  void TearDown() override {
    set_kernel_cache_dir("");
    clear_cuda_kernel_memory_cache();
  }
  std::string dir() const { return kernel_cache_dir(); }
  std::string path_of(const std::string& source, const std::string& arch = kArch) const {
    return cache_entry_path(dir(), kCubin, cubin_cache_key(source, arch));
  }

  TempDir root_;
};

TEST(CubinCacheKey, FollowsEveryPartOfWhatMakesTheCubin) {
  const std::vector<std::string> options = nvrtc_options(kArch);
  const Sha256Digest base = cubin_cache_key("source", kArch, "13.0", options);
  EXPECT_EQ(base, cubin_cache_key("source", kArch, "13.0", options));
  EXPECT_NE(base, cubin_cache_key("source ", kArch, "13.0", options));
  EXPECT_NE(base, cubin_cache_key("source", "sm_80", "13.0", options));
  EXPECT_NE(base, cubin_cache_key("source", kArch, "12.8", options));
  std::vector<std::string> fast = options;
  fast.push_back("--use_fast_math");
  EXPECT_NE(base, cubin_cache_key("source", kArch, "13.0", fast));
  // Options are separate fields: two cannot pass for one.
  EXPECT_NE(cubin_cache_key("s", kArch, "13.0", {"-a", "b"}), cubin_cache_key("s", kArch, "13.0", {"-ab"}));
  EXPECT_NE(nvrtc_options(kArch), nvrtc_options("sm_80")) << "the architecture is an option too";
}

TEST_F(CubinCache, KeyOfThisProcessIsTheLoadedNvrtcs) {
  EXPECT_EQ(cubin_cache_key("source", kArch),
            cubin_cache_key("source", kArch, nvrtc_version(), nvrtc_options(kArch)));
}

TEST_F(CubinCache, MissCompilesAndStoresThenTheDiskHitRunsNoNvrtc) {
  EXPECT_EQ(mode_of(root_.path() + "/a"), 0700u);
  EXPECT_EQ(mode_of(dir()), 0700u);
  const std::string source = source_of("hit");
  const CubinCacheCounts start = cubin_cache_counts();
  CubinOrigin origin = CubinOrigin::Disk;
  const std::string first = cached_cubin(source, entry_of("hit"), kArch, &origin);
  EXPECT_EQ(origin, CubinOrigin::Compiled);
  EXPECT_TRUE(is_elf(first));
  const CubinCacheCounts stored = cubin_cache_counts();
  EXPECT_EQ(stored.compiled - start.compiled, 1);
  EXPECT_EQ(stored.disk_writes - start.disk_writes, 1);
  EXPECT_EQ(stored.disk_hits - start.disk_hits, 0);

  const Sha256Digest key = cubin_cache_key(source, kArch);
  EXPECT_EQ(files_in(dir()), std::vector<std::string>{to_hex(key) + ".cubin"});
  EXPECT_EQ(mode_of(path_of(source)), 0600u);
  CacheEntry entry;
  ASSERT_EQ(read_cache_entry(dir(), kCubin, key, &entry), EntryStatus::Ok);
  EXPECT_EQ(entry.name, entry_of("hit"));
  EXPECT_EQ(entry.payload, first);

  const std::string second = cached_cubin(source, entry_of("hit"), kArch, &origin);
  EXPECT_EQ(origin, CubinOrigin::Disk);
  EXPECT_EQ(second, first);
  const CubinCacheCounts hit = cubin_cache_counts();
  EXPECT_EQ(hit.compiled - stored.compiled, 0) << "a disk hit runs no NVRTC";
  EXPECT_EQ(hit.disk_hits - stored.disk_hits, 1);
  EXPECT_EQ(hit.disk_rejected - stored.disk_rejected, 0);

  // Another architecture is another entry, compiled on its own.
  cached_cubin(source, entry_of("hit"), "sm_80", &origin);
  EXPECT_EQ(origin, CubinOrigin::Compiled);
  EXPECT_EQ(files_in(dir()).size(), 2u);
}

// Each way an entry can be wrong: the file check says which, the cache
// never returns it, compiles again, and rewrites the entry whole.
TEST_F(CubinCache, DamagedOrForeignEntriesAreRecompiledAndRewritten) {
  const std::string source = source_of("damage");
  const std::string name = entry_of("damage");
  const Sha256Digest key = cubin_cache_key(source, kArch);
  const std::string path = path_of(source);
  const std::string cubin = cached_cubin(source, name, kArch);
  const std::string good = read_file(path);
  ASSERT_GT(good.size(), cubin.size());

  // The same source's entry for sm_80, and the file another NVRTC version
  // would have written for sm_90a (its key differs; the bytes are this
  // cubin's, which is what a stale file would hold).
  cached_cubin(source, name, "sm_80");
  const std::string other_arch = read_file(path_of(source, "sm_80"));
  TempDir elsewhere;
  const Sha256Digest old_nvrtc_key = cubin_cache_key(source, kArch, "12.4", nvrtc_options(kArch));
  ASSERT_EQ(write_cache_entry(elsewhere.path(), kCubin, old_nvrtc_key, CacheEntry{name, cubin}), "");
  const std::string other_nvrtc = read_file(cache_entry_path(elsewhere.path(), kCubin, old_nvrtc_key));
  ASSERT_FALSE(other_nvrtc.empty());

  struct Damage {
    const char* what;
    std::string bytes;
    EntryStatus status;
  };
  std::string flipped = good;
  flipped[good.size() - good.size() / 3] ^= 0x01;  // a byte of the cubin
  std::string other_version = good;
  other_version[8] = static_cast<char>(kKernelCacheFormatVersion + 1);
  const std::vector<Damage> damages = {
      {"truncated", good.substr(0, good.size() - 17), EntryStatus::Truncated},
      {"one byte short", good.substr(0, good.size() - 1), EntryStatus::Truncated},
      {"truncated inside the header", good.substr(0, 40), EntryStatus::Truncated},
      {"empty", "", EntryStatus::Truncated},
      {"one byte long", good + "x", EntryStatus::BadLength},
      {"a flipped cubin byte", flipped, EntryStatus::BadChecksum},
      {"another format version", other_version, EntryStatus::BadVersion},
      {"a CPU object's entry under this key",
       encode_cache_entry(CacheEntryKind::CpuObject, key, CacheEntry{name, cubin}), EntryStatus::WrongKind},
      {"another architecture's file", other_arch, EntryStatus::WrongKey},
      {"another NVRTC version's file", other_nvrtc, EntryStatus::WrongKey},
      {"not a cache file", std::string(good.size(), '\x7f'), EntryStatus::BadMagic},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.what);
    CacheEntry entry;
    EXPECT_EQ(decode_cache_entry(damage.bytes, kCubin, key, &entry), damage.status);
    write_file(path, damage.bytes);
    const CubinCacheCounts before = cubin_cache_counts();
    CubinOrigin origin = CubinOrigin::Disk;
    const std::string recompiled = cached_cubin(source, name, kArch, &origin);
    const CubinCacheCounts after = cubin_cache_counts();
    EXPECT_EQ(origin, CubinOrigin::Compiled);
    EXPECT_EQ(after.disk_rejected - before.disk_rejected, 1);
    EXPECT_EQ(after.disk_hits - before.disk_hits, 0);
    EXPECT_EQ(after.compiled - before.compiled, 1);
    EXPECT_EQ(recompiled, cubin) << "NVRTC compiles the source again; nothing of the damaged file is used";
    ASSERT_EQ(read_cache_entry(dir(), kCubin, key, &entry), EntryStatus::Ok) << "the entry is rewritten whole";
    EXPECT_EQ(entry.payload, cubin);
    cached_cubin(source, name, kArch, &origin);
    EXPECT_EQ(origin, CubinOrigin::Disk);
  }
  // The sm_80 entry was only copied, never damaged: still a hit.
  CubinOrigin origin = CubinOrigin::Compiled;
  cached_cubin(source, name, "sm_80", &origin);
  EXPECT_EQ(origin, CubinOrigin::Disk);
}

TEST_F(CubinCache, AnEntryHoldingAnotherNameIsNotUsed) {
  // A file whose checksum is right but whose name is not the kernel's entry
  // (only a forged file can be that): refused and recompiled.
  const std::string source = source_of("named");
  const Sha256Digest key = cubin_cache_key(source, kArch);
  const std::string cubin = cached_cubin(source, entry_of("named"), kArch);
  ASSERT_EQ(write_cache_entry(dir(), kCubin, key, CacheEntry{"kiln_other_entry", cubin}), "");
  const CubinCacheCounts before = cubin_cache_counts();
  CubinOrigin origin = CubinOrigin::Disk;
  cached_cubin(source, entry_of("named"), kArch, &origin);
  EXPECT_EQ(origin, CubinOrigin::Compiled);
  EXPECT_EQ(cubin_cache_counts().disk_rejected - before.disk_rejected, 1);
  CacheEntry entry;
  ASSERT_EQ(read_cache_entry(dir(), kCubin, key, &entry), EntryStatus::Ok);
  EXPECT_EQ(entry.name, entry_of("named"));
}

TEST_F(CubinCache, ConcurrentCompilesNeverLeaveATornFile) {
  // For each of 3 fresh kernels, 8 threads compile it at once through the
  // cache (each misses, runs NVRTC and renames its file over the entry, or
  // reads a whole entry another thread wrote) while 2 threads keep reading
  // the entry: every read is Missing or a whole, valid entry.
  for (const std::string variant : {"race_a", "race_bb", "race_ccc"}) {
    SCOPED_TRACE(variant);
    const std::string source = source_of(variant);
    const Sha256Digest key = cubin_cache_key(source, kArch);
    std::atomic<bool> compiling{true};
    std::atomic<int> torn{0}, whole{0}, failures{0};
    std::vector<std::string> results(8);
    std::vector<std::thread> readers;
    for (int r = 0; r < 2; ++r) {
      readers.emplace_back([&] {
        while (compiling.load()) {
          CacheEntry entry;
          const EntryStatus status = read_cache_entry(dir(), kCubin, key, &entry);
          if (status == EntryStatus::Missing) continue;
          if (status == EntryStatus::Ok && entry.name == entry_of(variant) && is_elf(entry.payload)) {
            ++whole;
          } else {
            ++torn;
          }
        }
      });
    }
    std::vector<std::thread> compilers;
    for (int t = 0; t < 8; ++t) {
      compilers.emplace_back([&, t] {
        try {
          results[t] = cached_cubin(source, entry_of(variant), kArch);
        } catch (const CudaError&) {
          ++failures;
        }
      });
    }
    for (std::thread& t : compilers) t.join();
    compiling = false;
    for (std::thread& t : readers) t.join();
    EXPECT_EQ(torn.load(), 0);
    EXPECT_EQ(failures.load(), 0);
    for (const std::string& result : results) EXPECT_TRUE(is_elf(result));
    CacheEntry entry;
    ASSERT_EQ(read_cache_entry(dir(), kCubin, key, &entry), EntryStatus::Ok);
    for (const std::string& result : results) EXPECT_EQ(result, entry.payload);
  }
  EXPECT_EQ(files_in(dir()).size(), 3u) << "temporary files left behind";
}

TEST_F(CubinCache, DiskCacheOffOrRefusedDirectoryCompilesEveryTime) {
  const std::string shared_dir = root_.path() + "/shared";
  ASSERT_TRUE(make_dir(shared_dir));
  ASSERT_EQ(::chmod(shared_dir.c_str(), 0775), 0);
  EXPECT_NE(set_kernel_cache_dir(shared_dir), "") << "a group-writable directory is refused";
  for (int round = 0; round < 2; ++round) {
    CubinOrigin origin = CubinOrigin::Disk;
    cached_cubin(source_of("refused"), entry_of("refused"), kArch, &origin);
    EXPECT_EQ(origin, CubinOrigin::Compiled);
  }
  EXPECT_TRUE(files_in(shared_dir).empty()) << "nothing is written to a refused directory";
  EXPECT_EQ(set_kernel_cache_dir(""), "");
  CubinOrigin origin = CubinOrigin::Disk;
  cached_cubin(source_of("off"), entry_of("off"), kArch, &origin);
  cached_cubin(source_of("off"), entry_of("off"), kArch, &origin);
  EXPECT_EQ(origin, CubinOrigin::Compiled);
}

// A fused gelu over CUDA tensors, lowered as the inductor does.
Kernel gelu_kernel(double scale) {
  graph::TensorMeta meta = test::contiguous_meta(graph::DType::Float32, {64, 1024});
  meta.device_type = graph::DeviceType::CUDA;
  meta.device_index = 0;
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta);
  auto f = [](double value) { return PrimArg::of_scalar(Scalar::of_float(value)); };
  const int z = b.binary(Prim::Mul, PrimArg::of_value(x), f(scale));
  const int e = b.unary(Prim::Erf, b.binary(Prim::Mul, PrimArg::of_value(z), f(0.7071067811865476)));
  const int half = b.binary(Prim::Mul, PrimArg::of_value(z), f(0.5));
  const int one_plus = b.binary(Prim::Add, PrimArg::of_value(e), f(1.0));
  graph.set_outputs({b.binary(Prim::Mul, PrimArg::of_value(half), PrimArg::of_value(one_plus))});
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  EXPECT_EQ(groups.size(), 1u);
  return lower_group(graph, groups.at(0)).kernel;
}

TEST_F(CubinCache, TheRuntimePathReadsTheDiskInANewProcess) {
  const Kernel kernel = gelu_kernel(1.25);
  const std::string source = generate_cuda_source(kernel).text;
  const CudaKernelCacheCounts start = cuda_kernel_cache_counts();
  bool compiled_now = false;
  const auto first = compile_cuda_cached(kernel, kArch, &compiled_now);
  EXPECT_TRUE(compiled_now);
  EXPECT_TRUE(is_elf(first->cubin));
  CacheEntry entry;
  ASSERT_EQ(read_cache_entry(dir(), kCubin, cubin_cache_key(source, kArch), &entry), EntryStatus::Ok);
  EXPECT_EQ(entry.name, first->source.scalar.name);
  EXPECT_EQ(entry.payload, first->cubin);

  // Memory first.
  const auto again = compile_cuda_cached(kernel, kArch, &compiled_now);
  EXPECT_FALSE(compiled_now);
  EXPECT_EQ(again.get(), first.get());

  // A new process in all but name: the memory forgotten, the disk hit.
  clear_cuda_kernel_memory_cache();
  const auto loaded = compile_cuda_cached(kernel, kArch, &compiled_now);
  EXPECT_FALSE(compiled_now);
  EXPECT_NE(loaded.get(), first.get());
  EXPECT_EQ(loaded->cubin, first->cubin);
  EXPECT_EQ(loaded->source.scalar.name, first->source.scalar.name);
  EXPECT_EQ(loaded->source.vector.name, first->source.vector.name);

  const CudaKernelCacheCounts end = cuda_kernel_cache_counts();
  EXPECT_EQ(end.compiled - start.compiled, 1) << "NVRTC ran once";
  EXPECT_EQ(end.memory_hits - start.memory_hits, 1);
  EXPECT_EQ(end.disk_hits - start.disk_hits, 1);
  EXPECT_EQ(end.disk_rejected - start.disk_rejected, 0);

  // A damaged entry on the runtime path: recompiled, never loaded.
  write_file(path_of(source), read_file(path_of(source)).substr(0, 200));
  clear_cuda_kernel_memory_cache();
  const auto rebuilt = compile_cuda_cached(kernel, kArch, &compiled_now);
  EXPECT_TRUE(compiled_now);
  EXPECT_EQ(rebuilt->cubin, first->cubin);
  EXPECT_EQ(cuda_kernel_cache_counts().disk_rejected - end.disk_rejected, 1);
}

// Whether a cubin defines the symbol `name` (its string table holds it).
bool defines(const std::string& cubin, const std::string& name) {
  return cubin.find(std::string(1, '\0') + name + std::string(1, '\0')) != std::string::npos;
}

TEST_F(CubinCache, KernelsCompiledTogetherAreEachFiledUnderTheirOwnSource) {
  // Four kernels of one shape (one entry name), one repeated: NVRTC runs
  // once per program, every kernel finds its renamed entry in its cubin,
  // the kernels of a program share its modules.
  const std::vector<Kernel> kernels = {gelu_kernel(1.0), gelu_kernel(2.0), gelu_kernel(3.0), gelu_kernel(2.0),
                                       gelu_kernel(4.0)};
  std::vector<CudaKernelRequest> requests;
  for (const Kernel& kernel : kernels) requests.push_back({&kernel, default_launch_config(kernel)});
  const CudaKernelCacheCounts start = cuda_kernel_cache_counts();
  const std::vector<CudaKernelResult> first = compile_cuda_kernels(requests, kArch, 4);
  const CudaKernelCacheCounts compiled = cuda_kernel_cache_counts();
  const size_t per_program = kernels_per_program(4);
  EXPECT_EQ(compiled.compiled - start.compiled, 4) << "the repeat compiles once";
  EXPECT_EQ(compiled.programs - start.programs, static_cast<int64_t>((4 + per_program - 1) / per_program));
  EXPECT_EQ(compiled.memory_hits - start.memory_hits, 1) << "the repeat";
  ASSERT_EQ(first.size(), kernels.size());
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_TRUE(first[i].kernel) << i << ": " << first[i].error;
    const CudaKernel& k = *first[i].kernel;
    EXPECT_TRUE(is_elf(k.cubin));
    EXPECT_TRUE(is_program_entry_of(k.source.scalar.name, generate_cuda_source(kernels[i]).scalar.name));
    EXPECT_TRUE(defines(k.cubin, k.source.scalar.name)) << k.source.scalar.name;
    if (!k.source.vector.name.empty()) EXPECT_TRUE(defines(k.cubin, k.source.vector.name));
    EXPECT_EQ(k.source.text, generate_cuda_source(kernels[i]).text) << "the kernel keeps its own text";
    EXPECT_EQ(first[i].compiled_now, i != 3);
  }
  EXPECT_EQ(first[3].kernel.get(), first[1].kernel.get());
  if (per_program > 1) {
    EXPECT_EQ(first[0].kernel->modules.get(), first[1].kernel->modules.get()) << "one program, one module";
    EXPECT_NE(first[0].kernel->source.scalar.name, first[1].kernel->source.scalar.name);
  }

  // A new process: every kernel from the disk under its own source's key,
  // with the entry name of its program; no NVRTC.
  clear_cuda_kernel_memory_cache();
  const std::vector<CudaKernelResult> again = compile_cuda_kernels(requests, kArch, 4);
  const CudaKernelCacheCounts read = cuda_kernel_cache_counts();
  EXPECT_EQ(read.compiled, compiled.compiled);
  EXPECT_EQ(read.disk_hits - compiled.disk_hits, 4);
  for (size_t i = 0; i < again.size(); ++i) {
    ASSERT_TRUE(again[i].kernel) << again[i].error;
    EXPECT_FALSE(again[i].compiled_now);
    EXPECT_EQ(again[i].kernel->cubin, first[i].kernel->cubin);
    EXPECT_EQ(again[i].kernel->source.scalar.name, first[i].kernel->source.scalar.name);
    EXPECT_EQ(again[i].kernel->source.vector.name, first[i].kernel->source.vector.name);
  }
  if (per_program > 1) EXPECT_EQ(again[0].kernel->modules.get(), again[1].kernel->modules.get());

  // One kernel alone through compile_cuda_cached: the program's cubin.
  clear_cuda_kernel_memory_cache();
  bool compiled_now = true;
  const auto alone = compile_cuda_cached(kernels[1], kArch, &compiled_now);
  EXPECT_FALSE(compiled_now);
  EXPECT_EQ(alone->source.scalar.name, first[1].kernel->source.scalar.name);

  // cached_cubin looks entries up by their own names: a program's cubin is
  // no hit there, and the kernel compiles alone.
  const CudaSource source = generate_cuda_source(kernels[1]);
  CubinOrigin origin = CubinOrigin::Disk;
  const std::string own = cached_cubin(source.text, source.scalar.name, kArch, &origin);
  if (per_program > 1) {
    EXPECT_EQ(origin, CubinOrigin::Compiled);
    EXPECT_TRUE(defines(own, source.scalar.name));
  }
}

TEST_F(CubinCache, OneKernelPerProgramCompilesAsBefore) {
  // A single kernel's program is its own source: the cubin and the entry
  // name cached_cubin would make.
  const Kernel kernel = gelu_kernel(5.0);
  const CudaSource source = generate_cuda_source(kernel);
  const std::vector<CudaKernelResult> results =
      compile_cuda_kernels({CudaKernelRequest{&kernel, default_launch_config(kernel)}}, kArch, 1);
  ASSERT_TRUE(results[0].kernel) << results[0].error;
  EXPECT_EQ(results[0].kernel->source.scalar.name, source.scalar.name);
  CubinOrigin origin = CubinOrigin::Compiled;
  EXPECT_EQ(cached_cubin(source.text, source.scalar.name, kArch, &origin), results[0].kernel->cubin);
  EXPECT_EQ(origin, CubinOrigin::Disk);
}

TEST(KernelsPerProgram, KeepsEveryWorkerBusyAndCapsPrograms) {
  EXPECT_EQ(kernels_per_program(0), 1u);
  EXPECT_EQ(kernels_per_program(1), 1u);
  EXPECT_GE(kernels_per_program(1000), kernels_per_program(10));
  EXPECT_LE(kernels_per_program(100000), 8u) << "KILN_NVRTC_KERNELS_PER_PROGRAM unset: at most 8";
}

}  // namespace
}  // namespace kiln::inductor::cuda
