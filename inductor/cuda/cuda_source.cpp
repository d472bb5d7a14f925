#include "inductor/cuda/cuda_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kiln::inductor::cuda {

// Note [CUDA kernels]
// A Kernel becomes one CUDA C translation unit with no #include (NVRTC
// compiles it without the toolkit's headers): a short prelude of helpers
// (float16/bfloat16 bit conversions through PTX cvt and integer bit
// arithmetic, NaN-propagating max/min, wrapping integer arithmetic, a
// 16-byte vector struct, warp shuffles), then extern "C" __global__
// functions taking one pointer per input, then per output (Note [CUDA
// kernel ABI] in cuda_source.h). Sizes, strides and offsets are compiled in
// as constants; indices are 32-bit unless some operand's extent needs 64.
//
// Work is organised by *rows*: a row is one kept point (a point of the
// kept dims, the tile dim innermost) and its reduced points. A row is
// handled by TPR threads (threads per row), RPB rows per block, and the
// grid strides over rows:
//   - pointwise kernels (no reduced dim): TPR 1, one point per thread, 256
//     threads a block; a second entry reads and writes 16-byte vectors
//     (float4, 8 halves...) when every operand's innermost stride is 1 (0
//     for a broadcast input), other strides and the innermost size are
//     multiples of the vector width, and, checked at launch, every pointer
//     is aligned to it;
//   - row reductions of at most 16 points: TPR 1; at most 512 points: the
//     power of two of lanes (2..32) giving each at most 16 points, 256
//     threads a block, combined by __shfl_xor_sync within the row's lanes
//     (rows past the last recompute it and store nothing, so every lane
//     reaches the shuffles); longer
//     rows: one block per row (128..1024 threads), combined by shuffles,
//     then through shared memory;
//   - reductions with a tile dim (outer reductions, e.g. a sum over dim 0
//     of a row-major matrix): neighbouring lanes take neighbouring tile
//     points, so their loads coalesce. With rows of at least 64 points
//     (at most 2^24 of them), 8 threads share a row (lane l of warp w: row row0 + l,
//     reduced points w, w + 8, ...), 16 or 32 when there are few rows and
//     long ones (until the kernel has 65536 threads), combined through
//     shared memory; each thread's loop is unrolled 8 times, so 8 loads
//     are in flight. The block's row loop stays uniform for its
//     __syncthreads, and lanes past the last row recompute it and store
//     nothing; a vector entry gives each lane several neighbouring tile
//     points (Note [Vector tiles]). Otherwise TPR 1: each thread loops
//     over its row alone.
// Per row, as Note [Reduction kernels] says: phase k computes the Reduce
// expressions of stage k (each thread its share of the reduced points,
// then combined so every thread of the row holds the result), the outputs
// constant along the reduced dims are stored once per row (by the row's
// thread 0), and a last pass stores the outputs that vary along them and
// read a reduction. Outputs that vary and read none (the activation
// gradient beside a bias gradient's column sum) are stored by phase 1,
// which computes them anyway: a tile row, whose loop keeps nothing in
// registers, would otherwise compute them twice (GELU's backward: erf and
// exp per point, twice, made session 8's kernel compute-bound).
// Values constant along the reduced dims are computed once per row,
// outside the loops over reduced points. When a row has at most 8 points
// per thread ("persistent" rows: softmax, layer_norm over 4096 with 512
// threads), the loops are unrolled and every value a later phase needs
// again (the loaded row, exp(x - max)) stays in registers, so the row is
// read from memory once. Warp and block rows whose reduced dim is innermost
// and contiguous in every operand that varies along it get a vector entry
// too: each thread takes `width` consecutive points per access (a float4
// of the row), loads them once, and loops over them in registers.
// An Index expression (argmax's position, Note [Reduction lowering]) is
// the point's index along each dim (the row's kept indices, the point's
// reduced ones) times its strides, in int64.
// Semantics follow llvm_codegen.cpp op for op: float ops in the value's
// dtype with CUDA's IEEE-accurate functions (expf/exp, erff, tanhf, ...,
// no fast math), sigmoid 1 / (1 + exp(-x)), rsqrt 1 / sqrt(x), round half
// to even (rint), maximum/minimum and max/min reductions propagate NaN,
// float compares are ordered except ne, integer arithmetic wraps, bool add
// is or and mul is and, float16/bfloat16 are storage types converted to and
// from float32 (bfloat16 rounds to nearest even: one cvt.rn.bf16.f32 on
// sm_80 and later, as torch's CUDA kernels; bit arithmetic before, NaN to
// 0x7FC0 as c10).
// Float sums combine per thread, then across threads: a different order
// than torch's, equal up to rounding.

namespace {

constexpr int kPointwiseBlock = 256;
constexpr int kTileBlock = 256;
constexpr int64_t kSerialRow = 16;      // rows up to this many points: one thread each
constexpr int64_t kWarpRow = 512;       // up to this: one warp each
// Rows up to kWarpRow points share warps: the power of two of threads per
// row (2..32) giving each at most kWarpRowItems points, kRowBlock threads a
// block. A warp per row of 256 bfloat16s (session 7, H100) left each lane
// one 16-byte load and the SM too few bytes in flight: softmax over
// [64, 6, 256, 256] ran at a third of the memory's bandwidth.
constexpr int kWarpRowItems = 16;
constexpr int kRowBlock = 256;
constexpr int kSplitThreads = 8;            // split tile rows: threads per row, at least
// ... when there are at most this many rows. Was 65536: a GELU backward's
// bias-gradient partials, [64, 256, 1536] summed over 256 (98304 rows),
// then ran one thread a row, 256 dependent loads each.
constexpr int64_t kSplitMaxRows = int64_t{1} << 24;
constexpr int64_t kSplitMinPoints = 64;     // ... of at least this many points
// Tall outer reductions (a bias gradient: [16384, 384].sum(0)) have few
// rows; up to 32 threads share each, until the kernel has this many.
constexpr int64_t kSplitTargetThreads = 65536;
constexpr int kSplitUnroll = 8;             // reduced points a split-tile thread loads ahead
constexpr int kPersistentItems = 8;     // points per thread of a persistent serial or warp row
// Block rows: points per thread the default aims for (threads per row the
// power of two that gives at most this many, 128..1024). 16 rather than 8:
// a row's registers are its points plus a per-thread overhead (indices,
// accumulators), so fewer threads per row leave room for more rows per SM
// in flight, and each combine has fewer warps to gather (Note [CUDA launch
// configurations]; 8 was the default before, and is a candidate).
constexpr int kBlockRowItems = 16;
constexpr int kMaxItems = 32;           // candidates: most points per thread in registers
constexpr int kMaxBlock = 1024;
constexpr int64_t kMaxGrid = int64_t{1} << 20;
constexpr int64_t kInt32Limit = int64_t{1} << 30;

bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64; }

// The C type a value of `d` is computed in (float16/bfloat16: its bits).
const char* value_type(DType d) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "unsigned char";
    case DType::Int8: return "signed char";
    case DType::Int16: return "short";
    case DType::Int32: return "int";
    case DType::Int64: return "long long";
    case DType::Float16:
    case DType::BFloat16: return "unsigned short";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    default: throw CudaError(std::string("no CUDA kernels for ") + graph::dtype_name(d));
  }
}

// The C type a tensor of `d` holds in memory.
const char* storage_type(DType d) { return d == DType::Bool ? "unsigned char" : value_type(d); }

std::string hex_double(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a", v);
  return buffer;
}

std::string float_literal(double v, DType d) {
  const bool single = d == DType::Float32;
  if (std::isnan(v)) return single ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v)) {
    const std::string inf = single ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
    return v < 0 ? "(-" + inf + ")" : inf;
  }
  if (single) return "(" + hex_double(static_cast<double>(static_cast<float>(v))) + "f)";
  return "(" + hex_double(v) + ")";
}

std::string int_literal(int64_t v, DType d) {
  if (d == DType::Bool) return v ? "true" : "false";
  if (v == std::numeric_limits<int64_t>::min()) return "((long long)0x8000000000000000ULL)";
  return std::string("((") + value_type(d) + ")" + std::to_string(v) + "LL)";
}

std::string constant_text(const Expr& e) {
  return is_float(e.dtype) ? float_literal(e.constant, e.dtype) : int_literal(e.integer, e.dtype);
}

// `x`, a value of dtype `from`, as a value of `to` (llvm_codegen's cast).
std::string cast_text(const std::string& x, DType from, DType to) {
  if (from == to) return x;
  if (from == DType::Float16) return cast_text("kiln_h2f(" + x + ")", DType::Float32, to);
  if (from == DType::BFloat16) return cast_text("kiln_bf2f(" + x + ")", DType::Float32, to);
  if (to == DType::Float16) return "kiln_f2h(" + cast_text(x, from, DType::Float32) + ")";
  if (to == DType::BFloat16) return "kiln_f2bf(" + cast_text(x, from, DType::Float32) + ")";
  if (to == DType::Bool) return "((" + x + ") != 0)";  // NaN is nonzero
  return std::string("((") + value_type(to) + ")(" + x + "))";
}

// The value a reduction starts from.
std::string reduce_init(ReduceOp op, DType d) {
  if (is_float(d)) {
    switch (op) {
      case ReduceOp::Sum: return float_literal(0.0, d);
      case ReduceOp::Prod: return float_literal(1.0, d);
      case ReduceOp::Max: return float_literal(-std::numeric_limits<double>::infinity(), d);
      case ReduceOp::Min: return float_literal(std::numeric_limits<double>::infinity(), d);
    }
  }
  if (d == DType::Bool) return op == ReduceOp::Prod || op == ReduceOp::Min ? "true" : "false";
  const std::string type = value_type(d);
  switch (op) {
    case ReduceOp::Sum: return "((" + type + ")0)";
    case ReduceOp::Prod: return "((" + type + ")1)";
    case ReduceOp::Max: return "kiln_lowest<" + type + ">()";
    case ReduceOp::Min: return "kiln_highest<" + type + ">()";
  }
  throw CudaError("unknown reduction");
}

