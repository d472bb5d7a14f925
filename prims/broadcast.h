// Broadcasting of shapes, as torch aligns them: trailing dims match when
// equal or when one of them is 1.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::prims {

// The broadcast of `a` and `b`. Throws PrimError
// ("<op>: shapes [2, 3] and [4] cannot broadcast ...") when they do not.
std::vector<int64_t> broadcast_shapes(const char* op, const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b);

// The broadcast of `a` and `b`, or nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> try_broadcast_shapes(const std::vector<int64_t>& a,
                                                         const std::vector<int64_t>& b);

// The broadcast of all `shapes` (the empty shape when there are none).
std::vector<int64_t> broadcast_shapes(const char* op,
                                      const std::vector<std::vector<int64_t>>& shapes);

// True when `from` broadcasts to exactly `to` (expand would accept it).
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to);

}  // namespace kiln::prims
