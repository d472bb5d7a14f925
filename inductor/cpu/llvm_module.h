// The definition of the opaque JitModule, for llvm_*.cpp files only: it
// includes LLVM headers, which nothing outside inductor/cpu/llvm_*.cpp may.
#pragma once

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>

#include "inductor/cpu/llvm_jit.h"

namespace kiln::inductor::cpu {

struct JitModule {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;  // owned by `context`'s lifetime
};

}  // namespace kiln::inductor::cpu
