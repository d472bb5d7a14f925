#include "prims/broadcast.h"

#include <algorithm>
#include <string>

#include "prims/prim_error.h"

namespace kiln::prims {

std::optional<std::vector<int64_t>> try_broadcast_shapes(const std::vector<int64_t>& a,
                                                         const std::vector<int64_t>& b) {
  const size_t ndim = std::max(a.size(), b.size());
  std::vector<int64_t> out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    // Count from the right: dims align at their ends.
    const int64_t size_a = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t size_b = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (size_a != size_b && size_a != 1 && size_b != 1) return std::nullopt;
    out[ndim - 1 - i] = size_a == 1 ? size_b : size_a;
  }
  return out;
}

std::vector<int64_t> broadcast_shapes(const char* op, const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b) {
  std::optional<std::vector<int64_t>> out = try_broadcast_shapes(a, b);
  if (!out) fail(op, "shapes " + format_shape(a) + " and " + format_shape(b) + " cannot broadcast");
  return std::move(*out);
}

std::vector<int64_t> broadcast_shapes(const char* op,
                                      const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<int64_t> out;
  for (const auto& shape : shapes) out = broadcast_shapes(op, out, shape);
  return out;
}

bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return false;
  const size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[offset + i]) return false;
  }
  return true;
}

}  // namespace kiln::prims
