// NVRTC's options, apart from nvrtc_compiler.cpp: they need no CUDA header,
// and the cubin cache hashes them in builds with or without the toolkit.
#include "inductor/cuda/nvrtc_compiler.h"

namespace kiln::inductor::cuda {

std::vector<std::string> nvrtc_options(const std::string& arch) {
  // No fast math: op semantics follow llvm_codegen.cpp (Note [CUDA kernels]).
  return {"--gpu-architecture=" + arch, "-std=c++17", "--device-as-default-execution-space"};
}

}  // namespace kiln::inductor::cuda