// acc combined with x (both of dtype d).
std::string combine_text(ReduceOp op, DType d, const std::string& acc, const std::string& x) {
  if (is_float(d)) {
    switch (op) {
      case ReduceOp::Sum: return acc + " + " + x;
      case ReduceOp::Prod: return acc + " * " + x;
      case ReduceOp::Max: return "kiln_fmax(" + acc + ", " + x + ")";
      case ReduceOp::Min: return "kiln_fmin(" + acc + ", " + x + ")";
    }
  }
  if (d == DType::Bool) {
    return op == ReduceOp::Prod || op == ReduceOp::Min ? "(" + acc + " && " + x + ")" : "(" + acc + " || " + x + ")";
  }
  switch (op) {
    case ReduceOp::Sum: return "kiln_add(" + acc + ", " + x + ")";
    case ReduceOp::Prod: return "kiln_mul(" + acc + ", " + x + ")";
    case ReduceOp::Max: return "(" + acc + " > " + x + " ? " + acc + " : " + x + ")";
    case ReduceOp::Min: return "(" + acc + " < " + x + " ? " + acc + " : " + x + ")";
  }
  throw CudaError("unknown reduction");
}

// A float math function's name in dtype d: "expf" or "exp".
std::string math(const char* name, DType d) { return std::string(name) + (d == DType::Float32 ? "f" : ""); }

std::string unary_text(UnaryOp op, const std::string& x, DType d) {
  const std::string type = value_type(d);
  const std::string one = is_float(d) ? float_literal(1.0, d) : "1";
  auto call = [&](const char* name) { return math(name, d) + "(" + x + ")"; };
  switch (op) {
    case UnaryOp::Neg:
      if (is_float(d)) return "(-" + x + ")";
      if (d == DType::Bool) return x;  // -1 and 1 are both true
      return "kiln_sub((" + type + ")0, " + x + ")";
    case UnaryOp::Abs:
      if (is_float(d)) return call("fabs");
      if (d == DType::Bool || d == DType::UInt8) return x;
      return "(" + x + " < 0 ? kiln_sub((" + type + ")0, " + x + ") : " + x + ")";
    case UnaryOp::Exp: return call("exp");
    case UnaryOp::Exp2: return call("exp2");
    case UnaryOp::Expm1: return call("expm1");
    case UnaryOp::Log: return call("log");
    case UnaryOp::Log2: return call("log2");
    case UnaryOp::Log1p: return call("log1p");
    case UnaryOp::Sqrt: return call("sqrt");
    case UnaryOp::Rsqrt: return "(" + one + " / " + call("sqrt") + ")";
    case UnaryOp::Sin: return call("sin");
    case UnaryOp::Cos: return call("cos");
    case UnaryOp::Tan: return call("tan");
    case UnaryOp::Tanh: return call("tanh");
    case UnaryOp::Sigmoid: return "(" + one + " / (" + one + " + " + math("exp", d) + "(-" + x + ")))";
    case UnaryOp::Erf: return call("erf");
    case UnaryOp::Floor: return call("floor");
    case UnaryOp::Ceil: return call("ceil");
    case UnaryOp::Round: return call("rint");  // half to even
    case UnaryOp::Trunc: return call("trunc");
    case UnaryOp::Reciprocal: return "(" + one + " / " + x + ")";
    case UnaryOp::IsNan: return "(" + x + " != " + x + ")";
    case UnaryOp::LogicalNot: return "(!" + x + ")";
  }
  throw CudaError("unknown unary op");
}

std::string binary_text(BinaryOp op, const std::string& a, const std::string& b, DType d) {
  const bool fp = is_float(d);
  const bool boolean = d == DType::Bool;
  const std::string type = value_type(d);
  auto infix = [&](const char* o) { return "((" + type + ")(" + a + " " + o + " " + b + "))"; };
  switch (op) {
    case BinaryOp::Add: return fp ? "(" + a + " + " + b + ")" : boolean ? "(" + a + " || " + b + ")" : "kiln_add(" + a + ", " + b + ")";
    case BinaryOp::Sub: return fp ? "(" + a + " - " + b + ")" : boolean ? "(" + a + " != " + b + ")" : "kiln_sub(" + a + ", " + b + ")";
    case BinaryOp::Mul: return fp ? "(" + a + " * " + b + ")" : boolean ? "(" + a + " && " + b + ")" : "kiln_mul(" + a + ", " + b + ")";
    case BinaryOp::Div: return "(" + a + " / " + b + ")";
    case BinaryOp::Maximum:
      if (fp) return "kiln_fmax(" + a + ", " + b + ")";
      if (boolean) return "(" + a + " || " + b + ")";
      return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
    case BinaryOp::Minimum:
      if (fp) return "kiln_fmin(" + a + ", " + b + ")";
      if (boolean) return "(" + a + " && " + b + ")";
      return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
    case BinaryOp::Pow: return math("pow", d) + "(" + a + ", " + b + ")";
    case BinaryOp::LogicalAnd:
    case BinaryOp::BitwiseAnd: return infix("&");
    case BinaryOp::LogicalOr:
    case BinaryOp::BitwiseOr: return infix("|");
    case BinaryOp::LogicalXor:
    case BinaryOp::BitwiseXor: return infix("^");
  }
  throw CudaError("unknown binary op");
}

std::string compare_text(CompareOp op, const std::string& a, const std::string& b) {
  // C's float comparisons are ordered, except != (true for NaN): as torch.
  const char* o = "==";
  switch (op) {
    case CompareOp::Eq: o = "=="; break;
    case CompareOp::Ne: o = "!="; break;
    case CompareOp::Lt: o = "<"; break;
    case CompareOp::Le: o = "<="; break;
    case CompareOp::Gt: o = ">"; break;
    case CompareOp::Ge: o = ">="; break;
  }
  return "(" + a + " " + o + " " + b + ")";
}

constexpr const char* kPrelude = R"(// Generated by kiln (Note [CUDA kernels]).
template <typename T, int N> struct alignas(sizeof(T) * N) kiln_vec { T v[N]; };
__device__ __forceinline__ float kiln_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short kiln_f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float kiln_bf2f(unsigned short h) { return __int_as_float(((int)h) << 16); }
__device__ __forceinline__ unsigned short kiln_f2bf(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  if (f != f) return 0x7FC0;
  unsigned int bits = (unsigned int)__float_as_int(f);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (unsigned short)(bits >> 16);
#endif
}
template <typename T> __device__ __forceinline__ T kiln_fmax(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> __device__ __forceinline__ T kiln_fmin(T a, T b) { return (a != a || a < b) ? a : b; }
template <typename T> __device__ __forceinline__ T kiln_add(T a, T b) {
  return (T)((unsigned long long)(long long)a + (unsigned long long)(long long)b);
}
template <typename T> __device__ __forceinline__ T kiln_sub(T a, T b) {
  return (T)((unsigned long long)(long long)a - (unsigned long long)(long long)b);
}
template <typename T> __device__ __forceinline__ T kiln_mul(T a, T b) {
  return (T)((unsigned long long)(long long)a * (unsigned long long)(long long)b);
}
template <typename T> __device__ __forceinline__ T kiln_lowest() {
  return (T)(T(-1) < T(0) ? (1ULL << (8 * sizeof(T) - 1)) : 0ULL);
}
template <typename T> __device__ __forceinline__ T kiln_highest() {
  return (T)(T(-1) < T(0) ? ((1ULL << (8 * sizeof(T) - 1)) - 1ULL) : ~0ULL);
}
template <typename T> __device__ __forceinline__ T kiln_shfl_xor(T v, int mask) {
  if constexpr (sizeof(T) < 4) {
    return (T)__shfl_xor_sync(0xffffffffu, (int)v, mask);
  } else {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  }
}
)";

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// A kernel's rows (Note [CUDA kernels]): what its launch configurations
// are chosen from.
struct RowShape {
  bool reduces = false;    // some dim is reduced
  int tile = -1;           // the tile dim (outer reductions), or -1
  int64_t rows = 1;        // kept points
  int64_t row_points = 1;  // reduced points per row
};

RowShape row_shape(const Kernel& k) {
  RowShape shape;
  shape.tile = tile_dim(k);
  for (int d = 0; d < static_cast<int>(k.sizes.size()); ++d) {
    if (is_reduced(k, d)) {
      shape.reduces = true;
      shape.row_points *= k.sizes[d];
    } else {
      shape.rows *= k.sizes[d];
    }
  }
  return shape;
}

// Points per thread of `tpr` threads over a row of `shape`.
int64_t items_per_thread(const RowShape& shape, int tpr) { return (shape.row_points + tpr - 1) / tpr; }

// `config` with max_items the points each thread actually keeps (0 when the
// row loops over memory), so that configurations generating the same code
// compare equal.
LaunchConfig normalized(LaunchConfig config, const RowShape& shape) {
  if (!shape.reduces || shape.row_points == 0) return config;
  const int64_t items = items_per_thread(shape, config.threads_per_row);
  config.max_items = items <= config.max_items ? static_cast<int>(items) : 0;
  return config;
}

