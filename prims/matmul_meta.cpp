#include "prims/matmul_meta.h"

#include <string>
#include <vector>

#include "prims/broadcast.h"
#include "prims/common_meta.h"
#include "prims/prim_error.h"

namespace kiln::prims {

graph::TensorMeta matmul_meta(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  const size_t rank_a = a.sizes.size(), rank_b = b.sizes.size();
  if (rank_a < 2 || rank_b < 2) {
    fail("matmul", "expected operands with at least 2 dims, got shapes " + format_shape(a.sizes) +
                       " and " + format_shape(b.sizes));
  }
  if (a.dtype != b.dtype) {
    fail("matmul", std::string("expected both operands to have the same dtype, got ") +
                       graph::dtype_name(a.dtype) + " and " + graph::dtype_name(b.dtype));
  }
  if (a.dtype == graph::DType::Bool) fail("matmul", "not supported for bool");
  const int64_t n = a.sizes[rank_a - 2], k = a.sizes[rank_a - 1];
  const int64_t k2 = b.sizes[rank_b - 2], m = b.sizes[rank_b - 1];
  if (k != k2) {
    fail("matmul", "shapes cannot be multiplied (" + std::to_string(n) + "x" + std::to_string(k) +
                       " and " + std::to_string(k2) + "x" + std::to_string(m) + ")");
  }
  const std::vector<int64_t> batch_a(a.sizes.begin(), a.sizes.end() - 2);
  const std::vector<int64_t> batch_b(b.sizes.begin(), b.sizes.end() - 2);
  graph::TensorMeta out;
  same_device("matmul", {&a, &b}, &out);
  out.sizes = broadcast_shapes("matmul", batch_a, batch_b);
  out.sizes.push_back(n);
  out.sizes.push_back(m);
  out.strides = graph::contiguous_strides(out.sizes);
  out.dtype = a.dtype;
  out.requires_grad = result_requires_grad({&a, &b}, out.dtype);
  return out;
}

}  // namespace kiln::prims
