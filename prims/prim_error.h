// PrimError: the one exception type of prims/, raised when inputs break an
// op's rules (shapes that do not broadcast, a dim out of range, a dtype the
// op rejects). Messages name the op and what was wrong, in torch's spirit.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::prims {

// A user-facing error in an op's inputs.
class PrimError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Formats a shape as torch prints it in errors: "[2, 3]".
std::string format_shape(const std::vector<int64_t>& shape);

// Throws PrimError("<op>: <message>"). Callers test first, so messages are
// only built on the error path.
[[noreturn]] void fail(const char* op, const std::string& message);

}  // namespace kiln::prims