// The heuristic (Note [CUDA kernels]).
LaunchConfig default_for(const RowShape& shape) {
  LaunchConfig c;
  c.max_items = kPersistentItems;
  if (!shape.reduces) {
    c.threads_per_row = 1;
    c.rows_per_block = kPointwiseBlock;
    c.max_items = 0;
  } else if (shape.tile >= 0 && shape.rows <= kSplitMaxRows && shape.row_points >= kSplitMinPoints) {
    c.threads_per_row = kSplitThreads;
    while (c.threads_per_row < 32 && shape.rows * c.threads_per_row < kSplitTargetThreads &&
           shape.row_points >= 4 * kSplitMinPoints * c.threads_per_row) {
      c.threads_per_row *= 2;
    }
    c.rows_per_block = 32;
  } else if (shape.tile >= 0 || shape.row_points <= kSerialRow) {
    c.threads_per_row = 1;
    c.rows_per_block = kTileBlock;
  } else if (shape.row_points <= kWarpRow) {
    c.threads_per_row = static_cast<int>(
        std::clamp<int64_t>(pow2_at_least((shape.row_points + kWarpRowItems - 1) / kWarpRowItems), 2, 32));
    c.rows_per_block = kRowBlock / c.threads_per_row;
    c.max_items = kWarpRowItems;
  } else {
    c.threads_per_row = static_cast<int>(
        std::clamp<int64_t>(pow2_at_least((shape.row_points + kBlockRowItems - 1) / kBlockRowItems), 128, kMaxBlock));
    c.rows_per_block = 1;
    c.max_items = kBlockRowItems;
  }
  return normalized(c, shape);
}

// Throws CudaError unless generate_cuda_source can lay `k` out as `config`
// says (Note [CUDA launch configurations]).
void check_config(const Kernel& k, const LaunchConfig& config) {
  const RowShape shape = row_shape(k);
  auto refuse = [&](const std::string& why) {
    throw CudaError("launch configuration " + format_launch_config(config) + " does not fit kernel " + k.name +
                    ": " + why);
  };
  if (config.vector_bytes != 0 && config.vector_bytes != 8 && config.vector_bytes != 16) {
    refuse("vector accesses are 0, 8 or 16 bytes");
  }
  if (config.min_blocks_per_sm < 0 || config.min_blocks_per_sm > 32) refuse("min_blocks_per_sm is 0..32");
  if (!shape.reduces || shape.tile >= 0) {
    const LaunchConfig d = default_for(shape);
    if (config.threads_per_row != d.threads_per_row || config.rows_per_block != d.rows_per_block ||
        normalized(config, shape).max_items != d.max_items) {
      refuse("pointwise kernels and reductions with a tile dim have only their default layout");
    }
    return;
  }
  const int tpr = config.threads_per_row;
  if (!(tpr >= 1 && tpr <= kMaxBlock && (tpr & (tpr - 1)) == 0)) {
    refuse("threads_per_row is a power of two from 1 to 1024");
  }
  if (config.rows_per_block < 1 || int64_t{tpr} * config.rows_per_block > kMaxBlock) {
    refuse("a block holds 1 to 1024 threads");
  }
  if (config.max_items < 0 || config.max_items > 2 * kMaxItems) refuse("max_items is 0..64");
}

// Where an expression's value is defined: the statements written so far,
// their indentation, and per expression the C name of its value there.
struct Scope {
  std::string code;
  std::string indent;
  std::vector<std::string> names;
  char prefix = 'v';  // names: v<id> per row, w<id> per point
};

// How values are read in the code being written.
struct Context {
  Scope* row = nullptr;    // values constant along the inner loop
  Scope* point = nullptr;  // values that vary (null: everything per row)
  const std::vector<bool>* varies = nullptr;
  // The C expression reading input `i` (stored type) per row or per point.
  std::function<std::string(int input, bool at_point)> load;
  // Persistent rows: per expression, "p<id>[k]" once computed by an earlier
  // phase, and whether this phase must keep what it computes.
  std::vector<std::string>* persisted = nullptr;
  const std::vector<bool>* keep = nullptr;
  std::string slot = "k";  // the point's index in the persistent arrays
};

class Writer {
 public:
  Writer(const Kernel& kernel, const LaunchConfig& config) : k_(kernel), config_(config) {}

  CudaSource write();
  std::string entry_name(int tile) const;

 private:
  // Kernel geometry.
  int rank() const { return static_cast<int>(k_.sizes.size()); }
  size_t operands() const { return k_.inputs.size() + k_.outputs.size(); }
  const std::vector<int64_t>& strides(size_t op) const {
    return op < k_.inputs.size() ? k_.inputs[op].strides : k_.outputs[op - k_.inputs.size()].strides;
  }
  DType dtype(size_t op) const {
    return op < k_.inputs.size() ? k_.inputs[op].dtype : k_.outputs[op - k_.inputs.size()].dtype;
  }
  int64_t offset(size_t op) const { return op < k_.inputs.size() ? k_.inputs[op].offset : 0; }
  std::string pointer(size_t op) const {
    return op < k_.inputs.size() ? "in" + std::to_string(op) : "out" + std::to_string(op - k_.inputs.size());
  }

  std::string value(int id, Context& c);
  std::string compute(int id, Context& c);
  std::string signature(const std::string& name, int block) const;
  // "const IDX i<d> = ...;" for `dims` (innermost last) from `index`.
  std::string decompose(const std::vector<int>& dims, const std::string& index, const std::string& indent,
                        const std::string& prefix) const;
  std::string offset_terms(size_t op, const std::vector<int>& dims, const std::string& prefix) const;
  bool output_is_full(size_t i) const;
  std::string store(size_t i, const std::string& value, const std::string& at) const;
  std::string point_load(int input, Scope& point, std::vector<bool>* declared) const;
  std::string write_rows(const std::string& name, int width);
  int row_vector_width() const;
  std::string write_vector(const std::string& name, int width);
  int tile_vector_width() const;
  std::string write_tile_vector(const std::string& name, int width);
  int vector_width() const;

  const Kernel& k_;
  const LaunchConfig config_;
  std::string idx_ = "int";
  std::vector<int> kept_, reduced_;
  std::vector<bool> varies_;
  std::vector<int> stage_;
  std::vector<std::string> reduce_names_;
  int64_t rows_ = 1, row_points_ = 1;
  int tpr_ = 1, rpb_ = 1;
  bool split_tile_ = false;  // tile rows shared by kSplitThreads threads (Note [CUDA kernels])
  // The block's row loop is uniform (each of its rows a lane or warp
  // group of the block, stepping together for __syncthreads) and a thread
  // whose row is past the last one recomputes the last row and stores
  // nothing (`kiln_valid`): split tile rows, and block rows several a block.
  bool guarded_ = false;
  int items_ = 0;  // persistent rows: points per thread; 0: looped
};

std::string Writer::value(int id, Context& c) {
  const Expr& e = k_.exprs[id];
  if (e.kind == ExprKind::Reduce) {
    if (reduce_names_[id].empty()) throw CudaError("a reduction read before its phase");
    return reduce_names_[id];
  }
  if (e.kind == ExprKind::Constant) return constant_text(e);
  const bool at_point = c.point != nullptr && (*c.varies)[id];
  Scope& scope = at_point ? *c.point : *c.row;
  if (!scope.names[id].empty()) return scope.names[id];
  if (at_point && c.persisted != nullptr && !(*c.persisted)[id].empty()) return (*c.persisted)[id];
  const std::string text = compute(id, c);
  const std::string name = scope.prefix + std::to_string(id);
  scope.code += scope.indent + "const " + value_type(e.dtype) + " " + name + " = " + text + ";\n";
  if (at_point && c.keep != nullptr && (*c.keep)[id]) {
    scope.code += scope.indent + "p" + std::to_string(id) + "[" + c.slot + "] = " + name + ";\n";
  }
  scope.names[id] = name;
  return name;
}

std::string Writer::compute(int id, Context& c) {
  const Expr& e = k_.exprs[id];
  auto operand = [&](int i) { return value(e.operands[i], c); };
  auto operand_dtype = [&](int i) { return k_.exprs[e.operands[i]].dtype; };
  switch (e.kind) {
    case ExprKind::Load: {
      const bool at_point = c.point != nullptr && (*c.varies)[id];
      const std::string raw = c.load(e.input, at_point);
      return e.dtype == DType::Bool ? "(" + raw + " != 0)" : raw;
    }
    case ExprKind::Constant: return constant_text(e);
    case ExprKind::Cast: return cast_text(operand(0), operand_dtype(0), e.dtype);
    case ExprKind::Unary: return unary_text(static_cast<UnaryOp>(e.op), operand(0), operand_dtype(0));
    case ExprKind::Binary: {
      const std::string a = operand(0);
      return binary_text(static_cast<BinaryOp>(e.op), a, operand(1), e.dtype);
    }
    case ExprKind::Compare: {
      const std::string a = operand(0);
      return compare_text(static_cast<CompareOp>(e.op), a, operand(1));
    }
    case ExprKind::Select: {
      const std::string cond = operand(0);
      const std::string a = operand(1);
      return "(" + cond + " ? " + a + " : " + operand(2) + ")";
    }
    case ExprKind::Index: {
      // The point's index along each dim: i<d> for kept dims (the row's),
      // j<d> for reduced ones (the point's), as the loops decompose them.
      std::string text = "(0LL";
      for (int d = 0; d < rank(); ++d) {
        if (e.strides[d] == 0 || k_.sizes[d] == 1) continue;
        text += std::string(" + (long long)") + (is_reduced(k_, d) ? "j" : "i") + std::to_string(d) + " * " +
                std::to_string(e.strides[d]) + "LL";
      }
      return text + ")";
    }
    case ExprKind::Reduce: break;
  }
  throw CudaError("a reduction computed as a value");
}

