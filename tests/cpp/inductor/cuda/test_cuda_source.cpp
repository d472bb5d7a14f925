// Tests of CUDA source generation (inductor/cuda/cuda_source.h) and NVRTC
// (nvrtc_compiler.h), which need no GPU: representative prim graphs are
// scheduled and lowered as the inductor does, written as CUDA C, checked
// for the parts that decide their shape (vector entries, warp or block
// rows, persistent rows, shared memory), and compiled by the real NVRTC
// for sm_90a. Running the kernels is tests/python/test_inductor_cuda.py's
// job, on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "graph/tensor_meta.h"
#include "inductor/cuda/cuda_source.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/kernel_ir.h"
#include "inductor/lower_group.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "tests/cpp/test_metas.h"

namespace kiln::inductor::cuda {
namespace {

using graph::DType;
using graph::TensorMeta;
using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using prims::Scalar;

PrimArg v(int id) { return PrimArg::of_value(id); }
PrimArg f(double value) { return PrimArg::of_scalar(Scalar::of_float(value)); }

#define KILN_REQUIRE_NVRTC()                                              \
  do {                                                                    \
    std::string why;                                                      \
    if (!nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC here: " << why; \
  } while (0)

TensorMeta cuda_meta(DType dtype, std::vector<int64_t> sizes) {
  TensorMeta meta = test::contiguous_meta(dtype, std::move(sizes));
  meta.device_type = graph::DeviceType::CUDA;
  meta.device_index = 0;
  return meta;
}

TensorMeta transposed(TensorMeta meta) {
  std::swap(meta.sizes[0], meta.sizes[1]);
  std::swap(meta.strides[0], meta.strides[1]);
  return meta;
}

// The kernels of the graph `build` makes over inputs of `metas` (expecting
// `kernels` groups), written as CUDA C and compiled for sm_90a.
std::vector<CudaSource> compile(const std::vector<TensorMeta>& metas,
                                const std::function<std::vector<int>(PrimBuilder&, const std::vector<int>&)>& build,
                                size_t kernels = 1) {
  PrimGraph graph;
  PrimBuilder b(graph);
  std::vector<int> inputs;
  for (const TensorMeta& meta : metas) inputs.push_back(graph.add_input(meta));
  graph.set_outputs(build(b, inputs));
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  EXPECT_EQ(groups.size(), kernels) << prims::format_prim_graph(graph);
  std::vector<CudaSource> sources;
  for (const KernelGroup& group : groups) {
    const LoweredKernel lowered = lower_group(graph, group);
    CudaSource source = generate_cuda_source(lowered.kernel);
    try {
      const std::string cubin = compile_cubin(source.text, "sm_90a");
      EXPECT_GT(cubin.size(), 100u);
    } catch (const CudaError& error) {
      ADD_FAILURE() << error.what() << "\n" << format_kernel(lowered.kernel) << "\n" << source.text;
    }
    sources.push_back(std::move(source));
  }
  return sources;
}

bool has(const CudaSource& source, const std::string& text) { return source.text.find(text) != std::string::npos; }

// How many times `text` occurs in the source.
size_t count(const CudaSource& source, const std::string& text) {
  size_t n = 0;
  for (size_t at = source.text.find(text); at != std::string::npos; at = source.text.find(text, at + 1)) ++n;
  return n;
}

// The one kernel of the graph `build` makes over inputs of `metas`, lowered.
Kernel lowered_kernel(const std::vector<TensorMeta>& metas,
                      const std::function<std::vector<int>(PrimBuilder&, const std::vector<int>&)>& build) {
  PrimGraph graph;
  PrimBuilder b(graph);
  std::vector<int> inputs;
  for (const TensorMeta& meta : metas) inputs.push_back(graph.add_input(meta));
  graph.set_outputs(build(b, inputs));
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  EXPECT_EQ(groups.size(), 1u) << prims::format_prim_graph(graph);
  return lower_group(graph, groups.at(0)).kernel;
}

// softmax over the last dim, then layer_norm with a weight (issue 6's
// benchmark without the bias), with the mean and rstd as outputs too.
std::vector<int> softmax_layer_norm(PrimBuilder& b, const std::vector<int>& in) {
  const int max = b.reduce(Prim::Amax, in[0], {1}, true);
  const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, v(in[0]), v(max)));
  const int y = b.binary(Prim::Div, v(e), v(b.reduce(Prim::Sum, e, {1}, true)));
  auto [var, mean] = b.var_mean(y, {1}, 0, true);
  const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), f(1e-5)));
  const int out = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(y), v(mean))), v(rstd));
  return std::vector<int>{b.binary(Prim::Mul, v(out), v(in[1])), mean, rstd};
}

