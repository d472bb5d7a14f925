// Generated matrix products for the CPU inductor (Note [GEMM kernels] in
// gemm.cpp): C[b] = A[b] @ B[b] for float32/float64 with A and B at any
// strides (transposed, permuted, broadcast batch dims) and C contiguous.
// A GemmSpec fixes shapes and strides; the code generator
// (llvm_gemm.cpp, LLVM builds only) compiles one kernel per spec, with the
// shapes and strides as constants. No LLVM, no Python here.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/tensor_meta.h"
#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_cache.h"

namespace kiln::inductor::cpu {

// One batched product, normalized (make_gemm_spec): batch dims that
// broadcast B over rows of A are folded into m, size-1 batch dims dropped,
// adjacent batch dims merged where both operands step through them as one.
// A[b][i, p] is at a + sum(idx_d * a_batch[d]) + i * a_row + p * a_col
// (elements), B[b][p, j] likewise; C[b][i, j] is at c + (b * m + i) * n + j.
struct GemmSpec {
  graph::DType dtype = graph::DType::Float32;  // Float32 or Float64
  std::vector<int64_t> batch;                  // sizes of the (normalized) batch dims
  std::vector<int64_t> a_batch, b_batch;       // per batch dim, 0 where broadcast
  int64_t m = 0, n = 0, k = 0;
  int64_t a_row = 0, a_col = 0;
  int64_t b_row = 0, b_col = 0;
  // The kernel reads m and the row blocking from its sizes argument (Note
  // [GEMM rows at run time]): one kernel for every m of this spec's shape.
  bool rows_at_run_time = false;
};

// How a spec's kernel splits its work (plan_gemm; the code generator and
// the runner must agree). A task is one batch and one block of mb rows;
// tasks are numbered batch-major.
struct GemmPlan {
  int64_t vector = 8;   // lanes of one vector register (host and dtype)
  int64_t mr = 6;       // rows of the register tile
  int64_t nr = 16;      // columns of the register tile (2 vectors)
  int64_t mb = 6;       // rows per task (a multiple of mr)
  int64_t kc = 1;       // depth of one packed block of B
  int64_t nc = 16;      // columns of one packed block of B (a multiple of nr)
  int64_t m_blocks = 0; // tasks per batch
  int64_t tasks = 0;    // batch count x m_blocks
};

// The spec of matmul(a, b) for CPU operands of one float dtype with ranks
// >= 2 (prims' matmul: batch dims broadcast, result contiguous); nullopt
// when the generated kernel does not handle them (another dtype or device).
std::optional<GemmSpec> make_gemm_spec(const graph::TensorMeta& a, const graph::TensorMeta& b);

// The spec as text: the log's name for it and the "auto" policy's key.
std::string format_gemm_spec(const GemmSpec& spec);

// What decides the spec's machine code, as text (the kernel cache's key):
// format_gemm_spec, with m left out where rows_at_run_time.
std::string gemm_code_text(const GemmSpec& spec);

// The sizes argument of a call of the spec's kernel: m, the rows of a
// task and the tasks of a batch (read where rows_at_run_time).
struct GemmRowWords {
  int64_t words[3];
};
GemmRowWords gemm_row_words(const GemmSpec& spec, const GemmPlan& plan);

// The spec's blocking for this host (its vector width).
GemmPlan plan_gemm(const GemmSpec& spec);

// Number of batches (product of spec.batch).
int64_t gemm_batch_count(const GemmSpec& spec);

// Multiply-adds of one product, m * n * k * batches.
int64_t gemm_flops(const GemmSpec& spec);

// Compiles the spec's kernel for the host CPU (llvm_gemm.cpp). Its ABI is
// CpuKernelFn's: data = {A, B, C} element pointers, sizes gemm_row_words
// (read only where rows_at_run_time), [begin, end) a range of plan_gemm's
// tasks. Throws CodegenError (also in builds
// without LLVM).
CpuKernel compile_gemm(const GemmSpec& spec, bool keep_ir = false);

// The LLVM IR compile_gemm would build for `spec` (its function named
// kiln_gemm), not compiled. Throws CodegenError.
std::string gemm_ir_text(const GemmSpec& spec);

// compile_gemm through the kernel cache (memory, then disk).
CpuKernel compile_gemm_cached(const GemmSpec& spec, KernelSource* source = nullptr);

// Runs `compiled` (made for `spec`) over all its tasks, on up to `threads`
// threads of kiln's pool when the product is large enough to gain from it
// (kGemmParallelMinFlops), else on this thread. C must not overlap A or B.
void call_gemm(const CpuKernel& compiled, const GemmSpec& spec, const char* a, const char* b, char* c,
               int threads);

// Products with fewer multiply-adds run on the calling thread: handing
// work to the pool costs more than it saves below ~1M (40 us here).
constexpr int64_t kGemmParallelMinFlops = int64_t{1} << 20;

// Counters of generated GEMM use since the process started (or the last
// reset_gemm_counts).
struct GemmCounts {
  int64_t kiln_calls = 0;   // products computed by a generated kernel
  int64_t aten_calls = 0;   // GEMM nodes' products left to torch (policy, layout)
  int64_t measured = 0;     // specs timed by the "auto" policy
};

// A snapshot of the counters.
GemmCounts gemm_counts();

// Zeroes the counters (kiln.reset()).
void reset_gemm_counts();

// Adds to the counters (the GEMM nodes' callables count their calls).
void count_gemm_call(bool generated);
void count_gemm_measured();

}  // namespace kiln::inductor::cpu
