// The definition of the opaque JitModule, for llvm_*.cpp files only: it
// includes LLVM headers, which nothing outside inductor/cpu/llvm_*.cpp may.
#pragma once

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <memory>
#include <string>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/llvm_jit.h"

namespace kiln::inductor::cpu {

struct JitModule {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;  // owned by `context`'s lifetime
};

// Builds a module named `symbol` with `emit` and JIT-compiles it into a
// kernel (its IR kept when `keep_ir`); a JitError becomes a CodegenError.
CpuKernel jit_kernel(const std::string& symbol, const std::function<void(llvm::LLVMContext&, llvm::Module&)>& emit,
                     bool keep_ir);

// The IR `emit` builds into a module named `symbol`, as text, without
// compiling it (Note [Kernel replay] in inductor/kernel_manifest.cpp).
std::string emit_ir_text(const std::string& symbol,
                         const std::function<void(llvm::LLVMContext&, llvm::Module&)>& emit);

}  // namespace kiln::inductor::cpu