// True when every warp shuffle of the source is a declaration's whole
// initializer: every lane shuffles, never inside ?: or a short-circuit.
bool shuffles_unconditionally(const CudaSource& source) {
  size_t at = 0;
  bool any = false;
  while ((at = source.text.find("kiln_shfl_xor(a", at)) != std::string::npos) {
    const size_t line = source.text.rfind('\n', at) + 1;
    const std::string before = source.text.substr(line, at - line);
    if (before.find("const ") == std::string::npos || before.find('?') != std::string::npos) return false;
    any = true;
    ++at;
  }
  return any;
}

// gelu(z), erf form, as torch's decomposition.
int gelu(PrimBuilder& b, int z) {
  const int half = b.binary(Prim::Mul, v(z), f(0.5));
  const int e = b.unary(Prim::Erf, b.binary(Prim::Mul, v(z), f(0.7071067811865476)));
  return b.binary(Prim::Mul, v(half), v(b.binary(Prim::Add, v(e), f(1.0))));
}

TEST(CudaSource, NvrtcReportsItsVersion) {
  KILN_REQUIRE_NVRTC();
  EXPECT_FALSE(nvrtc_version().empty());
}

TEST(CudaSource, ContiguousGeluReadsAndWrites16Bytes) {
  KILN_REQUIRE_NVRTC();
  const auto sources = compile({cuda_meta(DType::Float32, {64, 1024}), cuda_meta(DType::Float32, {64, 1024})},
                               [](PrimBuilder& b, const std::vector<int>& in) {
                                 const int z = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(in[0]), v(in[1]))), f(1.0));
                                 return std::vector<int>{b.binary(Prim::Mul, v(gelu(b, z)), f(0.5))};
                               });
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].vector_width, 4);
  EXPECT_FALSE(sources[0].vector.name.empty());
  EXPECT_TRUE(has(sources[0], "kiln_vec<float, 4>"));
  EXPECT_TRUE(has(sources[0], "erff("));
  EXPECT_TRUE(has(sources[0], "int q ="));  // 32-bit indices suffice
}

TEST(CudaSource, BroadcastAndTransposedInputs) {
  KILN_REQUIRE_NVRTC();
  // A row broadcast along the inner dim keeps vector accesses; a column
  // (inner stride 0) too, read once per vector.
  auto sources = compile({cuda_meta(DType::Float32, {64, 32}), cuda_meta(DType::Float32, {1, 32}),
                          cuda_meta(DType::Float32, {64, 1})},
                         [](PrimBuilder& b, const std::vector<int>& in) {
                           const int s = b.binary(Prim::Sub, v(in[0]), v(in[1]));
                           return std::vector<int>{b.unary(Prim::Exp, b.binary(Prim::Mul, v(s), v(in[2])))};
                         });
  EXPECT_EQ(sources[0].vector_width, 4);
  // A transposed input: scalar accesses only.
  sources = compile({cuda_meta(DType::Float32, {33, 64}), transposed(cuda_meta(DType::Float32, {64, 33}))},
                    [](PrimBuilder& b, const std::vector<int>& in) {
                      return std::vector<int>{b.binary(Prim::Maximum, v(in[0]), v(in[1]))};
                    });
  EXPECT_TRUE(sources[0].vector.name.empty());
  EXPECT_TRUE(has(sources[0], "kiln_fmax("));
  // Sizes that need 64-bit indices.
  sources = compile({cuda_meta(DType::Float32, {int64_t{1} << 31, 2})},
                    [](PrimBuilder& b, const std::vector<int>& in) {
                      return std::vector<int>{b.unary(Prim::Sigmoid, in[0])};
                    });
  EXPECT_TRUE(has(sources[0], "long long q ="));
}

