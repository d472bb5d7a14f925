// Tests of the CPU kernel cache (inductor/cpu/kernel_cache.h) and of what it
// shares with the CUDA cubin cache (inductor/kernel_cache_file.h,
// inductor/sha256.h): SHA-256 against Python's hashlib; the entry format
// refusing every truncation, flipped byte, other version, kind and key; the directory
// rules (created 0700, foreign or group/world-writable directories refused);
// concurrent writers never leaving a torn file; and, with LLVM, kernels
// found in memory, then on disk, and recompiled (with correct results,
// compared with torch) when their file is damaged.
#include <Python.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_cache.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/kernel_cache_file.h"
#include "inductor/lower_pointwise.h"
#include "inductor/sha256.h"
#include "prims/prim_builder.h"
#include "runtime/aten_bridge.h"
#include "tests/cpp/inductor/cache_test_util.h"
#include "tests/cpp/inductor/cpu_test_util.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::inductor::cpu {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using prims::Scalar;
using test::PyRef;

using test::files_in;
using test::make_dir;
using test::mode_of;
using test::read_file;
using test::TempDir;
using test::write_file;

Sha256Digest key_of(const std::string& text) { return sha256(text); }

// ---------------------------------------------------------------- SHA-256

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, MatchesHashlibAtEveryPaddingBoundaryAndInPieces) {
  // Lengths around the 55/56/64-byte padding cases, fed whole and in pieces.
  PyRef ns = test::exec_module(
      "import hashlib\n"
      "def digest(n):\n"
      "    return hashlib.sha256(bytes((i * 7 + n) & 255 for i in range(n))).hexdigest()\n");
  for (int n = 0; n < 300; ++n) {
    std::string bytes;
    for (int i = 0; i < n; ++i) bytes += static_cast<char>((i * 7 + n) & 255);
    PyRef call = PyRef::steal(PyObject_CallFunction(test::item(ns, "digest").get(), "i", n));
    ASSERT_TRUE(call) << test::take_error();
    const std::string expected = PyUnicode_AsUTF8(call.get());
    EXPECT_EQ(to_hex(sha256(bytes)), expected) << n;
    Sha256 pieces;
    for (size_t at = 0, step = 1; at < bytes.size(); at += step, step = step % 70 + 3) {
      pieces.update(std::string_view(bytes).substr(at, step));
    }
    EXPECT_EQ(to_hex(pieces.digest()), expected) << n;
  }
}

TEST(Sha256, FieldsCannotRunIntoEachOther) {
  Sha256 a, b;
  a.update_field("ab");
  a.update_field("c");
  b.update_field("a");
  b.update_field("bc");
  EXPECT_NE(a.digest(), b.digest());
}

// ------------------------------------------------------------ entry format

constexpr CacheEntryKind kCpu = CacheEntryKind::CpuObject;

CacheEntry sample_entry() {
  CacheEntry entry;
  entry.name = "kiln_k0_3";
  for (int i = 0; i < 200; ++i) entry.payload += static_cast<char>(i * 31);
  return entry;
}

TEST(KernelCacheFile, RoundTrip) {
  const Sha256Digest key = key_of("round trip");
  const CacheEntry entry = sample_entry();
  CacheEntry decoded;
  ASSERT_EQ(decode_cache_entry(encode_cache_entry(kCpu, key, entry), kCpu, key, &decoded), EntryStatus::Ok);
  EXPECT_EQ(decoded.name, entry.name);
  EXPECT_EQ(decoded.payload, entry.payload);
}

TEST(KernelCacheFile, EveryTruncationIsRefused) {
  const Sha256Digest key = key_of("truncated");
  const std::string bytes = encode_cache_entry(kCpu, key, sample_entry());
  for (size_t size = 0; size < bytes.size(); ++size) {
    CacheEntry decoded;
    EXPECT_EQ(decode_cache_entry(std::string_view(bytes).substr(0, size), kCpu, key, &decoded), EntryStatus::Truncated)
        << size;
  }
  CacheEntry decoded;
  EXPECT_EQ(decode_cache_entry(bytes + "x", kCpu, key, &decoded), EntryStatus::BadLength);
}

