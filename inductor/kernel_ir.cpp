#include "inductor/kernel_ir.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "prims/type_promotion.h"

namespace kiln::inductor {
namespace {

struct KindInfo {
  const char* name;
  int operands;
};

constexpr KindInfo kKinds[] = {
#define KILN_KERNEL_ENTRY(name, text, operands) {text, operands},
    KILN_KERNEL_EXPR_KINDS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

struct OpInfo {
  const char* name;
  bool floating_only;
};

constexpr OpInfo kUnary[] = {
#define KILN_KERNEL_ENTRY(name, text, floating) {text, floating},
    KILN_KERNEL_UNARY_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

constexpr OpInfo kBinary[] = {
#define KILN_KERNEL_ENTRY(name, text, floating) {text, floating},
    KILN_KERNEL_BINARY_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

constexpr const char* kCompare[] = {
#define KILN_KERNEL_ENTRY(name, text) text,
    KILN_KERNEL_COMPARE_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

constexpr const char* kReduce[] = {
#define KILN_KERNEL_ENTRY(name, text) text,
    KILN_KERNEL_REDUCE_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

constexpr int kReduceCount = sizeof(kReduce) / sizeof(kReduce[0]);
constexpr int kUnaryCount = sizeof(kUnary) / sizeof(kUnary[0]);
constexpr int kBinaryCount = sizeof(kBinary) / sizeof(kBinary[0]);
constexpr int kCompareCount = sizeof(kCompare) / sizeof(kCompare[0]);

bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64; }

// Bitwise and logical ops make sense on bool and integers; logical ops also
// on floats (nonzero is true), but the lowering casts to bool first.
bool is_integral(DType d) { return d == DType::Bool || prims::is_integer(d); }

std::string format_strides(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << ")";
  return out.str();
}

std::string format_constant(const Expr& e) {
  if (e.dtype == DType::Bool) return e.integer ? "True" : "False";
  if (!is_float(e.dtype)) return std::to_string(e.integer);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", e.constant);
  std::string text = buffer;
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // "1.0", not "1"
  return text;
}

// Checks one expression against the ones before it; "" when fine.
std::string verify_expr(const Kernel& k, int id) {
  const Expr& e = k.exprs[id];
  const int kind = static_cast<int>(e.kind);
  // The message's prefix, built only for a problem: verify runs on every
  // lowering the scheduler tries (Note [Kernel scheduling]).
  auto why = [&] { return "%" + std::to_string(id) + " (" + kKinds[kind].name + "): "; };
  const int arity = kKinds[kind].operands;
  if (arity >= 0 ? static_cast<int>(e.operands.size()) != arity : e.operands.empty()) {
    return why() + "takes " + (arity >= 0 ? std::to_string(arity) : "one or more") + " operands, has " +
           std::to_string(e.operands.size());
  }
  for (int operand : e.operands) {
    if (operand < 0 || operand >= id) {
      return why() + "operand %" + std::to_string(operand) + " is not an earlier expression";
    }
  }
  auto operand_dtype = [&](int i) { return k.exprs[e.operands[i]].dtype; };
  const bool loads = e.kind == ExprKind::Load || e.kind == ExprKind::LoadAt;
  if (!loads && e.kind != ExprKind::Cast && !is_compute_dtype(e.dtype)) {
    return why() + dtype_short_name(e.dtype) + " is a storage dtype: compute in f32";
  }
  for (size_t i = 0; i < e.operands.size(); ++i) {
    if (e.kind != ExprKind::Cast && !is_compute_dtype(operand_dtype(i))) {
      return why() + "operand %" + std::to_string(e.operands[i]) + " is " + dtype_short_name(operand_dtype(i)) +
             ": cast it to f32 first";
    }
  }
  switch (e.kind) {
    case ExprKind::LoadAt:
      if (e.strides.size() != e.operands.size()) return why() + "needs one stride per index";
      for (size_t i = 0; i < e.operands.size(); ++i) {
        if (operand_dtype(i) != DType::Int64) return why() + "indices are i64";
      }
      [[fallthrough]];
    case ExprKind::Load:
      if (e.input < 0 || e.input >= static_cast<int>(k.inputs.size())) {
        return why() + "no input " + std::to_string(e.input);
      }
      if (k.inputs[e.input].dtype != e.dtype) {
        return why() + "loads " + dtype_short_name(k.inputs[e.input].dtype) + " as " + dtype_short_name(e.dtype);
      }
      return "";
    case ExprKind::Constant:
      return "";
    case ExprKind::Cast:
      if (item_size(e.dtype) == 0) {
        return why() + "cannot cast to " + dtype_short_name(e.dtype);
      }
      return "";
    case ExprKind::Unary: {
      if (e.op < 0 || e.op >= kUnaryCount) return why() + "unknown op";
      const UnaryOp op = static_cast<UnaryOp>(e.op);
      const DType in = operand_dtype(0);
      const DType want = (op == UnaryOp::IsNan) ? DType::Bool : in;
      if (e.dtype != want) return why() + "result dtype differs from its operand's";
      if (kUnary[e.op].floating_only && !is_float(in)) return why() + "needs a float operand";
      if (op == UnaryOp::LogicalNot && in != DType::Bool) return why() + "needs a bool operand";
      if ((op == UnaryOp::Neg || op == UnaryOp::Abs) && in == DType::Bool)
        return why() + "takes no bool operand";
      return "";
    }
    case ExprKind::Binary: {
      if (e.op < 0 || e.op >= kBinaryCount) return why() + "unknown op";
      const BinaryOp op = static_cast<BinaryOp>(e.op);
      if (operand_dtype(0) != operand_dtype(1) || e.dtype != operand_dtype(0))
        return why() + "operands and result must share a dtype";
      if (kBinary[e.op].floating_only && !is_float(e.dtype)) return why() + "needs float operands";
      const bool logical = op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr ||
                           op == BinaryOp::LogicalXor;
      if (logical && e.dtype != DType::Bool) return why() + "needs bool operands";
      const bool bitwise = op == BinaryOp::BitwiseAnd || op == BinaryOp::BitwiseOr ||
                           op == BinaryOp::BitwiseXor;
      if (bitwise && !is_integral(e.dtype)) return why() + "needs integral operands";
      const bool index = op == BinaryOp::IndexDiv || op == BinaryOp::IndexMod;
      if (index && e.dtype != DType::Int64) return why() + "needs i64 operands";
      return "";
    }
    case ExprKind::Compare:
      if (e.op < 0 || e.op >= kCompareCount) return why() + "unknown op";
      if (operand_dtype(0) != operand_dtype(1)) return why() + "operands must share a dtype";
      if (e.dtype != DType::Bool) return why() + "yields bool";
      return "";
    case ExprKind::Select:
      if (operand_dtype(0) != DType::Bool) return why() + "condition must be bool";
      if (operand_dtype(1) != operand_dtype(2) || e.dtype != operand_dtype(1))
        return why() + "branches and result must share a dtype";
      return "";
    case ExprKind::Index:
      if (e.strides.size() != k.sizes.size()) return why() + "strides rank differs";
      if (e.dtype != DType::Int64) return why() + "is i64";
      return "";
    case ExprKind::Reduce:
      if (e.op < 0 || e.op >= kReduceCount) return why() + "unknown op";
      if (k.reduced.empty()) return why() + "a reduction in a kernel without reduced dims";
      if (operand_dtype(0) != e.dtype) return why() + "operand and result must share a dtype";
      return "";
  }
  return why() + "unknown kind";
}

}  // namespace

int Kernel::add(Expr expr) {
  exprs.push_back(std::move(expr));
  return static_cast<int>(exprs.size()) - 1;
}

int Kernel::load(int input) {
  Expr e;
  e.kind = ExprKind::Load;
  e.dtype = inputs.at(input).dtype;
  e.input = input;
  return add(std::move(e));
}

int Kernel::constant(DType dtype, double value) {
  Expr e;
  e.kind = ExprKind::Constant;
  e.dtype = dtype;
  if (is_float(dtype)) {
    e.constant = value;
  } else {
    e.integer = dtype == DType::Bool ? (value != 0) : static_cast<int64_t>(value);
  }
  return add(std::move(e));
}

int Kernel::size_constant(int64_t value) {
  const int id = constant(DType::Int64, static_cast<double>(value));
  exprs[id].size_value = true;
  return id;
}

int Kernel::cast(int operand, DType dtype) {
  Expr e;
  e.kind = ExprKind::Cast;
  e.dtype = dtype;
  e.operands = {operand};
  return add(std::move(e));
}

int Kernel::unary(UnaryOp op, int operand) {
  Expr e;
  e.kind = ExprKind::Unary;
  e.op = static_cast<int8_t>(op);
  e.dtype = op == UnaryOp::IsNan ? DType::Bool : exprs.at(operand).dtype;
  e.operands = {operand};
  return add(std::move(e));
}

int Kernel::binary(BinaryOp op, int a, int b) {
  Expr e;
  e.kind = ExprKind::Binary;
  e.op = static_cast<int8_t>(op);
  e.dtype = exprs.at(a).dtype;
  e.operands = {a, b};
  return add(std::move(e));
}

int Kernel::compare(CompareOp op, int a, int b) {
  Expr e;
  e.kind = ExprKind::Compare;
  e.op = static_cast<int8_t>(op);
  e.dtype = DType::Bool;
  e.operands = {a, b};
  return add(std::move(e));
}

int Kernel::select(int cond, int a, int b) {
  Expr e;
  e.kind = ExprKind::Select;
  e.dtype = exprs.at(a).dtype;
  e.operands = {cond, a, b};
  return add(std::move(e));
}

int Kernel::reduce(ReduceOp op, int operand) {
  Expr e;
  e.kind = ExprKind::Reduce;
  e.op = static_cast<int8_t>(op);
  e.dtype = exprs.at(operand).dtype;
  e.operands = {operand};
  return add(std::move(e));
}

int Kernel::index(std::vector<int64_t> strides) {
  Expr e;
  e.kind = ExprKind::Index;
  e.dtype = DType::Int64;
  e.strides = std::move(strides);
  return add(std::move(e));
}

int Kernel::load_at(int input, std::vector<int> indices, std::vector<int64_t> strides) {
  Expr e;
  e.kind = ExprKind::LoadAt;
  e.dtype = inputs.at(input).dtype;
  e.input = input;
  e.operands = std::move(indices);
  e.strides = std::move(strides);
  return add(std::move(e));
}

int Kernel::add_input(KernelInput input) {
  inputs.push_back(std::move(input));
  return static_cast<int>(inputs.size()) - 1;
}

int Kernel::add_output(KernelOutput output) {
  outputs.push_back(std::move(output));
  return static_cast<int>(outputs.size()) - 1;
}

std::string verify(const Kernel& k) {
  const size_t rank = k.sizes.size();
  for (int64_t size : k.sizes) {
    if (size < 0) return "negative size in the iteration space";
  }
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const KernelInput& in = k.inputs[i];
    if (in.strides.size() != rank) return "in" + std::to_string(i) + ": strides rank differs";
    if (item_size(in.dtype) == 0) return "in" + std::to_string(i) + ": unsupported dtype";
  }
  for (size_t i = 0; i < k.reduced.size(); ++i) {
    if (k.reduced[i] < 0 || k.reduced[i] >= static_cast<int>(rank)) return "reduced dim out of range";
    if (i > 0 && k.reduced[i] <= k.reduced[i - 1]) return "reduced dims must ascend";
  }
  if (!k.reduced.empty()) {
    // Kept dims, reduced dims, then at most one (tile) kept dim.
    const int last = k.reduced.back();
    if (last - k.reduced.front() + 1 != static_cast<int>(k.reduced.size())) return "reduced dims must be adjacent";
    if (static_cast<int>(rank) - last - 1 > 1) return "more than one kept dim after the reduced dims";
  }
  for (size_t id = 0; id < k.exprs.size(); ++id) {
    std::string problem = verify_expr(k, static_cast<int>(id));
    if (!problem.empty()) return problem;
  }
  if (k.outputs.empty()) return "no outputs";
  const std::vector<bool> varies = expr_varies(k);
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const KernelOutput& out = k.outputs[i];
    const std::string name = "out" + std::to_string(i);
    if (out.strides.size() != rank) return name + ": strides rank differs";
    if (item_size(out.dtype) == 0) return name + ": unsupported dtype";
    if (out.value < 0 || out.value >= static_cast<int>(k.exprs.size()))
      return name + ": no expression %" + std::to_string(out.value);
    // A zero stride would make points race for one element, unless the
    // value is constant along reduced dims and stored once per kept point.
    bool zero_in_reduced = false, nonzero_in_reduced = false;
    for (size_t d = 0; d < rank; ++d) {
      const bool reduced = is_reduced(k, static_cast<int>(d));
      if (out.strides[d] == 0 && k.sizes[d] > 1) {
        if (!reduced) return name + ": stride 0 in a kept dim of size > 1";
        zero_in_reduced = true;
      } else if (reduced && k.sizes[d] > 1) {
        nonzero_in_reduced = true;
      }
    }
    if (zero_in_reduced && (nonzero_in_reduced || varies[out.value]))
      return name + ": stride 0 in a reduced dim, but the value is not constant along every reduced dim";
    if (out.has_tensor_shape && out.tensor_sizes.size() != out.tensor_strides.size())
      return name + ": tensor sizes and strides differ in rank";
  }
  return "";
}

std::vector<int> expr_stages(const Kernel& k) {
  std::vector<int> stage(k.exprs.size(), 0);
  for (size_t id = 0; id < k.exprs.size(); ++id) {
    const Expr& e = k.exprs[id];
    int s = 0;
    for (int operand : e.operands) s = std::max(s, stage[operand]);
    stage[id] = e.kind == ExprKind::Reduce ? s + 1 : s;
  }
  return stage;
}

std::vector<bool> expr_varies(const Kernel& k) {
  std::vector<bool> varies(k.exprs.size(), false);
  for (size_t id = 0; id < k.exprs.size(); ++id) {
    const Expr& e = k.exprs[id];
    if (e.kind == ExprKind::Reduce) continue;
    if (e.kind == ExprKind::Load || e.kind == ExprKind::LoadAt || e.kind == ExprKind::Index) {
      const std::vector<int64_t>& strides = e.kind == ExprKind::Index ? e.strides : k.inputs[e.input].strides;
      for (int d : k.reduced) {
        if (strides[d] != 0 && k.sizes[d] > 1) varies[id] = true;
      }
      if (e.kind != ExprKind::LoadAt) continue;
    }
    for (int operand : e.operands) varies[id] = varies[id] || varies[operand];
  }
  return varies;
}

bool is_reduced(const Kernel& k, int d) { return std::find(k.reduced.begin(), k.reduced.end(), d) != k.reduced.end(); }

int parallel_dim(const Kernel& k) {
  for (int d = 0; d < static_cast<int>(k.sizes.size()); ++d) {
    if (!is_reduced(k, d)) return d;
  }
  return -1;
}

int tile_dim(const Kernel& k) {
  if (k.reduced.empty() || k.reduced.back() + 1 >= static_cast<int>(k.sizes.size())) return -1;
  return k.reduced.back() + 1;
}

void coalesce_dims(Kernel& k) {
  for (KernelOutput& out : k.outputs) {
    if (out.has_tensor_shape) continue;
    out.has_tensor_shape = true;
    out.tensor_sizes = k.sizes;
    out.tensor_strides = out.strides;
  }
  std::vector<std::vector<int64_t>*> strides;
  for (KernelInput& in : k.inputs) strides.push_back(&in.strides);
  for (KernelOutput& out : k.outputs) strides.push_back(&out.strides);
  for (Expr& e : k.exprs) {
    if (e.kind == ExprKind::Index) strides.push_back(&e.strides);
  }
  // Size-1 dims index nothing: drop them (one reduced dim stays, so a
  // reduction keeps its phases).
  for (int d = static_cast<int>(k.sizes.size()) - 1; d >= 0; --d) {
    if (k.sizes[d] != 1 || (is_reduced(k, d) && k.reduced.size() == 1)) continue;
    for (std::vector<int64_t>* s : strides) s->erase(s->begin() + d);
    k.sizes.erase(k.sizes.begin() + d);
    std::vector<int> reduced;
    for (int r : k.reduced) {
      if (r != d) reduced.push_back(r > d ? r - 1 : r);
    }
    k.reduced = reduced;
  }
  const int tile = tile_dim(k);
  int d = 0;
  int tile_now = tile;
  while (d + 1 < static_cast<int>(k.sizes.size())) {
    const bool same_kind = is_reduced(k, d) == is_reduced(k, d + 1) && d != tile_now && d + 1 != tile_now;
    const int64_t outer = k.sizes[d], inner = k.sizes[d + 1];
    bool fits = same_kind;
    for (const std::vector<int64_t>* s : strides) {
      if (!fits) break;
      fits = outer == 1 || inner == 1 || (*s)[d] == (*s)[d + 1] * inner;
    }
    if (!fits) {
      ++d;
      continue;
    }
    for (std::vector<int64_t>* s : strides) {
      (*s)[d] = inner == 1 ? (*s)[d] : (*s)[d + 1];
      s->erase(s->begin() + d + 1);
    }
    k.sizes[d] = outer * inner;
    k.sizes.erase(k.sizes.begin() + d + 1);
    std::vector<int> reduced;
    for (int r : k.reduced) {
      if (r == d + 1) continue;  // merged into d, of the same kind
      reduced.push_back(r > d + 1 ? r - 1 : r);
    }
    k.reduced = reduced;
    if (tile_now > d + 1) --tile_now;
  }
}

std::string format_kernel(const Kernel& k) {
  std::ostringstream out;
  out << "kernel " << k.name << format_strides(k.sizes);
  if (!k.reduced.empty()) {
    out << " reduce=(";
    for (size_t i = 0; i < k.reduced.size(); ++i) out << (i ? ", " : "") << k.reduced[i];
    out << ")";
  }
  out << "\n";
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const KernelInput& in = k.inputs[i];
    out << "  in" << i << ": " << dtype_short_name(in.dtype) << " strides="
        << format_strides(in.strides) << " offset=" << in.offset << "\n";
  }
  for (size_t id = 0; id < k.exprs.size(); ++id) {
    const Expr& e = k.exprs[id];
    out << "  %" << id << " = ";
    switch (e.kind) {
      case ExprKind::Load: out << "load in" << e.input; break;
      case ExprKind::LoadAt:
        out << "load_at in" << e.input << "[";
        for (size_t i = 0; i < e.operands.size(); ++i) {
          out << (i ? " + " : "") << "%" << e.operands[i] << " * " << e.strides[i];
        }
        out << "]";
        break;
      case ExprKind::Constant: out << "const " << format_constant(e); break;
      case ExprKind::Cast: out << "cast %" << e.operands[0]; break;
      case ExprKind::Index: out << "index strides=" << format_strides(e.strides); break;
      case ExprKind::Reduce: out << "reduce_" << reduce_op_name(static_cast<ReduceOp>(e.op)) << "(%" << e.operands[0] << ")"; break;
      case ExprKind::Unary: out << unary_op_name(static_cast<UnaryOp>(e.op)) << "(%" << e.operands[0] << ")"; break;
      case ExprKind::Binary:
      case ExprKind::Compare:
      case ExprKind::Select: {
        out << (e.kind == ExprKind::Binary    ? binary_op_name(static_cast<BinaryOp>(e.op))
                : e.kind == ExprKind::Compare ? compare_op_name(static_cast<CompareOp>(e.op))
                                              : "select")
            << "(";
        for (size_t i = 0; i < e.operands.size(); ++i) out << (i ? ", " : "") << "%" << e.operands[i];
        out << ")";
        break;
      }
    }
    out << " : " << dtype_short_name(e.dtype) << "\n";
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const KernelOutput& o = k.outputs[i];
    out << "  out" << i << ": " << dtype_short_name(o.dtype) << " strides=" << format_strides(o.strides)
        << " = %" << o.value;
    if (o.has_tensor_shape) {
      out << " tensor=" << format_strides(o.tensor_sizes) << "/" << format_strides(o.tensor_strides);
    }
    out << "\n";
  }
  return out.str();
}

const char* expr_kind_name(ExprKind kind) { return kKinds[static_cast<int>(kind)].name; }
const char* unary_op_name(UnaryOp op) { return kUnary[static_cast<int>(op)].name; }
const char* binary_op_name(BinaryOp op) { return kBinary[static_cast<int>(op)].name; }
const char* compare_op_name(CompareOp op) { return kCompare[static_cast<int>(op)]; }
const char* reduce_op_name(ReduceOp op) { return kReduce[static_cast<int>(op)]; }

bool is_compute_dtype(DType d) { return d == DType::Bool || prims::is_integer(d) || is_float(d); }

int64_t item_size(DType d) {
  switch (d) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
    default: return 0;  // complex and other: not supported by kernels yet
  }
}

}  // namespace kiln::inductor
