#include "inductor/cpu/gemm.h"

#include <algorithm>
#include <sstream>

#include "inductor/cpu/llvm_jit.h"
#include "inductor/cpu/thread_pool.h"
#include "inductor/kernel_manifest.h"

namespace kiln::inductor::cpu {

// Note [GEMM kernels]
// torch 1.13 on this kind of host calls the reference BLAS (no OpenBLAS,
// no MKL), ~4 GFLOP/s on the GPT example's products, so kiln generates its
// own. A kernel is specialized on one GemmSpec: shapes and strides are
// constants, so no layout needs a copy (transposed and permuted operands,
// broadcast batch dims are read in place). Work is split into tasks of one
// batch and mb rows (plan_gemm). Per task, for each block of nc columns
// and kc depth, B is packed into zero-padded panels of nr columns
// ([kc][nr], contiguous, on the stack: at most 128 KiB; a vector per row,
// loaded whole where B's rows are contiguous, else element by element),
// then an mr x nr register tile is computed per panel and row tile by
// fused multiply-adds over k, reading A in place (one scalar broadcast per
// row and k, at any strides). Tiles are 6 rows x 2 vectors (12
// accumulators, 2 B vectors and an A broadcast fit AVX2's 16 registers;
// vectors are the host's widest, 16 floats with AVX-512), or 8 rows x 1
// vector when n is at most a vector (attention's 16-wide heads), so no
// vector of padding is computed. Depth blocks after the first add into C.
// The row and column edges (m % mr rows, n % nr columns) are constants, so
// their tiles are functions of their own with masked stores (Note [GEMM
// rows at run time]: a tile for every row count then); padding
// columns are zero in the packed panel, so a narrow tile computes nothing
// from beyond B. K = 0 stores zeros. Each element of C is summed in k
// order by one task, so results do not depend on the thread count. A is
// not packed: on these sizes the rows stay in L1/L2.

// Note [GEMM rows at run time]
// A graph with symbolic sizes is compiled once per size (Note [Size
// instances]); its linear layers' products differ between sizes only in m
// (batch x length rows of activations against a fixed weight). A spec with
// rows_at_run_time compiles a kernel that reads m, the rows of a task (mb)
// and the tasks of a batch (m_blocks) from its sizes argument
// (gemm_row_words, computed by plan_gemm for the call's m), and has a
// short-rows tile for every count 1 .. mr-1 where the constant kernel has
// the one m % mr needs, picked per block by a switch. Its cache key leaves
// m out (gemm_code_text), so one compile serves every m; everything else
// (n, k, strides, batch dims, the mr x nr tile, kc and nc, which m does
// not decide) stays constant. The "auto" policy still times each m
// (format_gemm_spec keeps m and says rows@run): which of the generated
// kernel and at::matmul is faster depends on it.

namespace {

struct Counters {
  std::atomic<int64_t> kiln_calls{0};
  std::atomic<int64_t> aten_calls{0};
  std::atomic<int64_t> measured{0};
};

Counters& counters() {
  static Counters* made = new Counters();
  return *made;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// True when the JIT's feature list ("+avx,+avx2,-avx512f,...") enables `name`.
bool has_feature(const std::string& features, const std::string& name) {
  const std::string item = "+" + name;
  for (size_t at = features.find(item); at != std::string::npos; at = features.find(item, at + 1)) {
    const size_t end = at + item.size();
    if ((at == 0 || features[at - 1] == ',') && (end == features.size() || features[end] == ',')) return true;
  }
  return false;
}

void write_list(std::ostringstream& out, const std::vector<int64_t>& values) {
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  out << "]";
}

}  // namespace

std::optional<GemmSpec> make_gemm_spec(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  using graph::DType;
  if (a.device_type != graph::DeviceType::CPU || b.device_type != graph::DeviceType::CPU) return std::nullopt;
  if (a.dtype != b.dtype || (a.dtype != DType::Float32 && a.dtype != DType::Float64)) return std::nullopt;
  const size_t ra = a.sizes.size(), rb = b.sizes.size();
  if (ra < 2 || rb < 2 || a.strides.size() != ra || b.strides.size() != rb) return std::nullopt;
  GemmSpec spec;
  spec.dtype = a.dtype;
  spec.m = a.sizes[ra - 2];
  spec.k = a.sizes[ra - 1];
  spec.n = b.sizes[rb - 1];
  if (b.sizes[rb - 2] != spec.k) return std::nullopt;
  // A dim of size 1 is never stepped through: stride 0 keeps the text canonical.
  spec.a_row = spec.m == 1 ? 0 : a.strides[ra - 2];
  spec.a_col = spec.k == 1 ? 0 : a.strides[ra - 1];
  spec.b_row = spec.k == 1 ? 0 : b.strides[rb - 2];
  spec.b_col = spec.n == 1 ? 0 : b.strides[rb - 1];
  // Batch dims, aligned on the right; size-1 dims dropped.
  const size_t batch_rank = std::max(ra, rb) - 2;
  for (size_t d = 0; d < batch_rank; ++d) {
    const size_t from_end = batch_rank - d;  // 1 = the innermost batch dim
    const bool in_a = from_end <= ra - 2, in_b = from_end <= rb - 2;
    const int64_t size_a = in_a ? a.sizes[ra - 2 - from_end] : 1;
    const int64_t size_b = in_b ? b.sizes[rb - 2 - from_end] : 1;
    if (size_a != size_b && size_a != 1 && size_b != 1) return std::nullopt;
    const int64_t size = size_a == 1 ? size_b : size_a;
    if (size == 1) continue;
    spec.batch.push_back(size);
    spec.a_batch.push_back(size_a == size ? a.strides[ra - 2 - from_end] : 0);
    spec.b_batch.push_back(size_b == size ? b.strides[rb - 2 - from_end] : 0);
  }
  // Inner batch dims over which B is broadcast and A's rows continue become
  // rows: [8, 16, 32] @ [32, 96] is one 128 x 32 x 96 product.
  while (!spec.batch.empty() && spec.b_batch.back() == 0) {
    const int64_t size = spec.batch.back(), stride = spec.a_batch.back();
    if (spec.m == 1) {
      spec.a_row = stride;
    } else if (stride != spec.m * spec.a_row) {
      break;
    }
    spec.m *= size;
    spec.batch.pop_back();
    spec.a_batch.pop_back();
    spec.b_batch.pop_back();
  }
  // Adjacent batch dims that both operands step through as one.
  for (size_t d = spec.batch.size(); d-- > 1;) {
    const int64_t inner = spec.batch[d];
    if (spec.a_batch[d - 1] == spec.a_batch[d] * inner && spec.b_batch[d - 1] == spec.b_batch[d] * inner) {
      spec.batch[d - 1] *= inner;
      spec.a_batch[d - 1] = spec.a_batch[d];
      spec.b_batch[d - 1] = spec.b_batch[d];
      spec.batch.erase(spec.batch.begin() + static_cast<std::ptrdiff_t>(d));
      spec.a_batch.erase(spec.a_batch.begin() + static_cast<std::ptrdiff_t>(d));
      spec.b_batch.erase(spec.b_batch.begin() + static_cast<std::ptrdiff_t>(d));
    }
  }
  return spec;
}

std::string format_gemm_spec(const GemmSpec& spec) {
  std::ostringstream out;
  out << "gemm " << graph::dtype_name(spec.dtype) << " m" << spec.m << " n" << spec.n << " k" << spec.k << " a("
      << spec.a_row << "," << spec.a_col << ") b(" << spec.b_row << "," << spec.b_col << ")";
  if (!spec.batch.empty()) {
    out << " batch";
    write_list(out, spec.batch);
    out << " a";
    write_list(out, spec.a_batch);
    out << " b";
    write_list(out, spec.b_batch);
  }
  if (spec.rows_at_run_time) out << " rows@run";
  return out.str();
}

std::string gemm_code_text(const GemmSpec& spec) {
  if (!spec.rows_at_run_time) return format_gemm_spec(spec);
  GemmSpec code = spec;
  code.m = -1;
  return format_gemm_spec(code);
}

GemmRowWords gemm_row_words(const GemmSpec& spec, const GemmPlan& plan) { return {{spec.m, plan.mb, plan.m_blocks}}; }

int64_t gemm_batch_count(const GemmSpec& spec) {
  int64_t count = 1;
  for (int64_t size : spec.batch) count *= size;
  return count;
}

int64_t gemm_flops(const GemmSpec& spec) { return gemm_batch_count(spec) * spec.m * spec.n * spec.k; }

GemmPlan plan_gemm(const GemmSpec& spec) {
  GemmPlan plan;
  const std::string& features = host_cpu().features;
  const int64_t vector_bytes = has_feature(features, "avx512f") ? 64 : has_feature(features, "avx") ? 32 : 16;
  const int64_t item = spec.dtype == graph::DType::Float64 ? 8 : 4;
  plan.vector = vector_bytes / item;
  // Tiles of 6 rows x 2 vectors (12 accumulators, 2 of B, 1 of A: the 16
  // registers of AVX2); products at most a vector wide (attention's heads)
  // take 8 rows x 1 vector instead of computing a vector of padding.
  const bool narrow = spec.n <= plan.vector;
  plan.mr = narrow ? 8 : 6;
  plan.nr = narrow ? plan.vector : 2 * plan.vector;
  // Depth blocks of at most 256, evenly sized.
  const int64_t k_blocks = std::max<int64_t>(1, ceil_div(spec.k, 256));
  plan.kc = std::max<int64_t>(1, ceil_div(spec.k, k_blocks));
  // The packed block of B within 128 KiB (the pack buffer is on the stack).
  plan.nc = std::max<int64_t>(plan.nr, (int64_t{128} << 10) / (plan.kc * item) / plan.nr * plan.nr);
  plan.nc = std::min(plan.nc, std::max<int64_t>(plan.nr, ceil_div(spec.n, plan.nr) * plan.nr));
  // Row blocks of up to ~72 rows, evenly sized, multiples of mr: B is
  // packed once per block, and blocks are what threads share.
  const int64_t row_blocks = std::max<int64_t>(1, ceil_div(spec.m, 72));
  plan.mb = std::max<int64_t>(plan.mr, ceil_div(ceil_div(spec.m, row_blocks), plan.mr) * plan.mr);
  plan.m_blocks = ceil_div(spec.m, plan.mb);
  plan.tasks = gemm_batch_count(spec) * plan.m_blocks;
  return plan;
}

CpuKernel compile_gemm_cached(const GemmSpec& spec, KernelSource* source) {
  const std::string text = gemm_code_text(spec);
  if (kernel_manifest_on()) record_kernel("gemm", text, [&spec] { return gemm_ir_text(spec); });
  return compile_cached_text("gemm", text, "gemm", [&spec] { return compile_gemm(spec); },
                             source);
}

void call_gemm(const CpuKernel& compiled, const GemmSpec& spec, const char* a, const char* b, char* c,
               int threads) {
  const GemmPlan plan = plan_gemm(spec);
  if (plan.tasks == 0 || spec.n == 0) return;
  char* data[] = {const_cast<char*>(a), const_cast<char*>(b), c};
  const GemmRowWords rows = gemm_row_words(spec, plan);
  if (threads <= 1 || plan.tasks <= 1 || gemm_flops(spec) < kGemmParallelMinFlops) {
    compiled.fn(data, rows.words, 0, plan.tasks);
    return;
  }
  parallel_run(static_cast<int>(plan.tasks), threads, [&](int task) { compiled.fn(data, rows.words, task, task + 1); });
}

GemmCounts gemm_counts() {
  const Counters& count = counters();
  GemmCounts out;
  out.kiln_calls = count.kiln_calls.load();
  out.aten_calls = count.aten_calls.load();
  out.measured = count.measured.load();
  return out;
}

void reset_gemm_counts() {
  Counters& count = counters();
  count.kiln_calls = 0;
  count.aten_calls = 0;
  count.measured = 0;
}

void count_gemm_call(bool generated) { ++(generated ? counters().kiln_calls : counters().aten_calls); }

void count_gemm_measured() { ++counters().measured; }

}  // namespace kiln::inductor::cpu