std::string Writer::signature(const std::string& name, int block) const {
  const std::string bounds = std::to_string(block) + (config_.min_blocks_per_sm > 0
                                                          ? ", " + std::to_string(config_.min_blocks_per_sm)
                                                          : "");
  std::string text = "extern \"C\" __global__ void __launch_bounds__(" + bounds + ") " + name + "(";
  for (size_t op = 0; op < operands(); ++op) {
    const bool input = op < k_.inputs.size();
    text += std::string(op ? ", " : "") + (input ? "const " : "") + storage_type(dtype(op)) + "* __restrict__ " +
            pointer(op);
  }
  return text + ") {\n";
}

std::string Writer::decompose(const std::vector<int>& dims, const std::string& index, const std::string& indent,
                              const std::string& prefix) const {
  if (dims.empty()) return "";
  if (dims.size() == 1) return indent + "const " + idx_ + " " + prefix + std::to_string(dims[0]) + " = " + index + ";\n";
  std::string rest = prefix + "_rest";
  std::string text = indent + idx_ + " " + rest + " = " + index + ";\n";
  for (size_t j = dims.size(); j-- > 1;) {
    const std::string size = std::to_string(k_.sizes[dims[j]]);
    text += indent + "const " + idx_ + " " + prefix + std::to_string(dims[j]) + " = " + rest + " % " + size + ";\n";
    text += indent + rest + " /= " + size + ";\n";
  }
  return text + indent + "const " + idx_ + " " + prefix + std::to_string(dims[0]) + " = " + rest + ";\n";
}

std::string Writer::offset_terms(size_t op, const std::vector<int>& dims, const std::string& prefix) const {
  std::string text;
  for (int d : dims) {
    const int64_t stride = strides(op)[d];
    if (stride == 0 || k_.sizes[d] == 1) continue;
    text += " + " + prefix + std::to_string(d) + (stride == 1 ? "" : " * " + std::to_string(stride));
  }
  return text;
}

// An output varying along the reduced dims is stored at every point.
bool Writer::output_is_full(size_t i) const {
  const KernelOutput& out = k_.outputs[i];
  bool full = varies_[out.value];
  for (int d : k_.reduced) full = full || (out.strides[d] != 0 && k_.sizes[d] > 1);
  return full;
}

std::string Writer::store(size_t i, const std::string& value, const std::string& at) const {
  const KernelOutput& out = k_.outputs[i];
  std::string v = cast_text(value, k_.exprs[out.value].dtype, out.dtype);
  if (out.dtype == DType::Bool) v = "(unsigned char)(" + v + ")";
  return "out" + std::to_string(i) + "[" + at + "] = " + v + ";\n";
}

// Input `input` read at the point of a loop over reduced points: its
// offset declared in `point` the first time (`declared`, per input).
std::string Writer::point_load(int input, Scope& point, std::vector<bool>* declared) const {
  const std::string op = std::to_string(input);
  if (!(*declared)[input]) {
    (*declared)[input] = true;
    point.code += point.indent + "const " + idx_ + " o" + op + " = b" + op +
                  offset_terms(static_cast<size_t>(input), reduced_, "j") + ";\n";
  }
  return "in" + op + "[o" + op + "]";
}

