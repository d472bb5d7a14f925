// Outer reductions read as vector tiles: the Writer's tile kernels.
#include "base/check.h"
#include "inductor/cuda/cuda_launch.h"
#include "inductor/cuda/cuda_text.h"
#include "inductor/cuda/cuda_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kiln::inductor::cuda::detail {

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
constexpr int64_t kTileVectorShared = 24 * 1024;

int Writer::tile_vector_width() const {
  const int tile = tile_dim(k_);
  if (!split_tile_ || tile != rank() - 1 || k_.sizes[tile] < 2 || has_load_at()) return 0;
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
    c.load = [&](int input, bool at_point, const std::string& extra) {
      const std::string o = std::to_string(input);
      if (!at_point) return "in" + o + "[b" + o + extra + "]";
      if (along_tile(static_cast<size_t>(input))) {
        KILN_CHECK(extra.empty(), "a vector read at a computed index");
        vector_input[input] = true;
        return "x" + o + ".v[u]";
      }
      return point_load(input, point, &scalar_offset, extra);
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
  c.load = [&](int input, bool at_point, const std::string& extra) {
    const std::string o = std::to_string(input);
    return "in" + o + "[b" + o + (at_point ? " + u" : "") + extra + "]";
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
}  // namespace kiln::inductor::cuda::detail
