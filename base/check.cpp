#include "base/check.h"

namespace kiln::base {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(std::string(file) + ":" + std::to_string(line) + ": kiln invariant failed: " + condition +
                      (message.empty() ? "" : ": " + message));
}

}  // namespace kiln::base