TEST(CudaSource, MixedAndLowPrecisionDtypes) {
  KILN_REQUIRE_NVRTC();
  for (DType low : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(graph::dtype_name(low));
    const auto sources = compile({cuda_meta(low, {16, 64}), cuda_meta(DType::Int64, {16, 64}),
                                  cuda_meta(DType::Bool, {16, 64})},
                                 [&](PrimBuilder& b, const std::vector<int>& in) {
                                   const int x = b.binary(Prim::Mul, v(in[0]), v(in[1]));  // -> low
                                   const int y = b.where(in[2], v(x), f(0.25));
                                   return std::vector<int>{b.unary(Prim::Tanh, y)};
                                 });
    ASSERT_EQ(sources.size(), 1u);
    EXPECT_TRUE(has(sources[0], low == DType::Float16 ? "kiln_h2f(" : "kiln_bf2f("));
    EXPECT_TRUE(has(sources[0], low == DType::Float16 ? "kiln_f2h(" : "kiln_f2bf("));
    EXPECT_EQ(sources[0].vector_width, 2);  // int64 is the widest operand
  }
  // Integer and bool arithmetic, rounding and math functions of doubles.
  compile({cuda_meta(DType::Int32, {8, 8}), cuda_meta(DType::Float64, {8, 8}), cuda_meta(DType::UInt8, {8, 8})},
          [](PrimBuilder& b, const std::vector<int>& in) {
            const int i = b.binary(Prim::Mul, v(b.unary(Prim::Abs, b.unary(Prim::Neg, in[0]))), v(in[0]));
            const int d = b.binary(Prim::Pow, v(b.unary(Prim::Round, in[1])), v(b.unary(Prim::Floor, in[1])));
            const int u = b.binary(Prim::BitwiseXor, v(in[2]), v(in[2]));
            return std::vector<int>{i, b.binary(Prim::Add, v(d), v(b.unary(Prim::Log1p, in[1]))), u,
                                    b.binary(Prim::Minimum, v(in[0]), v(u))};
          },
          1);  // four results over one space, u feeding another too: one kernel
}

TEST(CudaSource, InnerReductionsUseWarpOrBlockRows) {
  KILN_REQUIRE_NVRTC();
  // 200 points a row: a warp per row, combined by shuffles.
  auto sources = compile({cuda_meta(DType::Float32, {300, 200})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.reduce(Prim::Sum, b.unary(Prim::Exp, in[0]), {1}, false)};
  });
  EXPECT_TRUE(has(sources[0], "kiln_shfl_xor("));
  EXPECT_FALSE(has(sources[0], "__syncthreads"));
  // 100003 points a row, every integer kind of reduction: block rows,
  // looped (too long to keep in registers).
  for (Prim prim : {Prim::Sum, Prim::Prod, Prim::Amax, Prim::Amin}) {
    sources = compile({cuda_meta(DType::Int32, {3, 100003})}, [&](PrimBuilder& b, const std::vector<int>& in) {
      return std::vector<int>{b.reduce(prim, in[0], {1}, true)};
    });
    EXPECT_TRUE(has(sources[0], "__syncthreads"));
    EXPECT_TRUE(has(sources[0], "__shared__"));
    EXPECT_TRUE(shuffles_unconditionally(sources[0])) << sources[0].text;
  }
  // Bool rows (or-combined) of a warp each.
  sources = compile({cuda_meta(DType::Bool, {40, 300})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.reduce(Prim::Amax, in[0], {1}, false)};
  });
  EXPECT_TRUE(shuffles_unconditionally(sources[0])) << sources[0].text;
  // A full reduction of bools and of float16.
  compile({cuda_meta(DType::Bool, {7, 9}), cuda_meta(DType::Float16, {5000})},
          [](PrimBuilder& b, const std::vector<int>& in) {
            return std::vector<int>{b.reduce(Prim::Sum, in[0], {0, 1}, false), b.reduce(Prim::Amax, in[1], {0}, false)};
          },
          2);
}