TEST(KernelCacheFile, EveryFlippedBitIsRefused) {
  const Sha256Digest key = key_of("flipped");
  const std::string bytes = encode_cache_entry(kCpu, key, sample_entry());
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = bytes;
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << bit));
      CacheEntry decoded;
      EXPECT_NE(decode_cache_entry(damaged, kCpu, key, &decoded), EntryStatus::Ok) << "byte " << at << " bit " << bit;
    }
  }
}

TEST(KernelCacheFile, WhatEachCheckReports) {
  const Sha256Digest key = key_of("which check");
  const std::string bytes = encode_cache_entry(kCpu, key, sample_entry());
  CacheEntry decoded;
  std::string other_version = bytes;
  other_version[8] = static_cast<char>(kKernelCacheFormatVersion + 1);
  EXPECT_EQ(decode_cache_entry(other_version, kCpu, key, &decoded), EntryStatus::BadVersion);
  std::string other_magic = bytes;
  other_magic[0] = 'X';
  EXPECT_EQ(decode_cache_entry(other_magic, kCpu, key, &decoded), EntryStatus::BadMagic);
  EXPECT_EQ(decode_cache_entry(bytes, kCpu, key_of("another key"), &decoded), EntryStatus::WrongKey);
  // A cubin's entry is not an object's, whatever its key.
  EXPECT_EQ(decode_cache_entry(bytes, CacheEntryKind::CudaCubin, key, &decoded), EntryStatus::WrongKind);
  EXPECT_NE(cache_entry_path("/d", kCpu, key), cache_entry_path("/d", CacheEntryKind::CudaCubin, key));
  std::string flipped_object = bytes;
  flipped_object[flipped_object.size() - 5] ^= 0x10;
  EXPECT_EQ(decode_cache_entry(flipped_object, kCpu, key, &decoded), EntryStatus::BadChecksum);
  EXPECT_EQ(decode_cache_entry("", kCpu, key, &decoded), EntryStatus::Truncated);
  // A symbol that would not be a C identifier is refused before any write.
  CacheEntry odd = sample_entry();
  odd.name = "kernel; rm -rf";
  EXPECT_EQ(decode_cache_entry(encode_cache_entry(kCpu, key, odd), kCpu, key, &decoded), EntryStatus::BadName);
  TempDir dir;
  EXPECT_NE(write_cache_entry(dir.path(), kCpu, key, odd), "");
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(KernelCacheFile, WrittenPrivatelyAndReadBack) {
  TempDir dir;
  const Sha256Digest key = key_of("written");
  CacheEntry entry = sample_entry();
  CacheEntry read;
  EXPECT_EQ(read_cache_entry(dir.path(), kCpu, key, &read), EntryStatus::Missing);
  ASSERT_EQ(write_cache_entry(dir.path(), kCpu, key, entry), "");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{to_hex(key) + ".kernel"});
  EXPECT_EQ(mode_of(cache_entry_path(dir.path(), kCpu, key)), 0600u);
  ASSERT_EQ(read_cache_entry(dir.path(), kCpu, key, &read), EntryStatus::Ok);
  EXPECT_EQ(read.payload, entry.payload);
  // A foreign key: the file renamed to another key's name is refused.
  const Sha256Digest other = key_of("other");
  ASSERT_EQ(
      ::rename(cache_entry_path(dir.path(), kCpu, key).c_str(), cache_entry_path(dir.path(), kCpu, other).c_str()), 0);
  EXPECT_EQ(read_cache_entry(dir.path(), kCpu, other, &read), EntryStatus::WrongKey);
  // A symlink is never followed.
  ASSERT_EQ(
      ::symlink(cache_entry_path(dir.path(), kCpu, other).c_str(), cache_entry_path(dir.path(), kCpu, key).c_str()),
      0);
  EXPECT_NE(read_cache_entry(dir.path(), kCpu, key, &read), EntryStatus::Ok);
  // A directory in an entry's place is not a file.
  ASSERT_EQ(::unlink(cache_entry_path(dir.path(), kCpu, key).c_str()), 0);
  ASSERT_TRUE(make_dir(cache_entry_path(dir.path(), kCpu, key)));
  EXPECT_EQ(read_cache_entry(dir.path(), kCpu, key, &read), EntryStatus::NotAFile);
}

