#include "inductor/cuda/cuda_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "base/check.h"
#include "inductor/cuda/cuda_launch.h"
#include "inductor/cuda/cuda_text.h"
#include "inductor/cuda/cuda_writer.h"

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


namespace detail {

// Where each signature takes the size constants' parameters, known only
// once every entry is written (Writer::write).
constexpr const char* kSizeConstantsMark = "/*kiln size constants*/";

std::string Writer::value(int id, Context& c) {
  const Expr& e = k_.exprs[id];
  if (e.kind == ExprKind::Reduce) {
    if (reduce_names_[id].empty()) throw CudaError("a reduction read before its phase");
    return reduce_names_[id];
  }
  if (e.kind == ExprKind::Constant) return constant_ref(id);
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
    case ExprKind::Load:
    case ExprKind::LoadAt: {
      const bool at_point = c.point != nullptr && (*c.varies)[id];
      std::string extra;
      for (size_t j = 0; j < e.operands.size(); ++j) {
        extra += " + " + operand(static_cast<int>(j)) + " * " + std::to_string(e.strides[j]) + "LL";
      }
      const std::string raw = c.load(e.input, at_point, extra);
      return e.dtype == DType::Bool ? "(" + raw + " != 0)" : raw;
    }
    case ExprKind::Constant: return constant_ref(id);
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
  return text + layout_parameters() + kSizeConstantsMark + ") {\n" + layout_locals();
}

std::string Writer::constant_ref(int id) {
  const Expr& e = k_.exprs[id];
  if (!e.size_value || layout_.sizes == 0 || is_float(e.dtype)) return constant_text(e);
  if (constant_param_[id] < 0) {
    constant_param_[id] = static_cast<int>(runtime_constants_.size());
    runtime_constants_.push_back(id);
  }
  return "kiln_size" + std::to_string(constant_param_[id]);
}

std::string Writer::size_text(int d) const {
  return d < layout_.sizes ? "kiln_n" + std::to_string(d) : std::to_string(k_.sizes[d]);
}

std::string Writer::rows_text() const { return layout_.sizes > 0 ? "kiln_rows" : std::to_string(rows_); }

std::string Writer::layout_parameters() const {
  const size_t words = layout_.sizes + operands() * layout_.strides;
  std::string text;
  for (size_t w = 0; w < words; ++w) text += ", const long long kiln_a" + std::to_string(w);
  return text;
}

std::string Writer::layout_locals() const {
  if (layout_.sizes == 0) return "";
  std::string text, rows;
  size_t word = 0;
  for (int d = 0; d < layout_.sizes; ++d, ++word) {
    text += "  const " + idx_ + " kiln_n" + std::to_string(d) + " = (" + idx_ + ")kiln_a" + std::to_string(word) + ";\n";
  }
  for (size_t op = 0; op < operands(); ++op) {
    for (int d = 0; d < layout_.strides; ++d, ++word) {
      if (strides(op)[d] == 0) continue;  // a broadcast: the constant 0
      text += "  const " + idx_ + " kiln_st" + std::to_string(op) + "_" + std::to_string(d) + " = (" + idx_ +
              ")kiln_a" + std::to_string(word) + ";\n";
    }
  }
  for (int d : kept_) rows += (rows.empty() ? "" : " * ") + size_text(d);
  return text + "  const " + idx_ + " kiln_rows = " + (rows.empty() ? "1" : rows) + ";\n";
}

std::string Writer::decompose(const std::vector<int>& dims, const std::string& index, const std::string& indent,
                              const std::string& prefix) const {
  if (dims.empty()) return "";
  if (dims.size() == 1) return indent + "const " + idx_ + " " + prefix + std::to_string(dims[0]) + " = " + index + ";\n";
  std::string rest = prefix + "_rest";
  std::string text = indent + idx_ + " " + rest + " = " + index + ";\n";
  for (size_t j = dims.size(); j-- > 1;) {
    const std::string size = size_text(dims[j]);
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
    if (d < layout_.strides) {
      text += " + " + prefix + std::to_string(d) + " * kiln_st" + std::to_string(op) + "_" + std::to_string(d);
      continue;
    }
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
std::string Writer::point_load(int input, Scope& point, std::vector<bool>* declared, const std::string& extra) const {
  const std::string op = std::to_string(input);
  if (!(*declared)[input]) {
    (*declared)[input] = true;
    point.code += point.indent + "const " + idx_ + " o" + op + " = b" + op +
                  offset_terms(static_cast<size_t>(input), reduced_, "j") + ";\n";
  }
  return "in" + op + "[o" + op + extra + "]";
}

// The row kernel (Note [CUDA kernels]): pointwise kernels (rows of one
// point) and every reduction; with `width`, the row entry reading and
// writing `width` consecutive row points per 16-byte access.
bool Writer::has_load_at() const {
  return std::any_of(k_.exprs.begin(), k_.exprs.end(), [](const Expr& e) { return e.kind == ExprKind::LoadAt; });
}

// Per expression, whether it varies along the pointwise vector entry's
// lanes (the innermost dim): a load of an input moving along it, an index
// counting it, or anything computed from one.
std::vector<bool> Writer::varies_along_lanes() const {
  const int inner = rank() - 1;
  std::vector<bool> varies(k_.exprs.size(), false);
  for (size_t id = 0; id < k_.exprs.size(); ++id) {
    const Expr& e = k_.exprs[id];
    if (e.kind == ExprKind::Load || e.kind == ExprKind::LoadAt) {
      varies[id] = k_.inputs[e.input].strides[inner] != 0;
    } else if (e.kind == ExprKind::Index) {
      varies[id] = e.strides[inner] != 0;
    }
    for (int operand : e.operands) varies[id] = varies[id] || varies[operand];
  }
  return varies;
}

int Writer::vector_width() const {
  if (!k_.reduced.empty() || k_.sizes.empty()) return 0;
  const int inner = rank() - 1;
  // An index moving along the lanes (argmax's) would need each lane's
  // point, not the vector's first; a computed index of a load likewise.
  // Constant along them (a roll's or window cut's index of an outer dim),
  // each is computed once per vector (Note [Loads at computed indices]).
  const std::vector<bool> varies = varies_along_lanes();
  for (const Expr& e : k_.exprs) {
    if (e.kind == ExprKind::Index && varies[&e - k_.exprs.data()]) return 0;
    if (e.kind != ExprKind::LoadAt) continue;
    for (int operand : e.operands) {
      if (varies[operand]) return 0;
    }
  }
  std::vector<int64_t> load_at_strides;  // the computed parts must keep vectors aligned
  for (const Expr& e : k_.exprs) {
    if (e.kind == ExprKind::LoadAt && k_.inputs[e.input].strides[inner] == 1) {
      load_at_strides.insert(load_at_strides.end(), e.strides.begin(), e.strides.end());
    }
  }
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
  for (int64_t stride : load_at_strides) {
    if (stride % width != 0) return 0;
  }
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
std::string Writer::write_vector(const std::string& name, int width) {
  const size_t count = k_.exprs.size();
  const int inner = rank() - 1;
  int64_t numel = 1;
  for (int64_t size : k_.sizes) numel *= size;
  const std::string w = std::to_string(width);
  // Varying here: along the vector (an input of inner stride 1).
  const std::vector<bool> varies = varies_along_lanes();
  std::string text = signature(name, kPointwiseBlock);
  const std::string vector_count = layout_.sizes > 0 ? "kiln_rows / " + w : std::to_string(numel / width);
  text += "  for (" + idx_ + " q = (" + idx_ + ")blockIdx.x * " + std::to_string(kPointwiseBlock) +
          " + threadIdx.x; q < " + vector_count + "; q += (" + idx_ + ")gridDim.x * " + std::to_string(kPointwiseBlock) +
          ") {\n";
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
  // One vector per input a plain load reads (a load at a computed index
  // reads its own: the point's own element of such an input may lie
  // outside it).
  std::vector<bool> loaded(k_.inputs.size(), false);
  for (const Expr& e : k_.exprs) {
    if (e.kind == ExprKind::Load) loaded[e.input] = true;
  }
  std::string vectors;
  for (size_t op = 0; op < k_.inputs.size(); ++op) {
    if (k_.inputs[op].strides[inner] != 1 || !loaded[op]) continue;
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
  // A load at a computed index (constant along the vector: vector_width)
  // reads its own vector, declared per row once its index is known.
  int moved_loads = 0;
  c.load = [&](int input, bool at_point, const std::string& extra) {
    const std::string o = std::to_string(input);
    if (!at_point) return "in" + o + "[b" + o + extra + "]";
    if (extra.empty()) return "x" + o + ".v[j]";
    const std::string type = std::string("kiln_vec<") + storage_type(dtype(static_cast<size_t>(input))) + ", " + w + ">";
    const std::string name = "xa" + std::to_string(moved_loads++);
    row.code += row.indent + "const " + type + " " + name + " = *reinterpret_cast<const " + type + "*>(in" + o +
                " + b" + o + extra + ");\n";
    return name + ".v[j]";
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

std::string Writer::entry_name(int tile) const {
  std::string name = k_.reduced.empty() ? "kiln_pointwise" : tile >= 0 ? "kiln_tile" : "kiln_row";
  for (int d = 0; d < rank(); ++d) {
    name += (d == 0 ? "_" : "x") + (d < layout_.sizes ? std::string("n") : std::to_string(k_.sizes[d]));
  }
  return name;
}

CudaSource Writer::write() {
  CudaSource out = write_entries();
  std::string parameters;
  for (size_t n = 0; n < runtime_constants_.size(); ++n) parameters += ", const long long kiln_size" + std::to_string(n);
  const std::string mark = kSizeConstantsMark;
  for (size_t at = out.text.find(mark); at != std::string::npos; at = out.text.find(mark, at)) {
    out.text.replace(at, mark.size(), parameters);
  }
  out.runtime_constants = runtime_constants_;
  return out;
}

CudaSource Writer::write_entries() {
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
  if (config_.runtime_layout) layout_ = runtime_layout_dims(k_);
  constant_param_.assign(k_.exprs.size(), -1);
  out.layout_sizes = layout_.sizes;
  out.layout_strides = layout_.strides;
  out.text = cuda_prelude();
  out.scalar.name = entry_name(tile);
  out.scalar.block = tpr_ * rpb_;
  out.scalar.rows_per_block = rpb_;  // split tile rows: rpb_ is 32
  out.scalar.grid = grid_for_rows(out.scalar, rows_);
  out.text += "\n" + write_rows(out.scalar.name, 0);
  if (const int width = tile_vector_width(); width > 0) {
    out.vector_width = width;
    out.vector.name = out.scalar.name + "_vec";
    out.vector.block = out.scalar.block;
    out.vector.rows_per_block = kTileLanes * width;
    out.vector.grid = grid_for_rows(out.vector, rows_);
    reduce_names_.assign(k_.exprs.size(), "");
    out.text += "\n" + write_tile_vector(out.vector.name, width);
    return out;
  }
  if (const int width = row_vector_width(); width > 0) {
    out.vector_width = width;
    out.vector.name = out.scalar.name + "_vec";
    out.vector.block = out.scalar.block;
    out.vector.rows_per_block = out.scalar.rows_per_block;
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
    out.vector.rows_per_block = int64_t{kPointwiseBlock} * width;
    out.vector.grid = grid_for_rows(out.vector, rows_);
    reduce_names_.assign(k_.exprs.size(), "");
    out.text += "\n" + write_vector(out.vector.name, width);
  }
  return out;
}
}  // namespace detail

CudaSource generate_cuda_source(const Kernel& kernel, const LaunchConfig& config) {
  return detail::Writer(kernel, config).write();
}

CudaSource generate_cuda_source(const Kernel& kernel) { return generate_cuda_source(kernel, default_launch_config(kernel)); }

}  // namespace kiln::inductor::cuda