TEST(CudaSource, OuterReductionsSplitOrLoopPerTilePoint) {
  KILN_REQUIRE_NVRTC();
  const auto sources = compile({cuda_meta(DType::Float32, {1000, 257})}, [](PrimBuilder& b, const std::vector<int>& in) {
    auto [var, mean] = b.var_mean(in[0], {0}, 1, false);
    return std::vector<int>{var, mean};
  });
  // 257 columns of 1000 points: 8 threads a column, combined in shared memory.
  EXPECT_FALSE(has(sources[0], "kiln_shfl_xor(a"));
  EXPECT_TRUE(has(sources[0], "__syncthreads"));
  EXPECT_TRUE(has(sources[0], "for (int r = (int)kiln_t; r < 1000; r += 8)"));
  EXPECT_TRUE(has(sources[0], "if (kiln_t == 0 && kiln_valid)"));
  EXPECT_EQ(sources[0].scalar.grid, 9);
  // Many columns (a GELU backward's bias-gradient partials) share theirs too.
  const auto wide = compile({cuda_meta(DType::Float32, {256, 98304})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false)};
  });
  EXPECT_TRUE(has(wide[0], "__syncthreads"));
  EXPECT_TRUE(has(wide[0], "r += 8)"));
  const auto beside = compile({cuda_meta(DType::Float32, {256, 1536})}, [](PrimBuilder& b, const std::vector<int>& in) {
    const int e = b.unary(Prim::Erf, in[0]);
    return std::vector<int>{e, b.reduce(Prim::Sum, e, {0}, false)};
  });
  // An output beside the sum, reading no reduction, is stored by the
  // sum's loop: one loop, one erf per point, in each entry. The vector
  // entry's lanes take 4 columns, 8 lanes a row segment, 4 segments a warp
  // (Note [Vector tiles]).
  EXPECT_EQ(beside[0].vector_width, 4);
  EXPECT_EQ(beside[0].vector.grid, 1536 / 32);
  EXPECT_EQ(count(beside[0], "erff("), 2u) << beside[0].text;
  EXPECT_EQ(count(beside[0], "r < 256; r += 8)"), 1u) << beside[0].text;
  EXPECT_TRUE(has(beside[0], "for (int r = (int)kiln_t; r < 256; r += 32)")) << beside[0].text;
  EXPECT_TRUE(has(beside[0], "kiln_shfl_xor(a2[u], 16)")) << beside[0].text;
  // Short columns: one thread each, looping alone.
  const auto shallow = compile({cuda_meta(DType::Float32, {40, 70000})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false)};
  });
  EXPECT_FALSE(has(shallow[0], "__syncthreads"));
  EXPECT_TRUE(has(shallow[0], "r += 1)"));
}

// argmax/argmin's Index expression (the point's index over the reduced
// dims) in warp rows, block rows and a vector tile, compiled by NVRTC:
// int64 minima combined by shuffles and through shared memory.
TEST(CudaSource, ArgmaxCompilesInEveryRowMode) {
  KILN_REQUIRE_NVRTC();
  for (const auto& [sizes, dim] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
           {{64, 300}, 1}, {{4, 5000}, 1}, {{2000, 64}, 0}, {{6, 7, 9}, 1}}) {
    const auto sources = compile({cuda_meta(DType::Float32, sizes)}, [dim = dim](PrimBuilder& b, const std::vector<int>& in) {
      return std::vector<int>{b.reduce(Prim::Argmax, in[0], {dim}, false), b.reduce(Prim::Argmin, in[0], {dim}, true)};
    });
    ASSERT_EQ(sources.size(), 1u);
    EXPECT_TRUE(has(sources[0], "(long long)j")) << sources[0].text;
  }
}

