#include "tests/cpp/inductor/cuda/cuda_host_emulator.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln::test {
namespace {

// Note [Host emulation of CUDA kernels]
// Generated kernels only use: threadIdx/blockIdx/gridDim (x), __shared__
// arrays, __syncthreads, __shfl_xor_sync over full warps, the bit
// intrinsics __int_as_float/__float_as_int/__longlong_as_double, C math
// functions, and two PTX cvt instructions for float16 (replaced here by
// _Float16 conversions, which round the same way). The shim below gives
// each of them a host meaning: a block's threads are std::threads sharing
// its __shared__ arrays (function statics: blocks run one after another),
// __syncthreads is a std::barrier of the block, and a shuffle exchanges
// values through per-warp slots between two barriers of the warp. What it
// checks is the kernel's logic (indexing, phases, combining, stores), not
// CUDA's memory model or timing.
constexpr const char* kShim = R"(
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
struct kiln_dim3 { unsigned x = 0, y = 1, z = 1; };
static thread_local kiln_dim3 threadIdx, blockIdx;
static kiln_dim3 gridDim, blockDim;
static std::barrier<>* kiln_block_barrier = nullptr;
static std::vector<std::unique_ptr<std::barrier<>>> kiln_warp_barriers;
static unsigned long long kiln_slots[32][32];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
inline void __syncthreads() { kiln_block_barrier->arrive_and_wait(); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
template <typename T> T __shfl_xor_sync(unsigned, T v, int mask) {
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  std::memcpy(&kiln_slots[warp][lane], &v, sizeof(T));
  kiln_warp_barriers[warp]->arrive_and_wait();
  T out;
  std::memcpy(&out, &kiln_slots[warp][lane ^ mask], sizeof(T));
  kiln_warp_barriers[warp]->arrive_and_wait();
  return out;
}
inline float kiln_host_h2f(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
inline unsigned short kiln_host_f2h(float f) {
  _Float16 x = (_Float16)f;
  unsigned short h;
  std::memcpy(&h, &x, 2);
  return h;
}
// A pointer argument is the pointer itself; a scalar (a run-time layout's
// word) is read through its pointer, as cuLaunchKernel takes it.
template <typename P> P kiln_arg(void* a) {
  if constexpr (std::is_pointer_v<P>) {
    return static_cast<P>(a);
  } else {
    return *static_cast<P*>(a);
  }
}
template <typename... P, size_t... I> void kiln_call_with(void (*f)(P...), void** a, std::index_sequence<I...>) {
  f(kiln_arg<P>(a[I])...);
}
template <typename... P> void kiln_call(void (*f)(P...), void** a) {
  kiln_call_with(f, a, std::index_sequence_for<P...>{});
}
template <typename F> void kiln_run(F body, unsigned grid, unsigned block) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b) {
    std::barrier<> barrier(block);
    kiln_block_barrier = &barrier;
    kiln_warp_barriers.clear();
    for (unsigned w = 0; w * 32 < block; ++w) {
      kiln_warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, block - 32 * w)));
    }
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
      threads.emplace_back([&, t] {
        threadIdx.x = t;
        blockIdx.x = b;
        body();
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
}
)";

// `text` with `from` replaced by `to`, which must occur.
bool replace(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) return false;
  text.replace(at, from.size(), to);
  return true;
}

std::string temp_path(const char* suffix) {
  static std::atomic<int> counter{0};
  return "/tmp/kiln_emulated_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + suffix;
}

}  // namespace

std::unique_ptr<HostKernel> HostKernel::compile(const inductor::cuda::CudaSource& source, std::string* error) {
  std::vector<std::unique_ptr<HostKernel>> kernels = compile_all({source}, error);
  return kernels.empty() ? nullptr : std::move(kernels[0]);
}

std::vector<std::unique_ptr<HostKernel>> HostKernel::compile_all(
    const std::vector<inductor::cuda::CudaSource>& sources, std::string* error) {
  std::string text = kShim;
  std::string entries;
  for (size_t i = 0; i < sources.size(); ++i) {
    const inductor::cuda::CudaSource& source = sources[i];
    std::string body = source.text;
    if (!replace(body, "asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));", "f = kiln_host_h2f(h);") ||
        !replace(body, "asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));", "h = kiln_host_f2h(f);")) {
      *error = "the prelude's float16 conversions changed: update the emulator's shim";
      return {};
    }
    // C++ linkage, so that every source's entries can share their names.
    while (replace(body, "extern \"C\" __global__", "__global__")) {
    }
    const std::string ns = "kiln_source" + std::to_string(i);
    text += "namespace " + ns + " {\n" + body + "}\n";
    const std::string n = std::to_string(i);
    entries += "extern \"C\" void kiln_host_scalar" + n + "(void** a, unsigned g, unsigned b) { kiln_run([&] { kiln_call(" +
               ns + "::" + source.scalar.name + ", a); }, g, b); }\n";
    if (!source.vector.name.empty()) {
      entries += "extern \"C\" void kiln_host_vector" + n + "(void** a, unsigned g, unsigned b) { kiln_run([&] { " +
                 "kiln_call(" + ns + "::" + source.vector.name + ", a); }, g, b); }\n";
    }
  }
  text += entries;
  const std::string cpp = temp_path(".cpp"), so = temp_path(".so"), log = temp_path(".log");
  std::ofstream(cpp) << text;
  const std::string command = "g++ -std=c++20 -O1 -fPIC -shared -fno-strict-aliasing -w -pthread -o " + so + " " +
                              cpp + " >" + log + " 2>&1";
  const int status = std::system(command.c_str());
  std::stringstream output;
  output << std::ifstream(log).rdbuf();
  std::remove(cpp.c_str());
  std::remove(log.c_str());
  if (status != 0) {
    *error = "g++ failed:\n" + output.str();
    std::remove(so.c_str());
    return {};
  }
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::remove(so.c_str());
  if (handle == nullptr) {
    *error = std::string("dlopen failed: ") + dlerror();
    return {};
  }
  std::shared_ptr<void> library(handle, [](void* h) { dlclose(h); });
  std::vector<std::unique_ptr<HostKernel>> kernels;
  for (size_t i = 0; i < sources.size(); ++i) {
    std::unique_ptr<HostKernel> kernel(new HostKernel());
    kernel->library_ = library;
    const std::string n = std::to_string(i);
    kernel->scalar_ =
        reinterpret_cast<void (*)(void**, unsigned, unsigned)>(dlsym(handle, ("kiln_host_scalar" + n).c_str()));
    kernel->vector_ =
        reinterpret_cast<void (*)(void**, unsigned, unsigned)>(dlsym(handle, ("kiln_host_vector" + n).c_str()));
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

void HostKernel::run(bool vector, void** args, unsigned grid, unsigned block) const {
  (vector ? vector_ : scalar_)(args, grid, block);
}

bool host_compiler_available() {
  static const bool available = std::system("g++ --version >/dev/null 2>&1") == 0;
  return available;
}

}  // namespace kiln::test
