// kiln_nvrtc_worker: one NVRTC worker process (Note [NVRTC workers]).
// kiln starts it with the socket on kNvrtcWorkerFd and libnvrtc's path in
// KILN_NVRTC_LIBRARY; it answers each request (arch, CUDA source) with
// ("ok", cubin, NVRTC's messages, ms) or ("error", message, "", ms), ms
// the compile's milliseconds in the worker, until kiln
// closes the socket. No Python, no torch: it starts in milliseconds.
#include <unistd.h>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_source.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/cuda/nvrtc_worker_protocol.h"

int main() {
  using namespace kiln::inductor::cuda;
  std::vector<std::string> request;
  while (read_fields(kNvrtcWorkerFd, 2, &request)) {
    std::vector<std::string> reply;
    const auto start = std::chrono::steady_clock::now();
    try {
      std::string messages;
      std::string cubin = compile_cubin_here(request[1], request[0], &messages);
      reply = {"ok", std::move(cubin), std::move(messages)};
    } catch (const std::exception& e) {
      reply = {"error", e.what(), ""};
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    reply.push_back(std::to_string(ms));
    if (!write_fields(kNvrtcWorkerFd, reply)) break;
  }
  close(kNvrtcWorkerFd);
  return 0;
}
