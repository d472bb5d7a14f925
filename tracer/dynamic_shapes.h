// Dynamic sizes: which input dims a trace leaves symbolic, the symbols that
// name them, and the sample points at which a dynamic trace runs its fakes.
// See Note [Dynamic shapes] in dynamic_shapes.cpp.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kiln::tracer {

// The input dims a trace should treat as dynamic, named by source text and
// dim ("L['x']", 0), as the code cache learned them from size changes; dim
// -1 names the int at the source (Note [Dynamic ints] in dynamic_shapes.cpp).
struct DynamicDims {
  std::vector<std::pair<std::string, int>> dims;
  // Ints a dynamic trace could not keep symbolic: never added again.
  std::vector<std::string> static_ints;
  // dynamic=True: every dim of every tensor argument of the frame, and
  // every int argument (Note [Dynamic ints]) unless `no_int_arguments`.
  bool all_arguments = false;
  bool no_int_arguments = false;
  // Only dim 0 of what the fields above name: the fallback when a trace
  // with every listed dim dynamic had to specialize.
  bool leading_only = false;
  // Sample points shift every symbol by one offset instead of scaling each
  // (Note [Shifted sample points]).
  bool shifted_points = false;

  // For the trace after a size change only (Note [Sizes that change
  // together]): the sizes the changed dims had and have now, and the
  // sources the trace before it read as tensors, sorted.
  std::vector<int64_t> changed_sizes;
  std::vector<std::string> known_sources;

  bool empty() const { return dims.empty() && !all_arguments && changed_sizes.empty(); }
  // True when some listed dim is an int (dim -1), or int arguments are.
  bool has_ints() const;
  // True when the int at `source` (an argument when `argument`) is dynamic.
  bool int_is_dynamic(const std::string& source, bool argument) const;
  // These dims without the ints, which are listed static from now on.
  DynamicDims without_ints() const;
  // True when dim `dim` of the tensor at `source` is listed.
  bool contains(const std::string& source, int dim) const;
  // Adds a dim unless listed already (or an int listed static); true when
  // it was new.
  bool add(const std::string& source, int dim);
  // The dim of a tensor at `source` with `sizes` that changes with the
  // changed dims: the outermost dim whose size is a changed one, when the
  // trace before read no tensor there; -1 otherwise.
  int changes_together(const std::string& source, const std::vector<int64_t>& sizes) const;
};

// Thrown when a dynamic size would have to become a plain Python value (a
// branch on it, an op that only works at the traced size): the trace is
// abandoned and redone with static sizes.
class Specialize : public std::runtime_error {
 public:
  explicit Specialize(const std::string& why) : std::runtime_error(why) {}
  // "file:line" of the innermost traced instruction that specialized (set
  // by the frame loop), for the log line.
  std::string location;
  // The trace had dynamic ints when it specialized (Note [Dynamic ints]):
  // without them it may not.
  bool used_ints = false;
};

// The symbols of one trace, one per dynamic input dim. Dims never share a
// symbol: a graph holds no Python decision taken on sizes (those
// specialize), so it stays valid when two equal sizes part.
class SymbolTable {
 public:
  // Most symbols one trace may have; further dims stay static.
  static constexpr int kMaxSymbols = 16;
  // Sample points of a dynamic trace: the real sizes, then every symbol
  // scaled by 2 and by 3 (scaling keeps divisibility by the real size), or
  // shifted by one and two offsets (Note [Shifted sample points]).
  static constexpr int kPoints = 3;
  // The point after them, where every symbol is 1: it names no size and
  // fits nothing, it only checks that the trace holds there too (Note
  // [The size-one point]).
  static constexpr int kOnesPoint = kPoints;

  // Shifted points from here on; the offset is the first symbol's size.
  void use_shifted_points() { shifted_ = true; }

  // Returns a new symbol for a dynamic dim of traced size `size`, or -1
  // when the table is full.
  int new_symbol(int64_t size);
  int count() const { return static_cast<int>(sizes_.size()); }
  // The traced size of each symbol.
  const std::vector<int64_t>& sizes() const { return sizes_; }
  // Value of a symbol of traced size `size` at sample point `point`.
  int64_t at_point(int64_t size, int point) const {
    if (point == kOnesPoint) return 1;
    return shifted_ ? size + point * offset_ : size * (point + 1);
  }
  // What every symbol gains per point when shifted; 0 when points scale.
  int64_t point_offset() const { return shifted_ ? offset_ : 0; }
  // Names a dim from its sizes at the sample points: "s0", "2*s0+1", or
  // "?" when no symbol explains it affinely.
  std::string name_dim(const int64_t* per_point) const;

 private:
  std::vector<int64_t> sizes_;  // traced size per symbol
  bool shifted_ = false;
  int64_t offset_ = 0;
};

}  // namespace kiln::tracer
