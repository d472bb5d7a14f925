// Tests of several kernels' sources as one NVRTC program
// (inductor/cuda/cuda_program.h): the prelude once, entries renamed per
// kernel, and the program compiling with the real NVRTC where there is one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "inductor/cuda/cuda_program.h"
#include "inductor/cuda/cuda_text.h"
#include "inductor/cuda/nvrtc_compiler.h"

namespace kiln::inductor::cuda {
namespace {

// Occurrences of `needle` in `text`.
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A source as generate_cuda_source writes one: the prelude, a scalar entry
// and (with `vector`) a vector entry, both named after the shape.
CudaSource source_of(float scale, bool vector) {
  CudaSource source;
  source.scalar.name = "kiln_pointwise_64";
  source.text = std::string(detail::cuda_prelude()) + "\nextern \"C\" __global__ void kiln_pointwise_64(float* o) { o[threadIdx.x] = " +
                std::to_string(scale) + "f; }\n";
  if (vector) {
    source.vector.name = "kiln_pointwise_64_vec";
    source.text += "extern \"C\" __global__ void kiln_pointwise_64_vec(float* o) { o[2 * threadIdx.x] = " +
                   std::to_string(scale) + "f; }\n";
  }
  return source;
}

TEST(CudaProgram, OneSourceIsItsOwnProgram) {
  const CudaSource one = source_of(1.0f, true);
  std::vector<CudaSource> renamed;
  EXPECT_EQ(program_of_sources({one}, &renamed), one.text);
  EXPECT_EQ(renamed.at(0).scalar.name, one.scalar.name);
  EXPECT_EQ(renamed.at(0).vector.name, one.vector.name);
}

TEST(CudaProgram, SourcesOfOneShapeGetDistinctEntriesAndOnePrelude) {
  const std::vector<CudaSource> sources = {source_of(1.0f, true), source_of(2.0f, false), source_of(3.0f, true)};
  std::vector<CudaSource> renamed;
  const std::string program = program_of_sources(sources, &renamed);
  EXPECT_EQ(count_of(program, detail::cuda_prelude()), 1u);
  ASSERT_EQ(renamed.size(), 3u);
  EXPECT_EQ(renamed[0].scalar.name, "kiln_pointwise_64_k0");
  EXPECT_EQ(renamed[0].vector.name, "kiln_pointwise_64_k0_vec");
  EXPECT_EQ(renamed[1].scalar.name, "kiln_pointwise_64_k1");
  EXPECT_EQ(renamed[1].vector.name, "") << "no vector entry stays none";
  EXPECT_EQ(renamed[2].vector.name, "kiln_pointwise_64_k2_vec");
  for (const CudaSource& source : renamed) {
    EXPECT_EQ(count_of(program, "void " + source.scalar.name + "("), 1u) << source.scalar.name;
  }
  EXPECT_EQ(count_of(program, "void kiln_pointwise_64("), 0u);
  EXPECT_EQ(renamed[1].text, sources[1].text) << "each keeps its own text (its cache key)";
  std::string why;
  if (!nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC here to compile the program: " << why;
  const std::string cubin = compile_cubin_here(program, "sm_90a");
  for (const CudaSource& source : renamed) {
    EXPECT_NE(cubin.find(source.scalar.name), std::string::npos) << source.scalar.name;
  }
}

TEST(CudaProgram, RefusesASourceWithoutThePrelude) {
  CudaSource bare;
  bare.scalar.name = "k";
  bare.text = "extern \"C\" __global__ void k() {}\n";
  EXPECT_THROW(program_of_sources({source_of(1.0f, false), bare}), CudaError);
}

TEST(CudaProgram, EntryNamesOfAProgram) {
  EXPECT_EQ(program_entry_name("kiln_row_4x8", 3), "kiln_row_4x8_k3");
  EXPECT_TRUE(is_program_entry_of("kiln_row_4x8", "kiln_row_4x8"));
  EXPECT_TRUE(is_program_entry_of("kiln_row_4x8_k12", "kiln_row_4x8"));
  EXPECT_FALSE(is_program_entry_of("kiln_row_4x8_k", "kiln_row_4x8"));
  EXPECT_FALSE(is_program_entry_of("kiln_row_4x8_k1x", "kiln_row_4x8"));
  EXPECT_FALSE(is_program_entry_of("kiln_row_4x80", "kiln_row_4x8"));
  EXPECT_FALSE(is_program_entry_of("kiln_row_4x8_vec", "kiln_row_4x8"));
  EXPECT_FALSE(is_program_entry_of("kiln_row_4", "kiln_row_4x8"));
}

}  // namespace
}  // namespace kiln::inductor::cuda
