// NVRTC compile time of 16 small generated kernels (8 bf16 pointwise, 8
// row sums over [4096, 256], each with its own constant, so none repeats)
// compiled 1, 2, 4, 8 or 16 to a program (Note [Kernels compiled together]
// in inductor/cuda/cuda_program.cpp), in this process, on one thread:
//
//   BM_NvrtcKernelsPerProgram/k   program_of_sources + compile_cubin_here
//                                 over the 16 sources in groups of k;
//                                 items/s = kernels compiled a second
//
// NVRTC needs no GPU; skipped without it.

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "inductor/cuda/cuda_program.h"
#include "inductor/cuda/cuda_source.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/kernel_ir.h"

namespace kiln::bench {
namespace {

using graph::DType;
using inductor::Kernel;

// The i-th kernel: a pointwise tanh (even i) or a row sum of exp (odd i)
// of 2+i times a bf16 [4096, 256] input.
Kernel small_kernel(int i) {
  Kernel k;
  k.sizes = {4096, 256};
  const int in = k.add_input({DType::BFloat16, {256, 1}, 0});
  const int x = k.cast(k.load(in), DType::Float32);
  const int scaled = k.binary(inductor::BinaryOp::Mul, x, k.constant(DType::Float32, 2.0 + i));
  if (i % 2 == 0) {
    k.add_output({DType::BFloat16, {256, 1}, k.unary(inductor::UnaryOp::Tanh, scaled)});
    return k;
  }
  k.reduced = {1};
  inductor::KernelOutput out;
  out.dtype = DType::Float32;
  out.strides = {1, 0};
  out.value = k.reduce(inductor::ReduceOp::Sum, k.unary(inductor::UnaryOp::Exp, scaled));
  out.has_tensor_shape = true;
  out.tensor_sizes = {4096};
  out.tensor_strides = {1};
  k.add_output(out);
  return k;
}

void BM_NvrtcKernelsPerProgram(benchmark::State& state) {
  std::string why;
  if (!inductor::cuda::nvrtc_available(&why)) {
    state.SkipWithError(("no NVRTC: " + why).c_str());
    return;
  }
  const size_t per_program = static_cast<size_t>(state.range(0));
  std::vector<inductor::cuda::CudaSource> sources;
  for (int i = 0; i < 16; ++i) sources.push_back(inductor::cuda::generate_cuda_source(small_kernel(i)));
  for (auto _ : state) {
    for (size_t start = 0; start < sources.size(); start += per_program) {
      const std::vector<inductor::cuda::CudaSource> group(sources.begin() + start,
                                                         sources.begin() + std::min(sources.size(), start + per_program));
      benchmark::DoNotOptimize(
          inductor::cuda::compile_cubin_here(inductor::cuda::program_of_sources(group), "sm_90a"));
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(sources.size()));
}
BENCHMARK(BM_NvrtcKernelsPerProgram)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
}  // namespace kiln::bench