// The row kernel (Note [CUDA kernels]): pointwise kernels (rows of one
// point) and every reduction; with `width`, the row entry reading and
// writing `width` consecutive row points per 16-byte access.
std::string Writer::write_rows(const std::string& name, int width) {
  const int block = tpr_ * rpb_;
  const size_t count = k_.exprs.size();
  int phases = 0;
  for (int s : stage_) phases = std::max(phases, s);
  const bool block_rows = tpr_ > 32;
  const int warps = block / 32;
  const int row_warps = tpr_ / 32;  // block rows: the warps of one row
  std::string text = signature(name, block);
  // Shared partials of each reduction (block rows: one per warp; split
  // tile rows: one per thread).
  if (block_rows || split_tile_) {
    for (size_t id = 0; id < count; ++id) {
      if (k_.exprs[id].kind != ExprKind::Reduce) continue;
      text += std::string("  __shared__ ") + value_type(k_.exprs[id].dtype) + " s" + std::to_string(id) + "[" +
              std::to_string(split_tile_ ? block : warps) + "];\n";
    }
  }
  const std::string t = split_tile_   ? "(int)(threadIdx.x >> 5)"
                        : tpr_ == 1    ? "0"
                        : tpr_ == block ? "(int)threadIdx.x"
                                       : "(int)(threadIdx.x & " + std::to_string(tpr_ - 1) + ")";
  text += "  const int kiln_t = " + t + ";\n";
  text += "  (void)kiln_t;\n";
  if (block_rows) {
    // The first of this row's warps' partials in the shared arrays.
    text += "  const int kiln_w0 = " +
            (tpr_ == block ? std::string("0") : "(int)(threadIdx.x / " + std::to_string(tpr_) + ") * " +
                                                     std::to_string(row_warps)) +
            ";\n";
  }
  Scope row;
  row.indent = "    ";
  if (split_tile_) {
    // Lane l of every warp takes row row0 + l, so loads coalesce along the
    // tile dim; the block's loop is uniform (its __syncthreads), and lanes
    // past the last row recompute the last row and store nothing.
    const std::string rows = std::to_string(rows_);
    text += "  for (" + idx_ + " row0 = (" + idx_ + ")blockIdx.x * 32; row0 < " + rows + "; row0 += (" + idx_ +
            ")gridDim.x * 32) {\n";
    row.code += row.indent + "const bool kiln_valid = row0 + (threadIdx.x & 31) < " + rows + ";\n";
    row.code += row.indent + "const " + idx_ + " row = kiln_valid ? row0 + (threadIdx.x & 31) : " +
                std::to_string(rows_ - 1) + ";\n";
  } else if (guarded_) {
    // Block rows, several a block: rows row0 .. row0 + rpb - 1, one per
    // group of tpr threads.
    const std::string rows = std::to_string(rows_), rpb = std::to_string(rpb_);
    const std::string mine = "(threadIdx.x / " + std::to_string(tpr_) + ")";
    text += "  for (" + idx_ + " row0 = (" + idx_ + ")blockIdx.x * " + rpb + "; row0 < " + rows + "; row0 += (" +
            idx_ + ")gridDim.x * " + rpb + ") {\n";
    row.code += row.indent + "const bool kiln_valid = row0 + " + mine + " < " + rows + ";\n";
    row.code += row.indent + "const " + idx_ + " row = kiln_valid ? row0 + " + mine + " : " +
                std::to_string(rows_ - 1) + ";\n";
  } else {
    const std::string first_row = "(" + idx_ + ")blockIdx.x * " + std::to_string(rpb_) +
                                  (rpb_ == 1 ? "" : tpr_ == 1 ? " + threadIdx.x" : " + threadIdx.x / " + std::to_string(tpr_));
    text += "  for (" + idx_ + " row = " + first_row + "; row < " + std::to_string(rows_) + "; row += (" + idx_ +
            ")gridDim.x * " + std::to_string(rpb_) + ") {\n";
  }
  row.names.assign(count, "");
  row.prefix = 'v';
  row.code += decompose(kept_, "row", row.indent, "i");
  for (size_t op = 0; op < operands(); ++op) {
    row.code += row.indent + "const " + idx_ + " b" + std::to_string(op) + " = " + std::to_string(offset(op)) +
                offset_terms(op, kept_, "i") + ";\n";
  }
  // Which phases need each varying value (phases + 1: the last pass), so a
  // persistent row keeps what a later phase reads again.
  std::vector<std::vector<bool>> needed(count, std::vector<bool>(phases + 2, false));
  std::function<void(int, int)> need = [&](int id, int phase) {
    if (needed[id][phase] || !varies_[id]) return;
    needed[id][phase] = true;
    if (k_.exprs[id].kind == ExprKind::Reduce) return;
    for (int operand : k_.exprs[id].operands) need(operand, phase);
  };
  for (size_t id = 0; id < count; ++id) {
    if (k_.exprs[id].kind == ExprKind::Reduce) need(k_.exprs[id].operands[0], stage_[id]);
  }
  // The pass storing each full output: 1 when it reads no reduction,
  // else the last (0: stored once per row).
  std::vector<int> store_pass(k_.outputs.size(), 0);
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    if (!output_is_full(i)) continue;
    store_pass[i] = phases >= 1 && stage_[k_.outputs[i].value] == 0 ? 1 : phases + 1;
    need(k_.outputs[i].value, store_pass[i]);
  }
  std::vector<std::string> persisted(count, "");
  // Stores the full outputs of pass `pass` at the point of context c.
  auto store_full = [&](int pass, Context& c, Scope& point) {
    for (size_t i = 0; i < k_.outputs.size(); ++i) {
      if (store_pass[i] != pass) continue;
      const std::string v = value(k_.outputs[i].value, c);
      const size_t op = k_.inputs.size() + i;
      if (width > 0) {
        const KernelOutput& out = k_.outputs[i];
        std::string cast = cast_text(v, k_.exprs[out.value].dtype, out.dtype);
        if (out.dtype == DType::Bool) cast = "(unsigned char)(" + cast + ")";
        point.code += point.indent + "y" + std::to_string(i) + ".v[j] = " + cast + ";\n";
      } else {
        point.code += point.indent + (guarded_ ? "if (kiln_valid) " : "") +
                      store(i, v, "b" + std::to_string(op) + offset_terms(op, reduced_, "j"));
      }
    }
  };

  // One loop over the row's points of this thread; body(point context)
  // appends statements to the point scope. Returns the loop's text.
  // Persistent rows: points (vectors of `width` points) per thread.
  const int64_t lanes = width > 0 ? width : 1;
  const int64_t items = items_ > 0 ? (row_points_ + tpr_ * lanes - 1) / (tpr_ * lanes) : 0;
  const std::string w = std::to_string(width);
  auto loop = [&](int phase, const std::function<void(Context&, Scope&)>& body) {
    Scope point;
    point.prefix = 'w';
    point.names.assign(count, "");
    const bool persistent = items > 0;
    point.indent = row.indent + (persistent ? "    " : "  ") + (width > 0 ? "  " : "");
    std::vector<bool> keep_now(count, false);
    if (persistent) {
      for (size_t id = 0; id < count; ++id) {
        bool later = false;
        for (int p = phase + 1; p <= phases + 1; ++p) later = later || needed[id][p];
        keep_now[id] = later && persisted[id].empty() && k_.exprs[id].kind != ExprKind::Constant;
      }
    }
    std::vector<bool> point_offsets(operands(), false);
    Context c;
    c.row = &row;
    c.point = &point;
    c.varies = &varies_;
    c.persisted = persistent ? &persisted : nullptr;
    c.keep = persistent ? &keep_now : nullptr;
    c.slot = width > 0 ? "k * " + w + " + j" : "k";
    c.load = [&](int input, bool at_point) {
      const std::string op = std::to_string(input);
      if (!at_point) return "in" + op + "[b" + op + "]";
      if (width > 0) {
        // Read once per vector, before the loop over its points.
        point_offsets[input] = true;
        return "x" + op + ".v[j]";
      }
      return point_load(input, point, &point_offsets);
    };
    body(c, point);
    std::string code;
    const std::string inner = point.indent;
    const std::string r = width > 0 ? "r0" : "r";  // the first point of this iteration
    // Vector rows: the loads before the loop over a vector's points, the
    // full outputs' stores after it (Note [CUDA kernels]).
    std::string vector_head, vector_tail;
    if (width > 0) {
      const std::string at = row.indent + (persistent ? "    " : "  ");
      for (size_t op = 0; op < k_.inputs.size(); ++op) {
        if (!point_offsets[op]) continue;
        const std::string type = std::string("kiln_vec<") + storage_type(dtype(op)) + ", " + w + ">";
        const std::string o = std::to_string(op);
        vector_head += at + "const " + type + " x" + o + " = *reinterpret_cast<const " + type + "*>(in" + o + " + b" +
                       o + " + r0);\n";
      }
      for (size_t i = 0; i < k_.outputs.size(); ++i) {
        if (store_pass[i] != phase) continue;
        const std::string type = std::string("kiln_vec<") + storage_type(k_.outputs[i].dtype) + ", " + w + ">";
        const std::string o = std::to_string(i), op = std::to_string(k_.inputs.size() + i);
        vector_head += at + type + " y" + o + ";\n";
        vector_tail += at + (guarded_ ? "if (kiln_valid) " : "") + "*reinterpret_cast<" + type + "*>(out" + o +
                       " + b" + op + " + r0) = y" + o + ";\n";
      }
      vector_head += at + "#pragma unroll\n" + at + "for (int j = 0; j < " + w + "; ++j) {\n" + at + "  const " + idx_ +
                     " r = r0 + j;\n";
      vector_tail = at + "}\n" + vector_tail;
    }
    const std::string decomposition = decompose(reduced_, "r", inner, "j");
    if (persistent) {
      // Arrays for values later phases read again, declared before the loop.
      for (size_t id = 0; id < count; ++id) {
        if (!keep_now[id] || point.names[id].empty()) continue;
        code += row.indent + value_type(k_.exprs[id].dtype) + " p" + std::to_string(id) + "[" +
                std::to_string(items * lanes) + "];\n";
        persisted[id] = "p" + std::to_string(id) + "[" + c.slot + "]";
      }
      code += row.indent + "#pragma unroll\n";
      code += row.indent + "for (int k = 0; k < " + std::to_string(items) + "; ++k) {\n";
      code += row.indent + "  const " + idx_ + " " + r + " = (kiln_t + (" + idx_ + ")k * " + std::to_string(tpr_) +
              ")" + (width > 0 ? " * " + w : "") + ";\n";
      const bool exact = items * tpr_ * lanes == row_points_;
      code += row.indent + "  if (" + (exact ? std::string("true") : r + " < " + std::to_string(row_points_)) + ") {\n";
      code += vector_head + decomposition + point.code + vector_tail;
      code += row.indent + "  }\n";
      code += row.indent + "}\n";
    } else {
      // A split-tile thread's loads are independent (only the combine is a
      // chain): unrolled, several are in flight at once.
      if (split_tile_) code += row.indent + "#pragma unroll " + std::to_string(kSplitUnroll) + "\n";
      code += row.indent + "for (" + idx_ + " " + r + " = (" + idx_ + ")kiln_t" + (width > 0 ? " * " + w : "") + "; " +
              r + " < " + std::to_string(row_points_) + "; " + r + " += " + std::to_string(tpr_ * lanes) + ") {\n";
      code += vector_head + decomposition + point.code + vector_tail;
      code += row.indent + "}\n";
    }
    return code;
  };

  for (int phase = 1; phase <= phases; ++phase) {
    std::vector<int> reductions;
    for (size_t id = 0; id < count; ++id) {
      if (k_.exprs[id].kind == ExprKind::Reduce && stage_[id] == phase) reductions.push_back(static_cast<int>(id));
    }
    std::string accs;
    for (int id : reductions) {
      const Expr& e = k_.exprs[id];
      accs += row.indent + value_type(e.dtype) + " a" + std::to_string(id) + " = " +
              reduce_init(static_cast<ReduceOp>(e.op), e.dtype) + ";\n";
    }
    const std::string body = loop(phase, [&](Context& c, Scope& point) {
      for (int id : reductions) {
        const Expr& e = k_.exprs[id];
        const std::string x = value(e.operands[0], c);
        const std::string acc = "a" + std::to_string(id);
        point.code += point.indent + acc + " = " + combine_text(static_cast<ReduceOp>(e.op), e.dtype, acc, x) + ";\n";
      }
      store_full(phase, c, point);
    });
    row.code += accs + body;
    // Combine the row's threads: every thread ends with the row's result.
    if (split_tile_) {
      for (int id : reductions) {
        row.code += row.indent + "s" + std::to_string(id) + "[threadIdx.x] = a" + std::to_string(id) + ";\n";
      }
      row.code += row.indent + "__syncthreads();\n";
      for (int id : reductions) {
        const Expr& e = k_.exprs[id];
        const std::string acc = "a" + std::to_string(id), sm = "s" + std::to_string(id);
        row.code += row.indent + acc + " = " + sm + "[threadIdx.x & 31];\n";
        row.code += row.indent + "for (int w = 1; w < " + std::to_string(tpr_) + "; ++w) " + acc + " = " +
                    combine_text(static_cast<ReduceOp>(e.op), e.dtype, acc, sm + "[(threadIdx.x & 31) + 32 * w]") +
                    ";\n";
      }
      // A second barrier keeps the next row's writes of s<id> from
      // overtaking this row's reads; with two phases or more, the other
      // phases' barriers already stand between them (each reduction has
      // its own array).
      if (phases == 1) row.code += row.indent + "__syncthreads();\n";
    } else if (tpr_ > 1) {
      row.code += row.indent + "#pragma unroll\n";
      // Rows narrower than a warp: xor masks below tpr stay inside the row's lanes.
      row.code += row.indent + "for (int m = " + std::to_string(std::min(tpr_, 32) / 2) + "; m > 0; m >>= 1) {\n";
      for (int id : reductions) {
        const Expr& e = k_.exprs[id];
        const std::string acc = "a" + std::to_string(id);
        // Every lane shuffles, unconditionally: combine_text may name its
        // operand twice or short-circuit.
        const std::string other = "o" + std::to_string(id);
        row.code += row.indent + "  const " + value_type(e.dtype) + " " + other + " = kiln_shfl_xor(" + acc + ", m);\n";
        row.code += row.indent + "  " + acc + " = " + combine_text(static_cast<ReduceOp>(e.op), e.dtype, acc, other) +
                    ";\n";
      }
      row.code += row.indent + "}\n";
    }
    if (block_rows) {
      row.code += row.indent + "if ((threadIdx.x & 31) == 0) {\n";
      for (int id : reductions) {
        row.code += row.indent + "  s" + std::to_string(id) + "[threadIdx.x >> 5] = a" + std::to_string(id) + ";\n";
      }
      row.code += row.indent + "}\n" + row.indent + "__syncthreads();\n";
      for (int id : reductions) {
        const Expr& e = k_.exprs[id];
        const std::string acc = "a" + std::to_string(id), s = "s" + std::to_string(id);
        row.code += row.indent + acc + " = " + s + "[kiln_w0];\n";
        row.code += row.indent + "for (int w = 1; w < " + std::to_string(row_warps) + "; ++w) " + acc + " = " +
                    combine_text(static_cast<ReduceOp>(e.op), e.dtype, acc, s + "[kiln_w0 + w]") + ";\n";
      }
      // As for split tile rows: one barrier a phase is enough when there
      // are two phases or more.
      if (phases == 1) row.code += row.indent + "__syncthreads();\n";
    }
    for (int id : reductions) {
      const Expr& e = k_.exprs[id];
      row.code += row.indent + "const " + value_type(e.dtype) + " r" + std::to_string(id) + " = a" +
                  std::to_string(id) + ";\n";
      reduce_names_[id] = "r" + std::to_string(id);
    }
  }

  // Outputs constant along the reduced dims: once per row, by its thread 0.
  Context once;
  once.row = &row;
  once.varies = &varies_;
  once.load = [](int input, bool) { return "in" + std::to_string(input) + "[b" + std::to_string(input) + "]"; };
  std::string stores;
  bool any_last = false;
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    if (output_is_full(i)) {
      any_last = any_last || store_pass[i] == phases + 1;
      continue;
    }
    const std::string v = value(k_.outputs[i].value, once);
    stores += row.indent + (tpr_ > 1 ? "  " : "") + store(i, v, "b" + std::to_string(k_.inputs.size() + i));
  }
  if (!stores.empty()) {
    const std::string only = guarded_ ? "kiln_t == 0 && kiln_valid" : "kiln_t == 0";
    row.code += tpr_ > 1 ? row.indent + "if (" + only + ") {\n" + stores + row.indent + "}\n" : stores;
  }
  if (any_last) {
    row.code += loop(phases + 1, [&](Context& c, Scope& point) { store_full(phases + 1, c, point); });
  }
  text += row.code + "  }\n}\n";
  return text;
}

