#include "prims/prim_error.h"

namespace kiln::prims {

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

void fail(const char* op, const std::string& message) {
  throw PrimError(std::string(op) + ": " + message);
}

}  // namespace kiln::prims