TEST(CudaSource, SoftmaxThenLayerNormIsOnePersistentRowKernel) {
  KILN_REQUIRE_NVRTC();
  const auto sources = compile({cuda_meta(DType::Float32, {16384, 4096}), cuda_meta(DType::Float32, {4096})},
                               softmax_layer_norm);
  ASSERT_EQ(sources.size(), 1u);
  // 256 threads, 16 points each, kept in registers across the phases.
  EXPECT_EQ(sources[0].config, (LaunchConfig{256, 1, 16, 16, 0}));
  EXPECT_EQ(sources[0].scalar.block, 256);
  EXPECT_EQ(sources[0].scalar.grid, 16384);
  EXPECT_TRUE(has(sources[0], "for (int k = 0; k < 16; ++k)"));
  EXPECT_TRUE(has(sources[0], "[16];"));
  EXPECT_TRUE(has(sources[0], "if (kiln_t == 0)"));  // mean and rstd, once per row
  // Four phases (max, sum, mean, variance), one barrier each per entry:
  // each reduction's shared array is written again only after the other
  // phases' barriers.
  EXPECT_EQ(count(sources[0], "__syncthreads();"), 8u);
  // The vector entry reads the row as float4s: 4 per thread.
  EXPECT_EQ(sources[0].vector_width, 4);
  EXPECT_TRUE(has(sources[0], "for (int k = 0; k < 4; ++k)"));
  EXPECT_TRUE(has(sources[0], "const kiln_vec<float, 4> x0 = "));
  // softmax over short rows: 8 threads a row, 32 rows a block, persistent too.
  const auto short_rows = compile({cuda_meta(DType::Float64, {64, 100})}, [](PrimBuilder& b, const std::vector<int>& in) {
    const int max = b.reduce(Prim::Amax, in[0], {1}, true);
    const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, v(in[0]), v(max)));
    return std::vector<int>{b.binary(Prim::Div, v(e), v(b.reduce(Prim::Sum, e, {1}, true)))};
  });
  EXPECT_TRUE(has(short_rows[0], "for (int k = 0; k < 13; ++k)"));
  EXPECT_TRUE(has(short_rows[0], "for (int m = 4; m > 0; m >>= 1)"));
  EXPECT_TRUE(has(short_rows[0], "kiln_valid"));
  EXPECT_EQ(short_rows[0].scalar.block, 256);
}