// Elements per vector access (config_.vector_bytes) of a pointwise
// kernel, or 0 when its operands do not allow vector accesses (Note [CUDA
// kernels]).
int Writer::vector_width() const {
  if (!k_.reduced.empty() || k_.sizes.empty()) return 0;
  // An index (argmax's) would need each lane's point, not the vector's first.
  for (const Expr& e : k_.exprs) {
    if (e.kind == ExprKind::Index) return 0;
  }
  const int inner = rank() - 1;
  int64_t widest = 0;
  for (size_t op = 0; op < operands(); ++op) {
    const int64_t stride = strides(op)[inner];
    const bool input = op < k_.inputs.size();
    if (stride == 1) {
      widest = std::max(widest, item_size(dtype(op)));
    } else if (!(input && stride == 0)) {
      return 0;
    }
  }
  if (widest == 0) return 0;
  const int width = static_cast<int>(config_.vector_bytes / widest);
  if (width < 2 || k_.sizes[inner] % width != 0) return 0;
  for (size_t op = 0; op < operands(); ++op) {
    if (strides(op)[inner] != 1) continue;
    if (offset(op) % width != 0) return 0;
    for (int d = 0; d < inner; ++d) {
      if (k_.sizes[d] > 1 && strides(op)[d] % width != 0) return 0;
    }
  }
  return width;
}

// Points per vector access (config_.vector_bytes) along the rows of a warp- or block-row
// reduction, or 0: the one reduced dim is innermost, every operand that
// varies along it (inputs read there, outputs stored in the last pass) has
// stride 1 there and row starts that are multiples of the width.
int Writer::row_vector_width() const {
  if (reduced_.size() != 1 || reduced_[0] != rank() - 1 || tpr_ < 2) return 0;
  const int inner = rank() - 1;
  std::vector<size_t> along;
  for (size_t op = 0; op < k_.inputs.size(); ++op) {
    if (k_.inputs[op].strides[inner] != 0 && k_.sizes[inner] > 1) along.push_back(op);
  }
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    if (output_is_full(i)) along.push_back(k_.inputs.size() + i);
  }
  int64_t widest = 0;
  for (size_t op : along) {
    if (strides(op)[inner] != 1) return 0;
    widest = std::max(widest, item_size(dtype(op)));
  }
  if (widest == 0) return 0;
  const int width = static_cast<int>(config_.vector_bytes / widest);
  if (width < 2 || row_points_ % width != 0) return 0;
  for (size_t op : along) {
    if (offset(op) % width != 0) return 0;
    for (int d : kept_) {
      if (k_.sizes[d] > 1 && strides(op)[d] % width != 0) return 0;
    }
  }
  return width;
}

// The pointwise kernel's vector entry: each thread reads and writes
// `width` consecutive points of the innermost dim.
std::string Writer::write_vector(const std::string& name, int width) {
  const size_t count = k_.exprs.size();
  const int inner = rank() - 1;
  int64_t numel = 1;
  for (int64_t size : k_.sizes) numel *= size;
  const std::string w = std::to_string(width);
  // Varying here: along the vector (an input of inner stride 1).
  std::vector<bool> varies(count, false);
  for (size_t id = 0; id < count; ++id) {
    const Expr& e = k_.exprs[id];
    if (e.kind == ExprKind::Load) {
      varies[id] = k_.inputs[e.input].strides[inner] != 0;
      continue;
    }
    for (int operand : e.operands) varies[id] = varies[id] || varies[operand];
  }
  std::string text = signature(name, kPointwiseBlock);
  text += "  for (" + idx_ + " q = (" + idx_ + ")blockIdx.x * " + std::to_string(kPointwiseBlock) +
          " + threadIdx.x; q < " + std::to_string(numel / width) + "; q += (" + idx_ + ")gridDim.x * " +
          std::to_string(kPointwiseBlock) + ") {\n";
  Scope row;
  row.indent = "    ";
  row.names.assign(count, "");
  std::vector<int> dims;
  for (int d = 0; d < rank(); ++d) dims.push_back(d);
  row.code += decompose(dims, "q * " + w, row.indent, "i");
  for (size_t op = 0; op < operands(); ++op) {
    row.code += row.indent + "const " + idx_ + " b" + std::to_string(op) + " = " + std::to_string(offset(op)) +
                offset_terms(op, dims, "i") + ";\n";
  }
  std::string vectors;
  for (size_t op = 0; op < k_.inputs.size(); ++op) {
    if (k_.inputs[op].strides[inner] != 1) continue;
    const std::string type = std::string("kiln_vec<") + storage_type(dtype(op)) + ", " + w + ">";
    const std::string o = std::to_string(op);
    vectors += row.indent + "const " + type + " x" + o + " = *reinterpret_cast<const " + type + "*>(in" + o + " + b" +
               o + ");\n";
  }
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    vectors += row.indent + "kiln_vec<" + storage_type(k_.outputs[i].dtype) + ", " + w + "> y" + std::to_string(i) +
               ";\n";
  }
  Scope point;
  point.prefix = 'w';
  point.indent = row.indent + "  ";
  point.names.assign(count, "");
  Context c;
  c.row = &row;
  c.point = &point;
  c.varies = &varies;
  c.load = [](int input, bool at_point) {
    const std::string o = std::to_string(input);
    return at_point ? "x" + o + ".v[j]" : "in" + o + "[b" + o + "]";
  };
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    const KernelOutput& out = k_.outputs[i];
    const std::string v = value(out.value, c);
    std::string cast = cast_text(v, k_.exprs[out.value].dtype, out.dtype);
    if (out.dtype == DType::Bool) cast = "(unsigned char)(" + cast + ")";
    point.code += point.indent + "y" + std::to_string(i) + ".v[j] = " + cast + ";\n";
  }
  row.code += vectors + row.indent + "#pragma unroll\n" + row.indent + "for (int j = 0; j < " + w + "; ++j) {\n" +
              point.code + row.indent + "}\n";
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    const std::string type = std::string("kiln_vec<") + storage_type(k_.outputs[i].dtype) + ", " + w + ">";
    const std::string op = std::to_string(k_.inputs.size() + i);
    row.code += row.indent + "*reinterpret_cast<" + type + "*>(out" + std::to_string(i) + " + b" + op + ") = y" +
                std::to_string(i) + ";\n";
  }
  return text + row.code + "  }\n}\n";
}

// Note [Vector tiles]
// A split tile row (Note [CUDA kernels]) gives each lane one tile point,
// so a warp's access is 32 consecutive elements: 64 bytes of bfloat16, read
// by 2-byte loads. The LayerNorm and GELU backward kernels of a GPT layer
// (activation gradients beside their weight and bias gradients' column
// sums) ran at 1.3-1.8 TB/s that way on an H100. The vector entry gives
// each lane `width` consecutive tile points instead, read and written as one
// 16-byte (or 8-byte) access, with `width` accumulators per reduction.
// A warp is kTileLanes lanes wide along the tile (a 128-byte segment of a
// row: 8 lanes of 4 floats or of 8 bfloat16s) and 32 / kTileLanes reduced
// points deep, so a block still spans as few tile points as the scalar
// entry's and the grid keeps its blocks: with 32 lanes of 4 floats, a
// [64, 256, 384] LayerNorm backward had 192 blocks for 132 SMs, and the
// SMs holding two set the time. The threads of a tile point (a lane of
// every group of every warp) combine by shuffles within the warp, then
// through shared memory laid out [width][warp][lane]. Inside a reduced
// point, a loop over the lane's `width` tile points computes every value
// that varies along the tile or the reduced dims; values constant along
// both are computed once per row group. It needs the tile dim innermost,
// every operand that varies along it of stride 1 there, other strides,
// offsets and the tile's size multiples of the width, and the partials
// within kTileVectorShared bytes.
constexpr int kTileLanes = 8;
constexpr int64_t kTileVectorShared = 24 * 1024;

int Writer::tile_vector_width() const {
  const int tile = tile_dim(k_);
  if (!split_tile_ || tile != rank() - 1 || k_.sizes[tile] < 2) return 0;
  // i<tile> is the lane's first tile point, not each point's.
  for (const Expr& e : k_.exprs) {
    if (e.kind == ExprKind::Index && e.strides[tile] != 0) return 0;
  }
  std::vector<size_t> along;
  for (size_t op = 0; op < operands(); ++op) {
    const bool input = op < k_.inputs.size();
    const int64_t stride = strides(op)[tile];
    // Broadcast inputs are read once per reduced point; outputs constant
    // along the reduced dims are stored element by element.
    if ((input && stride == 0) || (!input && !output_is_full(op - k_.inputs.size()))) continue;
    if (stride != 1) return 0;
    along.push_back(op);
  }
  int64_t widest = 0;
  for (size_t op : along) widest = std::max(widest, item_size(dtype(op)));
  if (widest == 0) return 0;
  const int width = static_cast<int>(config_.vector_bytes / widest);
  if (width < 2 || k_.sizes[tile] % width != 0) return 0;
  for (size_t op : along) {
    if (offset(op) % width != 0) return 0;
    for (int d = 0; d < tile; ++d) {
      if (k_.sizes[d] > 1 && strides(op)[d] % width != 0) return 0;
    }
  }
  int64_t shared = 0;
  for (const Expr& e : k_.exprs) {
    if (e.kind == ExprKind::Reduce) shared += item_size(e.dtype) * width * tpr_ * kTileLanes;
  }
  return shared <= kTileVectorShared ? width : 0;
}

