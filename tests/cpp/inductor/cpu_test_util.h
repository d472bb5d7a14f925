// What the CPU code generation tests share.
#pragma once

#include <gtest/gtest.h>

#include "inductor/cpu/cpu_kernel.h"

// Skips a test that compiles kernels in builds without LLVM (the GPU host).
#define KILN_REQUIRE_LLVM()                                                                        \
  if (!::kiln::inductor::cpu::cpu_codegen_available())                                            \
  GTEST_SKIP() << "kiln was built with KILN_WITH_LLVM=OFF (no LLVM 16 headers): CPU code " \
                  "generation is not compiled"
