#include "inductor/simplify_casts.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::inductor {
namespace {

// Note [Exact round trips]
// Float16 and bfloat16 are storage types (Note [Kernel expressions]), so
// every op of a low-precision chain under autocast converts its operands
// to float32 and its result back: masked_fill on bfloat16 attention scores
// is cast(cast(where(mask, -inf, cast(s, f32)), bf16), f32). A value that
// is exact in the storage dtype survives that round trip unchanged, so
//   cast(cast(v, S), f32)  ->  v        when v is exact in S, and
//   cast(cast(h, f32), S)  ->  h        for h of dtype S (also as a store),
// where exact in S means: a conversion from S, a constant S represents,
// or a select, neg, abs, maximum, minimum, max or min of exact values.
// These conversions are most of the instructions of a bfloat16 softmax
// (three round trips an element, session 8's H200 profile), which is
// bound by them rather than by memory. The only visible difference: a NaN
// keeps its payload where converting would have made it the canonical
// NaN; kiln's results compare NaNs by isnan anyway.

constexpr uint8_t kExactBFloat16 = 1;
constexpr uint8_t kExactFloat16 = 2;

uint8_t storage_bit(DType dtype) {
  if (dtype == DType::BFloat16) return kExactBFloat16;
  if (dtype == DType::Float16) return kExactFloat16;
  return 0;
}

// The storage dtypes that represent float32 constant `c` exactly.
uint8_t exact_constant(double c) {
  if (std::isnan(c)) return kExactBFloat16 | kExactFloat16;
  const float f = static_cast<float>(c);
  if (static_cast<double>(f) != c) return 0;
  uint8_t bits = 0;
  // bfloat16 is float32's upper half: its exponent range, 7 mantissa bits.
  if ((std::bit_cast<uint32_t>(f) & 0xFFFFu) == 0) bits |= kExactBFloat16;
  // float16: 10 mantissa bits, normal from 2^-14, largest 65504; subnormal
  // steps of 2^-24.
  const float a = std::fabs(f);
  if (std::isinf(f)) {
    bits |= kExactFloat16;
  } else if (a >= 0x1p-14f) {
    if (a <= 65504.0f && (std::bit_cast<uint32_t>(f) & 0x1FFFu) == 0) bits |= kExactFloat16;
  } else {
    const float steps = a * 0x1p24f;  // exact: a power-of-two scale of a small float
    if (steps == std::floor(steps)) bits |= kExactFloat16;
  }
  return bits;
}

// True for ops whose result is one of their operands' values, or its
// negation or magnitude: exact wherever those operands are.
bool yields_an_operand(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Select: return true;
    case ExprKind::Unary: return e.op == static_cast<int8_t>(UnaryOp::Neg) || e.op == static_cast<int8_t>(UnaryOp::Abs);
    case ExprKind::Binary:
      return e.op == static_cast<int8_t>(BinaryOp::Maximum) || e.op == static_cast<int8_t>(BinaryOp::Minimum);
    case ExprKind::Reduce: return e.op == static_cast<int8_t>(ReduceOp::Max) || e.op == static_cast<int8_t>(ReduceOp::Min);
    default: return false;
  }
}

bool is_cast_from(const Kernel& k, int id, DType from, DType to) {
  const Expr& e = k.exprs[id];
  return e.kind == ExprKind::Cast && e.dtype == to && k.exprs[e.operands[0]].dtype == from;
}

// Drops the casts no output reaches (what the rewrite bypassed) and the
// index arithmetic nothing reads (a split view's Index folded into a
// load's strides, Note [Cat in kernels], or a merged one's digits, Note
// [Reshapes in kernels]: code generators give each Index a loop-carried
// value, and CUDA's vector entries refuse kernels with one), renumbering
// the rest; other expressions stay as lowered.
bool index_arithmetic(const Expr& e) {
  return e.kind == ExprKind::Index ||
         (e.dtype == DType::Int64 && (e.kind == ExprKind::Binary || e.kind == ExprKind::Constant));
}

void drop_unread_exprs(Kernel& k) {
  std::vector<bool> used(k.exprs.size(), false);
  for (const KernelOutput& out : k.outputs) used[out.value] = true;
  for (size_t id = k.exprs.size(); id-- > 0;) {
    if (k.exprs[id].kind != ExprKind::Cast && !index_arithmetic(k.exprs[id])) used[id] = true;
    if (!used[id]) continue;
    for (int operand : k.exprs[id].operands) used[operand] = true;
  }
  std::vector<int> renumbered(k.exprs.size(), -1);
  std::vector<Expr> kept;
  for (size_t id = 0; id < k.exprs.size(); ++id) {
    if (!used[id]) continue;
    Expr e = std::move(k.exprs[id]);
    for (int& operand : e.operands) operand = renumbered[operand];
    renumbered[id] = static_cast<int>(kept.size());
    kept.push_back(std::move(e));
  }
  k.exprs = std::move(kept);
  for (KernelOutput& out : k.outputs) out.value = renumbered[out.value];
}

}  // namespace

void simplify_casts(Kernel& k) {
  const size_t n = k.exprs.size();
  std::vector<int> same(n);  // an earlier expression with the same value
  std::vector<uint8_t> exact(n, 0);
  bool changed = false;
  for (size_t id = 0; id < n; ++id) {
    Expr& e = k.exprs[id];
    for (int& operand : e.operands) operand = same[operand];
    same[id] = static_cast<int>(id);
    if (e.dtype != DType::Float32 && !storage_bit(e.dtype)) continue;
    auto exact_of = [&](size_t operand) { return exact[e.operands[operand]]; };
    switch (e.kind) {
      case ExprKind::Cast: {
        const int from = e.operands[0];
        const DType from_dtype = k.exprs[from].dtype;
        if (e.dtype == DType::Float32 && storage_bit(from_dtype)) {
          exact[id] = storage_bit(from_dtype);
          // cast(cast(v, S), f32) -> v
          if (is_cast_from(k, from, DType::Float32, from_dtype) &&
              (exact[k.exprs[from].operands[0]] & storage_bit(from_dtype))) {
            same[id] = k.exprs[from].operands[0];
          }
        } else if (storage_bit(e.dtype) && is_cast_from(k, from, e.dtype, DType::Float32)) {
          same[id] = k.exprs[from].operands[0];  // cast(cast(h, f32), S) -> h
        }
        break;
      }
      case ExprKind::Constant:
        if (e.dtype == DType::Float32) exact[id] = exact_constant(e.constant);
        break;
      default:
        if (yields_an_operand(e)) {
          // A select's condition (operand 0) is no value it yields.
          exact[id] = kExactBFloat16 | kExactFloat16;
          for (size_t i = e.kind == ExprKind::Select ? 1 : 0; i < e.operands.size(); ++i) exact[id] &= exact_of(i);
        }
        break;
    }
    changed |= same[id] != static_cast<int>(id);
  }
  for (KernelOutput& out : k.outputs) {
    const int before = out.value;
    out.value = same[out.value];
    // A store converts too: storing cast(h, f32) as h's dtype stores h.
    if (storage_bit(out.dtype) && is_cast_from(k, out.value, out.dtype, DType::Float32)) {
      out.value = k.exprs[out.value].operands[0];
    }
    changed |= out.value != before;
  }
  const bool any_index =
      std::any_of(k.exprs.begin(), k.exprs.end(), [](const Expr& e) { return e.kind == ExprKind::Index; });
  if (changed || any_index) drop_unread_exprs(k);
}

}  // namespace kiln::inductor