// The split tile reduction's vector entry (Note [Vector tiles]).
std::string Writer::write_tile_vector(const std::string& name, int width) {
  const int block = tpr_ * rpb_;
  const size_t count = k_.exprs.size();
  const int tile = rank() - 1;
  int phases = 0;
  for (int s : stage_) phases = std::max(phases, s);
  const std::string w = std::to_string(width);
  auto along_tile = [&](size_t op) { return strides(op)[tile] != 0; };
  // Per lane point: what varies along the tile or the reduced dims. A
  // reduction's result is an array over the lane's points, read as such.
  std::vector<bool> varies(count, false);
  for (size_t id = 0; id < count; ++id) {
    const Expr& e = k_.exprs[id];
    if (e.kind == ExprKind::Reduce) {
      varies[id] = true;
    } else if (e.kind == ExprKind::Load) {
      varies[id] = varies_[id] || along_tile(static_cast<size_t>(e.input));
    } else if (e.kind == ExprKind::Index) {
      varies[id] = varies_[id];  // tile_vector_width refuses an index along the tile
    } else {
      for (int operand : e.operands) varies[id] = varies[id] || varies[operand];
    }
  }
  std::string text = signature(name, block);
  for (size_t id = 0; id < count; ++id) {
    if (k_.exprs[id].kind != ExprKind::Reduce) continue;
    text += std::string("  __shared__ ") + value_type(k_.exprs[id].dtype) + " s" + std::to_string(id) + "[" +
            std::to_string(tpr_ * kTileLanes * width) + "];\n";
  }
  // Thread t of a tile point's threads: group (lane / kTileLanes) of warp
  // (threadIdx.x / 32); it takes reduced points t, t + threads, ...
  const int groups = 32 / kTileLanes, threads = tpr_ * groups;
  const std::string lanes = std::to_string(kTileLanes), lane = "(threadIdx.x & " + std::to_string(kTileLanes - 1) + ")";
  text += "  const int kiln_t = (int)((threadIdx.x >> 5) * " + std::to_string(groups) + " + ((threadIdx.x & 31) >> " +
          std::to_string(__builtin_ctz(kTileLanes)) + "));\n";
  const std::string rows = std::to_string(rows_), span = std::to_string(kTileLanes * width);
  text += "  for (" + idx_ + " row0 = (" + idx_ + ")blockIdx.x * " + span + "; row0 < " + rows + "; row0 += (" + idx_ +
          ")gridDim.x * " + span + ") {\n";
  Scope row;
  row.indent = "    ";
  row.names.assign(count, "");
  // Lanes past the last row group recompute the last one and store nothing.
  row.code += row.indent + "const bool kiln_valid = row0 + " + lane + " * " + w + " < " + rows + ";\n";
  row.code += row.indent + "const " + idx_ + " row = kiln_valid ? row0 + " + lane + " * " + w + " : " +
              std::to_string(rows_ - width) + ";\n";
  row.code += decompose(kept_, "row", row.indent, "i");
  for (size_t op = 0; op < operands(); ++op) {
    row.code += row.indent + "const " + idx_ + " b" + std::to_string(op) + " = " + std::to_string(offset(op)) +
                offset_terms(op, kept_, "i") + ";\n";
  }
  std::vector<int> store_pass(k_.outputs.size(), 0);
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    if (output_is_full(i)) store_pass[i] = phases >= 1 && stage_[k_.outputs[i].value] == 0 ? 1 : phases + 1;
  }
  auto vec_type = [&](DType d) { return std::string("kiln_vec<") + storage_type(d) + ", " + w + ">"; };
  // Reduced points loaded ahead: a lane's access is already `width` points,
  // and the H100 step timed 2 (4-wide) and 1 (8-wide) ahead of 4 and 2.
  const int unroll = std::max(1, kSplitUnroll / width);
  // One loop over this thread's reduced points, each a loop over the
  // lane's tile points; body appends to the inner scope.
  auto loop = [&](int phase, const std::function<void(Context&, Scope&)>& body) {
    const std::string at = row.indent + "  ";
    Scope point;
    point.prefix = 'w';
    point.names.assign(count, "");
    point.indent = at + "  ";
    std::vector<bool> vector_input(k_.inputs.size(), false), scalar_offset(k_.inputs.size(), false);
    Context c;
    c.row = &row;
    c.point = &point;
    c.varies = &varies;
    c.load = [&](int input, bool at_point) {
      const std::string o = std::to_string(input);
      if (!at_point) return "in" + o + "[b" + o + "]";
      if (along_tile(static_cast<size_t>(input))) {
        vector_input[input] = true;
        return "x" + o + ".v[u]";
      }
      return point_load(input, point, &scalar_offset);
    };
    body(c, point);
    std::string head, tail;
    for (size_t op = 0; op < k_.inputs.size(); ++op) {
      if (!vector_input[op]) continue;
      const std::string o = std::to_string(op), type = vec_type(dtype(op));
      head += at + "const " + type + " x" + o + " = *reinterpret_cast<const " + type + "*>(in" + o + " + b" + o +
              offset_terms(op, reduced_, "j") + ");\n";
    }
    for (size_t i = 0; i < k_.outputs.size(); ++i) {
      if (store_pass[i] != phase) continue;
      const size_t op = k_.inputs.size() + i;
      const std::string o = std::to_string(i), type = vec_type(k_.outputs[i].dtype);
      head += at + type + " y" + o + ";\n";
      tail += at + "if (kiln_valid) *reinterpret_cast<" + type + "*>(out" + o + " + b" + std::to_string(op) +
              offset_terms(op, reduced_, "j") + ") = y" + o + ";\n";
    }
    std::string code = row.indent + "#pragma unroll " + std::to_string(unroll) + "\n";
    code += row.indent + "for (" + idx_ + " r = (" + idx_ + ")kiln_t; r < " + std::to_string(row_points_) +
            "; r += " + std::to_string(threads) + ") {\n";
    code += decompose(reduced_, "r", at, "j") + head;
    code += at + "#pragma unroll\n" + at + "for (int u = 0; u < " + w + "; ++u) {\n" + point.code + at + "}\n";
    return code + tail + row.indent + "}\n";
  };
  auto store_full = [&](int pass, Context& c, Scope& point) {
    for (size_t i = 0; i < k_.outputs.size(); ++i) {
      if (store_pass[i] != pass) continue;
      const KernelOutput& out = k_.outputs[i];
      std::string cast = cast_text(value(out.value, c), k_.exprs[out.value].dtype, out.dtype);
      if (out.dtype == DType::Bool) cast = "(unsigned char)(" + cast + ")";
      point.code += point.indent + "y" + std::to_string(i) + ".v[u] = " + cast + ";\n";
    }
  };
  auto each_point = [&](const std::string& statement) {
    return row.indent + "#pragma unroll\n" + row.indent + "for (int u = 0; u < " + w + "; ++u) " + statement + "\n";
  };
  for (int phase = 1; phase <= phases; ++phase) {
    std::vector<int> reductions;
    for (size_t id = 0; id < count; ++id) {
      if (k_.exprs[id].kind == ExprKind::Reduce && stage_[id] == phase) reductions.push_back(static_cast<int>(id));
    }
    for (int id : reductions) {
      const Expr& e = k_.exprs[id];
      const std::string acc = "a" + std::to_string(id);
      row.code += row.indent + value_type(e.dtype) + " " + acc + "[" + w + "];\n";
      row.code += each_point(acc + "[u] = " + reduce_init(static_cast<ReduceOp>(e.op), e.dtype) + ";");
    }
    row.code += loop(phase, [&](Context& c, Scope& point) {
      for (int id : reductions) {
        const Expr& e = k_.exprs[id];
        const std::string x = value(e.operands[0], c);
        const std::string acc = "a" + std::to_string(id) + "[u]";
        point.code += point.indent + acc + " = " + combine_text(static_cast<ReduceOp>(e.op), e.dtype, acc, x) + ";\n";
      }
      store_full(phase, c, point);
    });
    // Within the warp: its groups' partials of each tile point (xor masks
    // kTileLanes .. 16 keep the lane), then across warps in shared memory.
    for (int id : reductions) {
      const Expr& e = k_.exprs[id];
      const std::string acc = "a" + std::to_string(id) + "[u]";
      // Every lane shuffles, unconditionally: combine_text may name its
      // operand twice or short-circuit.
      for (int m = kTileLanes; m < 32; m *= 2) {
        row.code += each_point("{\n" + row.indent + "  const " + value_type(e.dtype) + " o = kiln_shfl_xor(" + acc +
                               ", " + std::to_string(m) + ");\n" + row.indent + "  " + acc + " = " +
                               combine_text(static_cast<ReduceOp>(e.op), e.dtype, acc, "o") + ";\n" + row.indent +
                               "}");
      }
    }
    const std::string slot = "[u * " + std::to_string(tpr_ * kTileLanes) + " + ";
    row.code += row.indent + "if ((threadIdx.x & 31) < " + lanes + ") {\n";
    for (int id : reductions) {
      const std::string i = std::to_string(id);
      row.code += row.indent + "  #pragma unroll\n" + row.indent + "  for (int u = 0; u < " + w + "; ++u) s" + i + slot +
                  "(threadIdx.x >> 5) * " + lanes + " + " + lane + "] = a" + i + "[u];\n";
    }
    row.code += row.indent + "}\n" + row.indent + "__syncthreads();\n";
    for (int id : reductions) {
      const Expr& e = k_.exprs[id];
      const std::string i = std::to_string(id), acc = "a" + i + "[u]", sm = "s" + i + slot + lane;
      row.code += each_point("{\n" + row.indent + "  " + acc + " = " + sm + "];\n" + row.indent +
                             "  for (int w = 1; w < " + std::to_string(tpr_) + "; ++w) " + acc + " = " +
                             combine_text(static_cast<ReduceOp>(e.op), e.dtype, acc, sm + " + " + lanes + " * w]") +
                             ";\n" + row.indent + "}");
      reduce_names_[id] = acc;
    }
    // As in write_rows: the next row group's partials must not overtake
    // these reads; other phases' barriers stand between them otherwise.
    if (phases == 1) row.code += row.indent + "__syncthreads();\n";
  }
  // Outputs constant along the reduced dims: the lane's points, by warp 0.
  Scope once;
  once.prefix = 'z';
  once.names.assign(count, "");
  once.indent = row.indent + "    ";
  Context c;
  c.row = &row;
  c.point = &once;
  c.varies = &varies;
  c.load = [&](int input, bool at_point) {
    const std::string o = std::to_string(input);
    return "in" + o + "[b" + o + (at_point ? " + u" : "") + "]";
  };
  bool any_last = false;
  for (size_t i = 0; i < k_.outputs.size(); ++i) {
    if (output_is_full(i)) {
      any_last = any_last || store_pass[i] == phases + 1;
      continue;
    }
    const size_t op = k_.inputs.size() + i;
    const int64_t stride = strides(op)[tile];
    const std::string v = value(k_.outputs[i].value, c);
    once.code += once.indent + store(i, v, "b" + std::to_string(op) + " + u" +
                                               (stride == 1 ? "" : " * " + std::to_string(stride)));
  }
  if (!once.code.empty()) {
    row.code += row.indent + "if (kiln_t == 0 && kiln_valid) {\n" + row.indent + "  #pragma unroll\n" + row.indent +
                "  for (int u = 0; u < " + w + "; ++u) {\n" + once.code + row.indent + "  }\n" + row.indent + "}\n";
  }
  if (any_last) {
    row.code += loop(phases + 1, [&](Context& c, Scope& point) { store_full(phases + 1, c, point); });
  }
  return text + row.code + "  }\n}\n";
}

