// KILN_CHECK: an internal invariant. A failed check is a bug in kiln, not
// in the user's program: it throws InternalError naming the file, line,
// condition and what was expected, which the compile driver reports (a
// graph kiln cannot build runs eagerly, with a log line) instead of
// crashing the host process.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln::base {

// A broken internal invariant (a kiln bug).
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

// Throws InternalError "file:line: kiln invariant failed: condition: message".
[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);

}  // namespace kiln::base

// KILN_CHECK(condition, message-stream): `message` may use <<.
#define KILN_CHECK(condition, message)                                                     \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::ostringstream kiln_check_message_;                                              \
      kiln_check_message_ << message;                                                      \
      ::kiln::base::check_failed(__FILE__, __LINE__, #condition, kiln_check_message_.str()); \
    }                                                                                      \
  } while (0)
