// Tests of inductor/kernel_manifest.h: the code digest leaves the host CPU
// out (Note [Kernel replay]) and keeps everything else.
#include <gtest/gtest.h>

#include "inductor/kernel_manifest.h"

namespace kiln::inductor {
namespace {

std::string ir(const std::string& body, const std::string& cpu, const std::string& features) {
  return "define void @k(ptr %0) #0 {\n" + body + "\n}\nattributes #0 = { nounwind \"target-cpu\"=\"" + cpu +
         "\" \"target-features\"=\"" + features + "\" }\n";
}

TEST(KernelManifest, CodeDigestIgnoresTheHostCpu) {
  EXPECT_EQ(kernel_code_digest(ir("  ret void", "skylake-avx512", "+avx2,+fma,+avx512f")),
            kernel_code_digest(ir("  ret void", "znver4", "+avx2,+fma,-avx512f")));
}

TEST(KernelManifest, CodeDigestSeesEverythingElse) {
  EXPECT_NE(kernel_code_digest(ir("  ret void", "znver4", "+avx2")),
            kernel_code_digest(ir("  unreachable", "znver4", "+avx2")));
  EXPECT_NE(kernel_code_digest("__global__ void k() {}"), kernel_code_digest("__global__ void k() { return; }"));
}

}  // namespace
}  // namespace kiln::inductor