// "kiln_row_64x4096": the kernel's strategy (pointwise, row or tile
// reduction) and sizes, so profiles tell kernels apart. Not its name: two
// kernels that differ only in name share their source and cubin.
std::string Writer::entry_name(int tile) const {
  std::string name = k_.reduced.empty() ? "kiln_pointwise" : tile >= 0 ? "kiln_tile" : "kiln_row";
  for (size_t d = 0; d < k_.sizes.size(); ++d) name += (d == 0 ? "_" : "x") + std::to_string(k_.sizes[d]);
  return name;
}

CudaSource Writer::write() {
  const std::string problem = verify(k_);
  if (!problem.empty()) throw CudaError("invalid kernel " + k_.name + ": " + problem);
  for (size_t op = 0; op < operands(); ++op) value_type(dtype(op));  // throws for unsupported dtypes
  for (const Expr& e : k_.exprs) value_type(e.dtype);
  check_config(k_, config_);
  CudaSource out;
  out.config = config_;
  const int tile = tile_dim(k_);
  for (int d = 0; d < rank(); ++d) {
    if (is_reduced(k_, d)) {
      reduced_.push_back(d);
      row_points_ *= k_.sizes[d];
    } else {
      kept_.push_back(d);
      rows_ *= k_.sizes[d];
    }
  }
  if (rows_ == 0) {
    out.empty = true;
    return out;
  }
  // 32-bit indices when every point and every element an operand reaches fit.
  int64_t extent = rows_ * std::max<int64_t>(row_points_, 1);
  for (size_t op = 0; op < operands(); ++op) {
    int64_t last = offset(op);
    for (int d = 0; d < rank(); ++d) last += (k_.sizes[d] - 1) * std::abs(strides(op)[d]);
    extent = std::max(extent, last + 1);
  }
  idx_ = extent < kInt32Limit ? "int" : "long long";
  varies_ = expr_varies(k_);
  stage_ = expr_stages(k_);
  reduce_names_.assign(k_.exprs.size(), "");
  tpr_ = config_.threads_per_row;
  rpb_ = config_.rows_per_block;
  split_tile_ = !reduced_.empty() && tpr_ >= kSplitThreads && tile >= 0;
  // Rows narrower than a warp are guarded too: every lane of a warp must
  // reach its shuffles, whichever rows are past the last.
  guarded_ = split_tile_ || (tpr_ > 32 && rpb_ > 1) || (tpr_ > 1 && tpr_ < 32);
  if (!reduced_.empty() && row_points_ > 0) {
    const int64_t items = (row_points_ + tpr_ - 1) / tpr_;
    if (items <= config_.max_items) items_ = static_cast<int>(items);
  }
  out.text = kPrelude;
  out.scalar.name = entry_name(tile);
  out.scalar.block = tpr_ * rpb_;
  out.scalar.grid = std::min(kMaxGrid, (rows_ + rpb_ - 1) / rpb_);  // split tile rows: rpb_ is 32
  out.text += "\n" + write_rows(out.scalar.name, 0);
  if (const int width = tile_vector_width(); width > 0) {
    out.vector_width = width;
    out.vector.name = out.scalar.name + "_vec";
    out.vector.block = out.scalar.block;
    out.vector.grid = std::min(kMaxGrid, (rows_ + kTileLanes * width - 1) / (kTileLanes * width));
    reduce_names_.assign(k_.exprs.size(), "");
    out.text += "\n" + write_tile_vector(out.vector.name, width);
    return out;
  }
  if (const int width = row_vector_width(); width > 0) {
    out.vector_width = width;
    out.vector.name = out.scalar.name + "_vec";
    out.vector.block = out.scalar.block;
    out.vector.grid = out.scalar.grid;
    reduce_names_.assign(k_.exprs.size(), "");
    out.text += "\n" + write_rows(out.vector.name, width);
    return out;
  }
  const int width = vector_width();
  if (width > 0) {
    out.vector_width = width;
    out.vector.name = out.scalar.name + "_vec";
    out.vector.block = kPointwiseBlock;
    out.vector.grid = std::min(kMaxGrid, (rows_ / width + kPointwiseBlock - 1) / kPointwiseBlock);
    reduce_names_.assign(k_.exprs.size(), "");
    out.text += "\n" + write_vector(out.vector.name, width);
  }
  return out;
}

}  // namespace

std::string format_launch_config(const LaunchConfig& config) {
  std::string text = "tpr=" + std::to_string(config.threads_per_row) + " rpb=" +
                     std::to_string(config.rows_per_block) + " items<=" + std::to_string(config.max_items) +
                     " vec=" + std::to_string(config.vector_bytes) + "B";
  if (config.min_blocks_per_sm > 0) text += " minblocks=" + std::to_string(config.min_blocks_per_sm);
  return text;
}

LaunchConfig default_launch_config(const Kernel& kernel) { return default_for(row_shape(kernel)); }

std::vector<LaunchConfig> launch_candidates(const Kernel& kernel) {
  const RowShape shape = row_shape(kernel);
  const LaunchConfig first = default_for(shape);
  std::vector<LaunchConfig> out{first};
  auto add = [&](const LaunchConfig& c) {
    const LaunchConfig n = normalized(c, shape);
    if (out.size() < kMaxLaunchCandidates && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  const bool rows = shape.reduces && shape.tile < 0 && shape.row_points > kSerialRow;
  if (rows) {
    // Each power of two of threads per row that gives every thread at
    // least two points (a warp takes any row), kept in registers up to
    // kMaxItems a thread, else looping (only with 256 threads or more: a
    // long row's loop wants many loads in flight). Rows share blocks of
    // 128 or 256 threads when they take fewer threads than that.
    for (int tpr = 4; tpr <= kMaxBlock; tpr *= 2) {
      const int64_t items = items_per_thread(shape, tpr);
      if (tpr > 32 && items < 2) break;
      if (items > kMaxItems && tpr < 256) continue;
      if (tpr < 32 && (items < 2 || shape.row_points > kWarpRow)) continue;
      LaunchConfig c = first;
      c.threads_per_row = tpr;
      c.max_items = items <= kMaxItems ? static_cast<int>(items) : 0;
      c.min_blocks_per_sm = 0;
      for (int rpb : {1, 2, 4, 8, 16, 32, 64}) {
        if ((tpr * rpb < 128 && tpr < 128) || (tpr * rpb > 256 && rpb > 1)) continue;
        c.rows_per_block = rpb;
        add(c);
      }
    }
  }
  // The default without vector accesses, where it has them (is 16 bytes a
  // step worth it?).
  LaunchConfig scalar = first;
  scalar.vector_bytes = 0;
  if (first.vector_bytes > 0 && !generate_cuda_source(kernel, first).vector.name.empty()) add(scalar);
  // The default with __launch_bounds__ asking for 1024 resident threads an
  // SM (at most 64 registers a thread), so more rows are in flight at once
  // (or registers spill: timing says which).
  if (rows && first.threads_per_row > 32) {
    LaunchConfig capped = first;
    capped.min_blocks_per_sm = std::max(1, kMaxBlock / (first.threads_per_row * first.rows_per_block));
    add(capped);
  }
  return out;
}

CudaSource generate_cuda_source(const Kernel& kernel, const LaunchConfig& config) {
  return Writer(kernel, config).write();
}

CudaSource generate_cuda_source(const Kernel& kernel) { return generate_cuda_source(kernel, default_launch_config(kernel)); }

}  // namespace kiln::inductor::cuda