// Note [CUDA run-time layout]: kernels of a size instance take their
// outer sizes and strides as scalars after the pointers, and compile.
TEST(CudaSource, RunTimeLayoutsTakeOuterSizesAndStridesAsArguments) {
  KILN_REQUIRE_NVRTC();
  auto written = [](const Kernel& kernel) {
    LaunchConfig config = default_launch_config(kernel);
    config.runtime_layout = true;
    CudaSource source = generate_cuda_source(kernel, config);
    try {
      EXPECT_GT(compile_cubin(source.text, "sm_90a").size(), 100u);
    } catch (const CudaError& error) {
      ADD_FAILURE() << error.what() << "\n" << source.text;
    }
    return source;
  };
  // bfloat16 [4, 9, 64] * a [9, 1] scale broadcast over dims 0 and 2 (no
  // dims merge): three sizes, two strides per operand (in0, in1, out0),
  // the scale's zero one a constant.
  auto scaled = [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.binary(Prim::Mul, v(in[0]), v(in[1]))};
  };
  const Kernel pointwise =
      lowered_kernel({cuda_meta(DType::BFloat16, {4, 9, 64}), cuda_meta(DType::BFloat16, {9, 1})}, scaled);
  const CudaSource p = written(pointwise);
  EXPECT_EQ(p.layout_sizes, 3);
  EXPECT_EQ(p.layout_strides, 2);
  EXPECT_EQ(p.scalar.name, "kiln_pointwise_nxnxn");
  EXPECT_TRUE(has(p, "out0, const long long kiln_a0, const long long kiln_a1, const long long kiln_a2, "
                     "const long long kiln_a3, const long long kiln_a4, const long long kiln_a5, const long long "
                     "kiln_a6, const long long kiln_a7, const long long kiln_a8) {\n"
                     "  const int kiln_n0 = (int)kiln_a0;\n"
                     "  const int kiln_n1 = (int)kiln_a1;\n"
                     "  const int kiln_n2 = (int)kiln_a2;\n"
                     "  const int kiln_st0_0 = (int)kiln_a3;\n"
                     "  const int kiln_st0_1 = (int)kiln_a4;\n"
                     "  const int kiln_st1_1 = (int)kiln_a6;\n"
                     "  const int kiln_st2_0 = (int)kiln_a7;\n"
                     "  const int kiln_st2_1 = (int)kiln_a8;\n"
                     "  const int kiln_rows = kiln_n0 * kiln_n1 * kiln_n2;\n"))
      << p.text;
  EXPECT_TRUE(has(p, "q < kiln_rows / 8;")) << p.text;  // the vector entry: 8 bfloat16s an access
  EXPECT_TRUE(has(p, "% kiln_n2;")) << p.text;
  EXPECT_TRUE(has(p, "i0 * kiln_st0_0 + i1 * kiln_st0_1 + i2;")) << p.text;
  EXPECT_TRUE(has(p, "const int b1 = 0 + i1 * kiln_st1_1;")) << p.text;
  EXPECT_FALSE(has(p, "kiln_st1_0")) << p.text;
  const std::vector<int64_t> words = layout_words(pointwise, p);
  EXPECT_EQ(words, (std::vector<int64_t>{4, 9, 64, 576, 64, 0, 1, 576, 64}));
  EXPECT_EQ(kernel_rows(pointwise), 4 * 9 * 64);
  EXPECT_EQ(grid_for_rows(p.vector, kernel_rows(pointwise)), 2);  // 2304 points, 2048 a block
  // layer_norm's rows over [6, 5, 768] (a block a row): the two kept dims'
  // sizes and strides are words, the row's 768 points constants.
  const CudaSource ln = written(lowered_kernel(
      {cuda_meta(DType::Float32, {30, 768}), cuda_meta(DType::Float32, {768})}, softmax_layer_norm));
  EXPECT_EQ(ln.layout_sizes, 1);  // [30, 768]: one kept dim
  EXPECT_TRUE(has(ln, "row < kiln_rows;")) << ln.text;
  EXPECT_TRUE(has(ln, "for (int k = 0; k < 6; ++k)")) << ln.text;  // 128 threads, 6 points each: constants
  // A cat's bounds (an attention bias padded from 45 to 48 keys) are size
  // constants: arguments after the layout words, and the source compiles.
  const Kernel pad = lowered_kernel({cuda_meta(DType::Bool, {2, 3, 45})}, [](PrimBuilder& b, const std::vector<int>& in) {
    TensorMeta fill_meta = cuda_meta(DType::Bool, {2, 3, 3});
    const int fill = b.full({2, 3, 3}, Scalar::of_int(0), DType::Bool, {fill_meta.device_type, fill_meta.device_index});
    return std::vector<int>{b.where(b.cat({in[0], fill}, 2), f(0.0), f(-1e30))};
  });
  const CudaSource padded = written(pad);
  ASSERT_GE(padded.runtime_constants.size(), 2u) << padded.text;
  EXPECT_TRUE(has(padded, ", const long long kiln_size0")) << padded.text;
  const std::vector<int64_t> pad_words = layout_words(pad, padded);
  EXPECT_EQ(pad_words.size(), layout_word_count(padded, pad));
  EXPECT_NE(std::find(pad_words.end() - padded.runtime_constants.size(), pad_words.end(), 45), pad_words.end());
}

// Sums over rows of `points` points (7 rows, float32).
Kernel row_sum(int64_t points) {
  return lowered_kernel({cuda_meta(DType::Float32, {7, points})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.reduce(Prim::Sum, in[0], {1}, false)};
  });
}

