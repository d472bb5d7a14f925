// Row reductions: the Writer's rows kernels (Note [CUDA kernels] in
// cuda_source.cpp).
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
    const std::string rows = rows_text();
    text += "  for (" + idx_ + " row0 = (" + idx_ + ")blockIdx.x * 32; row0 < " + rows + "; row0 += (" + idx_ +
            ")gridDim.x * 32) {\n";
    row.code += row.indent + "const bool kiln_valid = row0 + (threadIdx.x & 31) < " + rows + ";\n";
    row.code += row.indent + "const " + idx_ + " row = kiln_valid ? row0 + (threadIdx.x & 31) : " +
                rows_text() + " - 1;\n";
  } else if (guarded_) {
    // Block rows, several a block: rows row0 .. row0 + rpb - 1, one per
    // group of tpr threads.
    const std::string rows = rows_text(), rpb = std::to_string(rpb_);
    const std::string mine = "(threadIdx.x / " + std::to_string(tpr_) + ")";
    text += "  for (" + idx_ + " row0 = (" + idx_ + ")blockIdx.x * " + rpb + "; row0 < " + rows + "; row0 += (" +
            idx_ + ")gridDim.x * " + rpb + ") {\n";
    row.code += row.indent + "const bool kiln_valid = row0 + " + mine + " < " + rows + ";\n";
    row.code += row.indent + "const " + idx_ + " row = kiln_valid ? row0 + " + mine + " : " +
                rows_text() + " - 1;\n";
  } else {
    const std::string first_row = "(" + idx_ + ")blockIdx.x * " + std::to_string(rpb_) +
                                  (rpb_ == 1 ? "" : tpr_ == 1 ? " + threadIdx.x" : " + threadIdx.x / " + std::to_string(tpr_));
    text += "  for (" + idx_ + " row = " + first_row + "; row < " + rows_text() + "; row += (" + idx_ +
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
    c.load = [&](int input, bool at_point, const std::string& extra) {
      const std::string op = std::to_string(input);
      if (!at_point) return "in" + op + "[b" + op + extra + "]";
      if (width > 0) {
        KILN_CHECK(extra.empty(), "a vector read at a computed index");
        // Read once per vector, before the loop over its points.
        point_offsets[input] = true;
        return "x" + op + ".v[j]";
      }
      return point_load(input, point, &point_offsets, extra);
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
  once.load = [](int input, bool, const std::string& extra) {
    return "in" + std::to_string(input) + "[b" + std::to_string(input) + extra + "]";
  };
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
int Writer::row_vector_width() const {
  if (reduced_.size() != 1 || reduced_[0] != rank() - 1 || tpr_ < 2 || has_load_at()) return 0;
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
}  // namespace kiln::inductor::cuda::detail
