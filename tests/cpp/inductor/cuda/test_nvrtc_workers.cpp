// Note [NVRTC workers]: kernels compiled in worker processes are the
// cubins an in-process compile makes, errors keep NVRTC's log, concurrent
// requests do not mix, and a worker killed from outside is replaced.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include "inductor/cuda/cuda_source.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/cuda/nvrtc_workers.h"

namespace kiln::inductor::cuda {
namespace {

#define KILN_REQUIRE_NVRTC_WORKERS()                                                   \
  do {                                                                                 \
    std::string why;                                                                   \
    if (!nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC here: " << why;              \
    ASSERT_FALSE(nvrtc_worker_program(&why).empty()) << "the build puts it beside libkiln: " << why; \
  } while (0)

// A kernel scaling its input by `factor`: distinct sources, distinct cubins.
std::string scale_kernel(int factor) {
  return "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= " + std::to_string(factor) + ".0f; }\n";
}

TEST(NvrtcWorkers, CompileTheCubinAnInProcessCompileMakes) {
  KILN_REQUIRE_NVRTC_WORKERS();
  const int64_t started = nvrtc_workers_started();
  std::string messages = "unset";
  const std::string cubin = compile_cubin_in_worker(scale_kernel(3), "sm_90a", &messages);
  EXPECT_GT(cubin.size(), 100u);
  EXPECT_EQ(cubin, compile_cubin_here(scale_kernel(3), "sm_90a"));
  EXPECT_EQ(messages, "");
  // A worker ran it: either one started now or an idle one was reused.
  EXPECT_TRUE(nvrtc_workers_started() > started || !idle_nvrtc_workers().empty());
}

TEST(NvrtcWorkers, ErrorsCarryNvrtcLog) {
  KILN_REQUIRE_NVRTC_WORKERS();
  try {
    compile_cubin_in_worker("extern \"C\" __global__ void k() { undefined_name(); }", "sm_90a", nullptr);
    FAIL() << "no error";
  } catch (const CudaError& error) {
    EXPECT_NE(std::string(error.what()).find("undefined_name"), std::string::npos) << error.what();
  }
  // The worker survives a source that does not compile.
  EXPECT_EQ(compile_cubin_in_worker(scale_kernel(5), "sm_90a", nullptr), compile_cubin_here(scale_kernel(5), "sm_90a"));
}

TEST(NvrtcWorkers, ConcurrentRequestsEachGetTheirOwnCubin) {
  KILN_REQUIRE_NVRTC_WORKERS();
  constexpr int kThreads = 6;
  std::vector<std::string> got(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&got, i] {
      try {
        got[i] = compile_cubin_in_worker(scale_kernel(10 + i), "sm_90a", nullptr);
      } catch (const CudaError& error) {
        got[i] = std::string("error: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(got[i], compile_cubin_here(scale_kernel(10 + i), "sm_90a")) << i;
}

TEST(NvrtcWorkers, AWorkerKilledWhileIdleIsReplaced) {
  KILN_REQUIRE_NVRTC_WORKERS();
  compile_cubin_in_worker(scale_kernel(7), "sm_90a", nullptr);
  const std::vector<int> idle = idle_nvrtc_workers();
  ASSERT_FALSE(idle.empty());
  for (int pid : idle) ASSERT_EQ(kill(pid, SIGKILL), 0);
  const int64_t started = nvrtc_workers_started();
  EXPECT_EQ(compile_cubin_in_worker(scale_kernel(8), "sm_90a", nullptr), compile_cubin_here(scale_kernel(8), "sm_90a"));
  EXPECT_GT(nvrtc_workers_started(), started);
  // Every request after finds a live worker.
  for (int i = 0; i < static_cast<int>(idle.size()) + 1; ++i) {
    EXPECT_EQ(compile_cubin_in_worker(scale_kernel(20 + i), "sm_90a", nullptr),
              compile_cubin_here(scale_kernel(20 + i), "sm_90a"));
  }
}

}  // namespace
}  // namespace kiln::inductor::cuda