TEST(CudaLaunchConfig, DefaultsFollowTheRowShape) {
  const Kernel pointwise = lowered_kernel({cuda_meta(DType::Float32, {64, 64})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.unary(Prim::Exp, in[0])};
  });
  EXPECT_EQ(default_launch_config(pointwise), (LaunchConfig{1, 256, 0, 16, 0}));
  EXPECT_EQ(default_launch_config(row_sum(8)), (LaunchConfig{1, 256, 8, 16, 0}));      // serial, in registers
  EXPECT_EQ(default_launch_config(row_sum(10)), (LaunchConfig{1, 256, 0, 16, 0}));     // serial, looped
  EXPECT_EQ(default_launch_config(row_sum(100)), (LaunchConfig{8, 32, 13, 16, 0}));    // 8 lanes a row
  EXPECT_EQ(default_launch_config(row_sum(500)), (LaunchConfig{32, 8, 16, 16, 0}));    // a warp a row
  EXPECT_EQ(default_launch_config(row_sum(1000)), (LaunchConfig{128, 1, 8, 16, 0}));   // a block a row
  EXPECT_EQ(default_launch_config(row_sum(4096)), (LaunchConfig{256, 1, 16, 16, 0}));
  EXPECT_EQ(default_launch_config(row_sum(5000)), (LaunchConfig{512, 1, 10, 16, 0}));
  EXPECT_EQ(default_launch_config(row_sum(20000)), (LaunchConfig{1024, 1, 0, 16, 0}));  // looped
  const Kernel outer = lowered_kernel({cuda_meta(DType::Float32, {2000, 45})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false)};
  });
  EXPECT_EQ(default_launch_config(outer), (LaunchConfig{8, 32, 0, 16, 0}));  // split tile rows
  // A bias gradient's shape: few long rows, 32 threads each.
  const Kernel bias = lowered_kernel({cuda_meta(DType::Float32, {16384, 384})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false)};
  });
  EXPECT_EQ(default_launch_config(bias), (LaunchConfig{32, 32, 0, 16, 0}));
  EXPECT_EQ(format_launch_config(LaunchConfig{256, 1, 16, 16, 4}), "tpr=256 rpb=1 items<=16 vec=16B minblocks=4");
}

TEST(CudaLaunchConfig, CandidatesOfSoftmaxLayerNormOver4096) {
  KILN_REQUIRE_NVRTC();
  const Kernel kernel =
      lowered_kernel({cuda_meta(DType::Float32, {16384, 4096}), cuda_meta(DType::Float32, {4096})}, softmax_layer_norm);
  const std::vector<LaunchConfig> expected = {
      {256, 1, 16, 16, 0},  // the default
      {128, 1, 32, 16, 0}, {128, 2, 32, 16, 0}, {512, 1, 8, 16, 0}, {1024, 1, 4, 16, 0},
      {256, 1, 16, 0, 0},   // without float4 accesses
      {256, 1, 16, 16, 4},  // at most 64 registers a thread
  };
  EXPECT_EQ(launch_candidates(kernel), expected);
  std::vector<std::string> texts;
  for (const LaunchConfig& config : expected) {
    SCOPED_TRACE(format_launch_config(config));
    const CudaSource source = generate_cuda_source(kernel, config);
    EXPECT_EQ(source.config, config);
    EXPECT_EQ(source.scalar.block, config.threads_per_row * config.rows_per_block);
    EXPECT_EQ(source.scalar.grid, 16384 / config.rows_per_block);
    EXPECT_EQ(source.vector.name.empty(), config.vector_bytes == 0);
    EXPECT_TRUE(has(source, "for (int k = 0; k < " + std::to_string(config.max_items) + "; ++k)"));
    EXPECT_EQ(has(source, "kiln_valid"), config.rows_per_block > 1);
    EXPECT_EQ(has(source, "__launch_bounds__(256, 4)"), config.min_blocks_per_sm == 4);
    EXPECT_EQ(std::find(texts.begin(), texts.end(), source.text), texts.end());
    texts.push_back(source.text);
    try {
      EXPECT_GT(compile_cubin(source.text, "sm_90a").size(), 100u);
    } catch (const CudaError& error) {
      ADD_FAILURE() << error.what() << "\n" << source.text;
    }
  }
}

