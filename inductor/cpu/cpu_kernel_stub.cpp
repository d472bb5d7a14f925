// compile_cpu_kernel for builds without LLVM (CMake picks this file or
// llvm_codegen.cpp): says that CPU code generation is not built.

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/llvm_jit.h"

namespace kiln::inductor::cpu {

bool cpu_codegen_available() { return false; }

CpuKernel compile_cpu_kernel(const Kernel&, bool) {
  throw CodegenError("CPU code generation needs LLVM 16: kiln was built with KILN_WITH_LLVM=OFF");
}

void* jit_resolve_host_symbol(const std::string&) { return nullptr; }

}  // namespace kiln::inductor::cpu
