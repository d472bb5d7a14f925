#include "tracer/dynamic_shapes.h"

#include <algorithm>

namespace kiln::tracer {

// Note [Dynamic shapes]
// kiln.compile(dynamic=None) works like torch.compile's automatic dynamic
// shapes: the first trace is static; when a guard fails only because an
// input dim changed size, the code cache marks that (source, dim) dynamic
// and the next trace leaves it symbolic, so a third size reuses the graph.
// dynamic=True marks every dim of the frame's tensor arguments from the
// start; dynamic=False never does.
//
// A dynamic trace runs every fake op at SymbolTable::kPoints sample points:
// the real sizes, and each symbol scaled by 2 and by 3. Output dims that
// agree at all points are static; the others are symbolic, named for the
// dump by fitting an affine function of one symbol. Sizes read in Python
// (x.shape[0], x.size(), numel()) become SymInt values that carry their
// value at each point and are computed at run time by graph nodes
// (Tensor.size(x, 0), operator.mul(...)), never baked in as constants.
// Where a SymInt would have to become a Python value (a branch, a
// comparison, a range bound, a graph break holding it), or an op fails at
// another point (a view baked to the traced size), kiln throws Specialize
// and traces again with static sizes; the cache then keeps that code static.
//
// Guards of a dynamic dim accept any size >= 2 (0 and 1 stay specialized,
// as broadcasting treats them differently), and 1 where the trace was
// checked there (Note [The size-one point]); only contiguous inputs get
// dynamic dims, and their guards require contiguity at the new size. Two
// dynamic dims of equal size are still two symbols: where the graph needs
// them equal (x + y), torch raises at run time exactly as eager would.

// Note [Dynamic ints]
// A Python int the frame reads through a source (an argument, an
// attribute of an object it was given) is guarded by its value, so code
// that counts in a Python int recompiles whenever the count moves:
// transformers' sliding-window cache layers keep `cumulative_length`, the
// tokens seen so far, and generate() of Mistral or Gemma traced every
// decoding step until the cache limit. As with tensor dims, an int whose
// value alone failed a guard (`GuardSet::size_changes`, dim -1) is listed
// dynamic and the next trace reads it as a SymInt of its own symbol, with
// exact expression `s_k`, sample values scaled or shifted like a size's,
// and 1 at the size-one point: comparisons on it become SizeRelation
// guards, arithmetic becomes graph nodes, a store back to the attribute
// is a side effect computed by the graph. It is guarded by an IntSymbol
// guard (an exact int >= 2, or 1 with the other symbols) and is an object
// input of the graph (`Node::int_symbol`), which size instances key by its
// value and static regions leave to their eager stages. 0 and 1 stay
// specialized. dynamic=True makes int arguments dynamic from the first
// trace, as it does tensor arguments' dims. A comparison on an int whose answer differs between the
// sample points (a count of 2000 against a window of 4096: the points
// 2000, 4000, 6000 straddle it) is guarded with the traced answer rather
// than specialized, where both sides have exact expressions: the graph
// holds on the traced side of the threshold, and the first call past it
// traces the other side once (on tensor sizes alone such a comparison
// still specializes). An int the dynamic trace cannot keep (a branch whose answer
// differs between the sample points: a step counter checked `% 10`) is
// dropped before anything else: the trace is redone with the tensor dims
// alone and the int is listed static for good (`static_ints`), its values
// recompiling as before.

bool DynamicDims::has_ints() const {
  return (all_arguments && !no_int_arguments) ||
         std::any_of(dims.begin(), dims.end(), [](const auto& d) { return d.second < 0; });
}

bool DynamicDims::int_is_dynamic(const std::string& source, bool argument) const {
  if (leading_only) return false;
  if (contains(source, -1)) return true;
  return argument && all_arguments && !no_int_arguments &&
         std::find(static_ints.begin(), static_ints.end(), source) == static_ints.end();
}

DynamicDims DynamicDims::without_ints() const {
  DynamicDims out = *this;
  out.no_int_arguments = true;
  std::erase_if(out.dims, [](const auto& d) { return d.second < 0; });
  for (const auto& [source, dim] : dims) {
    if (dim < 0) out.static_ints.push_back(source);
  }
  return out;
}

bool DynamicDims::contains(const std::string& source, int dim) const {
  return std::find(dims.begin(), dims.end(), std::make_pair(source, dim)) != dims.end();
}

bool DynamicDims::add(const std::string& source, int dim) {
  if (contains(source, dim)) return false;
  if (dim < 0 && std::find(static_ints.begin(), static_ints.end(), source) != static_ints.end()) return false;
  dims.emplace_back(source, dim);
  return true;
}

int DynamicDims::changes_together(const std::string& source, const std::vector<int64_t>& sizes) const {
  if (changed_sizes.empty() || std::binary_search(known_sources.begin(), known_sources.end(), source)) return -1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (std::find(changed_sizes.begin(), changed_sizes.end(), sizes[d]) != changed_sizes.end()) {
      return static_cast<int>(d);
    }
  }
  return -1;
}

