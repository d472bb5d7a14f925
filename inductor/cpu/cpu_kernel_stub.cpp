// compile_cpu_kernel and the JIT's entry points for builds without LLVM
// (CMake picks this file or llvm_codegen.cpp and llvm_jit.cpp): they say
// that CPU code generation is not built.

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/gemm.h"
#include "inductor/cpu/llvm_jit.h"

namespace kiln::inductor::cpu {

bool cpu_codegen_available() { return false; }

CpuKernel compile_cpu_kernel(const Kernel&, bool) {
  throw CodegenError("CPU code generation needs LLVM 16: kiln was built with KILN_WITH_LLVM=OFF");
}

CpuKernel compile_gemm(const GemmSpec&, bool) {
  throw CodegenError("CPU code generation needs LLVM 16: kiln was built with KILN_WITH_LLVM=OFF");
}

std::string kernel_ir_text(const Kernel&) {
  throw CodegenError("CPU code generation needs LLVM 16: kiln was built with KILN_WITH_LLVM=OFF");
}

std::string gemm_ir_text(const GemmSpec&) {
  throw CodegenError("CPU code generation needs LLVM 16: kiln was built with KILN_WITH_LLVM=OFF");
}

void* jit_resolve_host_symbol(const std::string&) { return nullptr; }

const HostCpu& host_cpu() {
  static const HostCpu none;
  return none;
}

void* jit_load_object(const std::string&, const std::string&) {
  throw JitError("CPU code generation needs LLVM 16: kiln was built with KILN_WITH_LLVM=OFF");
}

std::string jit_llvm_version() { return ""; }

}  // namespace kiln::inductor::cpu