TEST(KernelCacheFile, ConcurrentWritersNeverLeaveATornFile) {
  // 8 writers rewrite one entry with payloads of different sizes and bytes
  // while 2 readers read it: every read is Missing (before the first
  // rename) or a whole payload some writer wrote.
  TempDir dir;
  const Sha256Digest key = key_of("contended");
  auto payload = [](int writer) {
    CacheEntry entry;
    entry.name = "kiln_writer_" + std::to_string(writer);
    entry.payload = std::string(4096 + 977 * writer, static_cast<char>('a' + writer));
    return entry;
  };
  std::atomic<bool> writing{true};
  std::atomic<int> torn{0}, whole{0}, failures{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (writing.load()) {
        CacheEntry read;
        const EntryStatus status = read_cache_entry(dir.path(), kCpu, key, &read);
        if (status == EntryStatus::Missing) continue;
        const int writer = read.payload.empty() ? -1 : read.payload[0] - 'a';
        if (status != EntryStatus::Ok || writer < 0 || writer >= 8 || read.payload != payload(writer).payload ||
            read.name != payload(writer).name) {
          ++torn;
        } else {
          ++whole;
        }
      }
    });
  }
  std::vector<std::thread> writers;
  for (int w = 0; w < 8; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 25; ++i) {
        if (!write_cache_entry(dir.path(), kCpu, key, payload(w)).empty()) ++failures;
      }
    });
  }
  for (std::thread& t : writers) t.join();
  writing = false;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(whole.load(), 0);
  CacheEntry read;
  EXPECT_EQ(read_cache_entry(dir.path(), kCpu, key, &read), EntryStatus::Ok);
  EXPECT_EQ(files_in(dir.path()).size(), 1u) << "temporary files left behind";
}

// ------------------------------------------------------- directory rules