// Note [Sizes that change together]
// Automatic dynamic shapes learn a dim from its own change, so a tensor
// that first reaches a code after a size change is traced static and
// costs one more trace when its size moves in turn. generate() is the
// case: its prefill creates the KV cache inside the graph, the first
// decoding step (input length 16 -> 1) meets the cache as a new input of
// length 16, static, and the second step (17) traces a third time, as
// torch.compile without a profile does. Sizes that change at the same
// recompile usually count one thing (the sequence, the batch), and a
// tensor built by the call before from that thing carries its size. So
// the trace after a size change also makes dynamic, in each tensor input
// the trace before did not read as a tensor (absent, or None then), the
// outermost dim whose size is one the changed dims had or have now (sizes
// >= 2; outermost because inner dims are mostly features fixed by
// weights: a head width may equal a prompt length, as in the zoo's GPT-2,
// 16 and 16). A wrong guess costs only the attempts with it: if they
// specialize or break the graph, trace_frame traces again without the
// guesses, as before. Dims kept are learned like the others (the code
// cache and its profile list them).

// Note [Shifted sample points]
// Scaling every symbol at the sample points keeps each size's divisors but
// not the relations between sizes: generate()'s attention mask is one
// longer than its KV cache (s0 == s1 + 1), true at the real sizes and
// false at twice and thrice them, so library code that compares the two
// (transformers' masking utilities) takes another branch at the other
// points and the frame specializes at every step. Where such a trace has
// two or more dynamic dims, trace_frame tries once more with shifted
// points: every symbol gains the same offset (the first symbol's traced
// size, so a single-symbol trace sees the scaled points exactly), which
// keeps every difference of sizes and so every comparison of the form
// s_a - s_b + c. A frame that worked so keeps them for its later traces.
// Fits from shifted points cannot tell symbols apart: a dim two symbols
// explain is named "?", and a comparison of sizes whose expression is not
// exact (input dims, and +, - and * of them) specializes as before.

// Note [The size-one point]
// torch.compile specializes sizes 0 and 1: a dynamic graph guards every
// symbol >= 2, because at 1 broadcasting, squeeze() and code like
// `if batch == 1` may do something else. A serving loop that meets batch 1
// after two other sizes then compiles a third time. kiln checks instead:
// a dynamic trace runs its fakes at one more point, SymbolTable::kOnesPoint,
// where every symbol is 1, and the trace holds at 1 when nothing there
// differs from what the sample points decided: every op runs and keeps its
// result's rank and count, every size read in Python that is constant at
// the sample points is that constant at 1 as well, every comparison of
// sizes gives the traced answer, and every guarded size expression
// evaluates at 1 to the size the fakes have there (a fitted expression
// that is wrong at 1 would let the guard pass wrongly). The first
// difference drops the point for the rest of the trace (logged under
// `dynamic`); it never specializes a trace. A trace that keeps it admits
// 1 in its dynamic dims, with every symbol 1 together, the one combination
// checked (GuardSet::admit_size_one): with batch and length dynamic,
// (1, 1) is admitted, (1, 37) is not. What a graph computes at 1 is right
// by construction: each size runs its own instance, replayed on metas of
// that size (Note [Size instances]), or the symbolic graph's eager replay.

int SymbolTable::new_symbol(int64_t size) {
  if (count() >= kMaxSymbols) return -1;
  if (sizes_.empty()) offset_ = size;
  sizes_.push_back(size);
  return count() - 1;
}

std::string SymbolTable::name_dim(const int64_t* per_point) const {
  const int64_t d1 = per_point[1] - per_point[0];
  const int64_t d2 = per_point[2] - per_point[1];
  if (d1 != d2) return "?";
  int best = -1;
  int64_t best_k = 0;
  for (int i = 0; i < count(); ++i) {
    const int64_t a = sizes_[i];
    const int64_t step = at_point(a, 1) - a;  // what the symbol gains per point
    if (d1 % step != 0) continue;
    const int64_t k = d1 / step;
    const int64_t c = per_point[0] - k * a;
    // Shifted points fit every symbol alike (s1 + 1 is s0 when the two
    // differ by one): which one the dim follows is unknown.
    if (shifted_ && best >= 0) return "?";
    if (k == 1 && c == 0) {
      best = i;
      best_k = k;
      if (!shifted_) break;
    }
    if (best < 0) {
      best = i;
      best_k = k;
    }
  }
  if (best < 0 || best_k == 0) return "?";
  const int64_t c = per_point[0] - best_k * sizes_[best];
  std::string text = best_k == 1 ? "" : std::to_string(best_k) + "*";
  text += "s" + std::to_string(best);
  if (c > 0) text += "+" + std::to_string(c);
  if (c < 0) text += std::to_string(c);
  return text;
}

}  // namespace kiln::tracer