TEST(CudaLaunchConfig, CandidateListsAreAHandfulOfDistinctKernels) {
  for (int64_t points : {1, 8, 31, 100, 1000, 4096, 5000, 20000, 100000}) {
    SCOPED_TRACE(points);
    const Kernel kernel = row_sum(points);
    const std::vector<LaunchConfig> candidates = launch_candidates(kernel);
    ASSERT_FALSE(candidates.empty());
    EXPECT_LE(candidates.size(), kMaxLaunchCandidates);
    EXPECT_EQ(candidates[0], default_launch_config(kernel));
    std::vector<std::string> texts;
    for (const LaunchConfig& config : candidates) {
      SCOPED_TRACE(format_launch_config(config));
      const CudaSource source = generate_cuda_source(kernel, config);  // throws for a configuration it refuses
      EXPECT_EQ(std::find(texts.begin(), texts.end(), source.text), texts.end());
      texts.push_back(source.text);
      EXPECT_LE(source.scalar.block, 1024);
    }
    if (points <= 8) {
      EXPECT_EQ(candidates.size(), 1u);  // serial rows: nothing to choose
    }
    if (points >= 1000) {
      EXPECT_GE(candidates.size(), 4u);
    }
  }
}

TEST(CudaLaunchConfig, ConfigurationsAKernelCannotTakeAreRefused) {
  const Kernel rows = row_sum(4096);
  EXPECT_THROW(generate_cuda_source(rows, LaunchConfig{48, 1, 0, 16, 0}), CudaError);    // not a power of two
  EXPECT_THROW(generate_cuda_source(rows, LaunchConfig{2048, 1, 0, 16, 0}), CudaError);  // too many threads
  EXPECT_THROW(generate_cuda_source(rows, LaunchConfig{512, 4, 8, 16, 0}), CudaError);   // 2048 a block
  EXPECT_THROW(generate_cuda_source(rows, LaunchConfig{256, 1, 16, 4, 0}), CudaError);   // 4-byte vectors
  EXPECT_THROW(generate_cuda_source(rows, LaunchConfig{256, 1, 16, 16, 64}), CudaError);
  EXPECT_NO_THROW(generate_cuda_source(rows, LaunchConfig{1, 64, 0, 0, 0}));  // a thread a row, looping
  const Kernel pointwise = lowered_kernel({cuda_meta(DType::Float32, {64, 64})}, [](PrimBuilder& b, const std::vector<int>& in) {
    return std::vector<int>{b.unary(Prim::Exp, in[0])};
  });
  EXPECT_THROW(generate_cuda_source(pointwise, LaunchConfig{32, 8, 0, 16, 0}), CudaError);
  EXPECT_NO_THROW(generate_cuda_source(pointwise, LaunchConfig{1, 256, 0, 0, 0}));
  EXPECT_TRUE(generate_cuda_source(pointwise, LaunchConfig{1, 256, 0, 0, 0}).vector.name.empty());
  EXPECT_EQ(generate_cuda_source(pointwise, LaunchConfig{1, 256, 0, 8, 0}).vector_width, 2);
}

TEST(CudaSource, EmptyKeptDimLaunchesNothing) {
  Kernel kernel;
  kernel.sizes = {0, 5};
  kernel.inputs.push_back(KernelInput{DType::Float32, {5, 1}, 0});
  const int x = kernel.load(0);
  kernel.add_output(KernelOutput{DType::Float32, {5, 1}, kernel.unary(UnaryOp::Exp, x)});
  EXPECT_TRUE(generate_cuda_source(kernel).empty);
}

TEST(CudaSource, InvalidKernelsAreRefused) {
  Kernel kernel;
  kernel.sizes = {4};
  kernel.inputs.push_back(KernelInput{DType::Complex64, {1}, 0});
  EXPECT_THROW(generate_cuda_source(kernel), CudaError);
}

TEST(CudaSource, CompileErrorsCarryTheLog) {
  KILN_REQUIRE_NVRTC();
  try {
    compile_cubin("extern \"C\" __global__ void k() { undefined_name(); }", "sm_90a");
    FAIL() << "no error";
  } catch (const CudaError& error) {
    EXPECT_NE(std::string(error.what()).find("undefined_name"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace kiln::inductor::cuda