TEST(KernelCacheDir, CreatedPrivateWithItsParents) {
  TempDir root;
  const std::string dir = root.path() + "/a/b/kiln";
  EXPECT_EQ(prepare_cache_dir(dir), "");
  EXPECT_EQ(mode_of(root.path() + "/a"), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(prepare_cache_dir(dir), "") << "an existing private directory is used as it is";
}

TEST(KernelCacheDir, GroupOrWorldWritableIsRefused) {
  TempDir root;
  for (unsigned mode : {0770u, 0702u, 0777u}) {
    const std::string dir = root.path() + "/mode" + std::to_string(mode);
    ASSERT_TRUE(make_dir(dir));
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    const std::string problem = prepare_cache_dir(dir);
    EXPECT_NE(problem.find("writable by other users"), std::string::npos) << problem;
  }
  // Readable by others is not a risk to this user's kernels.
  const std::string readable = root.path() + "/readable";
  ASSERT_TRUE(make_dir(readable));
  ASSERT_EQ(::chmod(readable.c_str(), 0755), 0);
  EXPECT_EQ(prepare_cache_dir(readable), "");
}

TEST(KernelCacheDir, ForeignOrNotADirectoryIsRefused) {
  TempDir root;
  std::string foreign = root.path() + "/foreign";
  if (::geteuid() == 0) {
    ASSERT_TRUE(make_dir(foreign));
    ASSERT_EQ(::chown(foreign.c_str(), 65534, 65534), 0);  // nobody
  } else {
    foreign = "/";  // root's
  }
  const std::string problem = prepare_cache_dir(foreign);
  EXPECT_NE(problem.find("owned by uid"), std::string::npos) << problem;
  const std::string file = root.path() + "/file";
  write_file(file, "x");
  EXPECT_NE(prepare_cache_dir(file).find("not a directory"), std::string::npos);
}

TEST(KernelCacheDir, FromTheEnvironment) {
  struct Saved {
    const char* name;
    std::string value;
    bool set;
  };
  std::vector<Saved> saved;
  for (const char* name : {"KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
    const char* value = std::getenv(name);
    saved.push_back({name, value ? value : "", value != nullptr});
  }
  ::setenv("KILN_CACHE_DIR", "/tmp/somewhere", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  ::setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(cache_dir_from_environment(), "/tmp/somewhere");
  ::setenv("KILN_CACHE_DIR", "", 1);
  EXPECT_EQ(cache_dir_from_environment(), "") << "KILN_CACHE_DIR= turns the disk cache off";
  ::unsetenv("KILN_CACHE_DIR");
  EXPECT_EQ(cache_dir_from_environment(), "/tmp/xdg/kiln");
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // the XDG spec ignores relative paths
  EXPECT_EQ(cache_dir_from_environment(), "/tmp/home/.cache/kiln");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(cache_dir_from_environment(), "/tmp/home/.cache/kiln");
  for (const Saved& s : saved) {
    if (s.set) {
      ::setenv(s.name, s.value.c_str(), 1);
    } else {
      ::unsetenv(s.name);
    }
  }
}

// ------------------------------------------------ the cache, with kernels

constexpr const char* kTensors =
    "import torch\n"
    "torch.manual_seed(0)\n"
    "x = torch.randn(64, 33)\n"
    "y = torch.randn(64, 33)\n";

PyRef tensors() {
  static PyRef* ns = new PyRef(test::exec_module(kTensors));  // leaked: outlives Py_FinalizeEx otherwise
  return *ns;
}

// sigmoid(x * y + bias) over x and y, lowered to one kernel; `bias` makes
// kernels that differ in their text.
struct TestKernel {
  Kernel kernel;
  std::vector<int> inputs;  // graph inputs, in the kernel's order: 0 is x, 1 is y
  std::string torch_expr;
};

TestKernel make_kernel(double bias, const std::string& name = "kernel") {
  PyRef ns = tensors();
  PrimGraph graph;
  PrimBuilder b(graph);
  std::vector<int> values;
  for (const char* tensor : {"x", "y"}) {
    graph::TensorMeta meta;
    runtime::read_tensor_meta(test::item(ns, tensor).get(), &meta);
    values.push_back(graph.add_input(meta));
  }
  const int product = b.binary(Prim::Mul, PrimArg::of_value(values[0]), PrimArg::of_value(values[1]));
  const int shifted = b.binary(Prim::Add, PrimArg::of_value(product), PrimArg::of_scalar(Scalar::of_float(bias)));
  const int out = b.unary(Prim::Sigmoid, shifted);
  graph.set_outputs({out});
  const auto groups = find_pointwise_groups(graph);
  EXPECT_EQ(groups.size(), 1u);
  LoweredKernel lowered = lower_pointwise(graph, groups.at(0));
  lowered.kernel.name = name;
  return {lowered.kernel, lowered.inputs, "torch.sigmoid(x * y + " + std::to_string(bias) + ")"};
}

// Runs `compiled` on x and y and compares with torch.
void expect_matches_torch(const CpuKernel& compiled, const TestKernel& test_kernel) {
  ASSERT_NE(compiled.fn, nullptr);
  PyRef ns = tensors();
  std::vector<PyRef> held;
  std::vector<PyObject*> bound;
  for (int value : test_kernel.inputs) {
    held.push_back(test::item(ns, value == 0 ? "x" : "y"));
    bound.push_back(held.back().get());
  }
  PyRef result = PyRef::steal(run_cpu_kernel(compiled, test_kernel.kernel, bound.data()));
  ASSERT_TRUE(result) << test::take_error();
  PyDict_SetItemString(ns.get(), "_actual", PyTuple_GET_ITEM(result.get(), 0));
  const std::string compare = "torch.allclose(_actual, " + test_kernel.torch_expr + ", rtol=1e-6, atol=1e-7)";
  PyRef same = PyRef::steal(PyRun_String(compare.c_str(), Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(same) << test::take_error();
  EXPECT_EQ(same.get(), Py_True) << format_kernel(test_kernel.kernel);
}

// Points the cache at a fresh directory for one test and back to off after.
class KernelCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_codegen_available()) return;
    ASSERT_EQ(set_kernel_cache_dir(dir_.path() + "/cache"), "");
    clear_kernel_memory_cache();
  }
  void TearDown() override {
    set_kernel_cache_dir("");
    clear_kernel_memory_cache();
  }
  std::string cache() const { return kernel_cache_dir(); }

  TempDir dir_;
};

TEST_F(KernelCache, KeysIgnoreTheNameAndFollowTheText) {
  KILN_REQUIRE_LLVM();
  EXPECT_EQ(kernel_cache_key(make_kernel(1.0, "a").kernel), kernel_cache_key(make_kernel(1.0, "b").kernel));
  EXPECT_NE(kernel_cache_key(make_kernel(1.0).kernel), kernel_cache_key(make_kernel(2.0).kernel));
}

TEST_F(KernelCache, MemoryThenDisk) {
  KILN_REQUIRE_LLVM();
  EXPECT_EQ(mode_of(cache()), 0700u);
  const TestKernel test_kernel = make_kernel(0.25);
  const Sha256Digest key = kernel_cache_key(test_kernel.kernel);
  const KernelCacheCounts start = kernel_cache_counts();
  KernelSource source = KernelSource::Memory;

  CpuKernel first = compile_cached(test_kernel.kernel, &source);
  EXPECT_EQ(source, KernelSource::Compiled);
  EXPECT_TRUE(first.object.empty()) << "the cache keeps object bytes on disk, not in kernels it hands out";
  expect_matches_torch(first, test_kernel);
  CacheEntry entry;
  ASSERT_EQ(read_cache_entry(cache(), kCpu, key, &entry), EntryStatus::Ok);
  EXPECT_EQ(entry.name, first.symbol);

  // Same text under another name: the memory cache.
  CpuKernel second = compile_cached(make_kernel(0.25, "renamed").kernel, &source);
  EXPECT_EQ(source, KernelSource::Memory);
  EXPECT_EQ(second.fn, first.fn);

  // A new process in all but name: the memory cache forgotten, the disk hit.
  clear_kernel_memory_cache();
  CpuKernel third = compile_cached(test_kernel.kernel, &source);
  EXPECT_EQ(source, KernelSource::Disk);
  EXPECT_NE(third.fn, first.fn) << "loaded again from the file, into its own JITDylib";
  expect_matches_torch(third, test_kernel);

  const KernelCacheCounts end = kernel_cache_counts();
  EXPECT_EQ(end.compiled - start.compiled, 1);
  EXPECT_EQ(end.memory_hits - start.memory_hits, 1);
  EXPECT_EQ(end.disk_hits - start.disk_hits, 1);
  EXPECT_EQ(end.disk_writes - start.disk_writes, 1);
  EXPECT_EQ(end.disk_rejected - start.disk_rejected, 0);
}

// Each way of damaging an entry: detected, never loaded, recompiled (with a
// correct result) and the file rewritten whole.
TEST_F(KernelCache, DamagedEntriesAreRecompiledNeverLoaded) {
  KILN_REQUIRE_LLVM();
  const TestKernel test_kernel = make_kernel(0.5);
  const TestKernel other_kernel = make_kernel(0.75);
  const std::string path = cache_entry_path(cache(), kCpu, kernel_cache_key(test_kernel.kernel));
  const std::string other_path = cache_entry_path(cache(), kCpu, kernel_cache_key(other_kernel.kernel));
  compile_cached(test_kernel.kernel);
  compile_cached(other_kernel.kernel);
  const std::string good = read_file(path);
  const std::string other_good = read_file(other_path);
  ASSERT_GT(good.size(), 100u);

  struct Damage {
    const char* what;
    std::string bytes;
  };
  std::string flipped = good;
  flipped[good.size() - good.size() / 3] ^= 0x01;  // a byte of the object code
  std::string other_version = good;
  other_version[8] = static_cast<char>(kKernelCacheFormatVersion + 7);
  const std::vector<Damage> damages = {
      {"truncated", good.substr(0, good.size() - 17)},
      {"truncated inside the header", good.substr(0, 40)},
      {"a flipped payload byte", flipped},
      {"another format version", other_version},
      {"another key's file", other_good},
      {"empty", ""},
      {"not a cache file", std::string(good.size(), '\x7f')},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.what);
    write_file(path, damage.bytes);
    clear_kernel_memory_cache();
    const KernelCacheCounts before = kernel_cache_counts();
    KernelSource source = KernelSource::Disk;
    CpuKernel recompiled = compile_cached(test_kernel.kernel, &source);
    const KernelCacheCounts after = kernel_cache_counts();
    EXPECT_EQ(source, KernelSource::Compiled);
    EXPECT_EQ(after.disk_rejected - before.disk_rejected, 1);
    EXPECT_EQ(after.disk_hits - before.disk_hits, 0);
    expect_matches_torch(recompiled, test_kernel);
    CacheEntry entry;
    EXPECT_EQ(read_cache_entry(cache(), kCpu, kernel_cache_key(test_kernel.kernel), &entry), EntryStatus::Ok)
        << "the entry is rewritten whole";
  }
  // The other kernel's file was only copied, never damaged: still a hit.
  clear_kernel_memory_cache();
  KernelSource source = KernelSource::Compiled;
  expect_matches_torch(compile_cached(other_kernel.kernel, &source), other_kernel);
  EXPECT_EQ(source, KernelSource::Disk);
}

TEST_F(KernelCache, UnsafeDirectoryLeavesTheCacheInMemory) {
  KILN_REQUIRE_LLVM();
  const std::string shared_dir = dir_.path() + "/shared";
  ASSERT_TRUE(make_dir(shared_dir));
  ASSERT_EQ(::chmod(shared_dir.c_str(), 0775), 0);
  EXPECT_NE(set_kernel_cache_dir(shared_dir), "");
  EXPECT_EQ(kernel_cache_dir(), "");
  const TestKernel test_kernel = make_kernel(1.5);
  KernelSource source = KernelSource::Disk;
  expect_matches_torch(compile_cached(test_kernel.kernel, &source), test_kernel);
  EXPECT_EQ(source, KernelSource::Compiled);
  EXPECT_TRUE(files_in(shared_dir).empty()) << "nothing is written to a refused directory";
  compile_cached(test_kernel.kernel, &source);
  EXPECT_EQ(source, KernelSource::Memory);
}

TEST_F(KernelCache, DiskCacheOff) {
  KILN_REQUIRE_LLVM();
  EXPECT_EQ(set_kernel_cache_dir(""), "");
  EXPECT_EQ(kernel_cache_dir(), "");
  const TestKernel test_kernel = make_kernel(1.75);
  KernelSource source = KernelSource::Disk;
  compile_cached(test_kernel.kernel, &source);
  EXPECT_EQ(source, KernelSource::Compiled);
  clear_kernel_memory_cache();
  compile_cached(test_kernel.kernel, &source);
  EXPECT_EQ(source, KernelSource::Compiled) << "with the disk cache off, a forgotten kernel compiles again";
}

TEST_F(KernelCache, ConcurrentCompilesOfOneKernel) {
  KILN_REQUIRE_LLVM();
  const TestKernel test_kernel = make_kernel(2.5);
  std::vector<CpuKernel> results(8);
  {
    // Compiling needs no GIL; release it so the threads really overlap.
    PyThreadState* saved = PyEval_SaveThread();
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] { results[t] = compile_cached(test_kernel.kernel); });
    }
    for (std::thread& t : threads) t.join();
    PyEval_RestoreThread(saved);
  }
  for (const CpuKernel& result : results) expect_matches_torch(result, test_kernel);
  CacheEntry entry;
  EXPECT_EQ(read_cache_entry(cache(), kCpu, kernel_cache_key(test_kernel.kernel), &entry), EntryStatus::Ok);
  EXPECT_EQ(files_in(cache()).size(), 1u) << "temporary files left behind";
}

}  // namespace
}  // namespace kiln::inductor::cpu
