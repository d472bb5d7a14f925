#include "prims/cat_meta.h"

#include <string>

#include "prims/common_meta.h"
#include "prims/layout.h"
#include "prims/prim_error.h"
#include "prims/type_promotion.h"

namespace kiln::prims {
namespace {

// torch lets a 1-dim empty tensor join anything (legacy behaviour).
bool skipped(const graph::TensorMeta& t) { return t.sizes.size() == 1 && t.sizes[0] == 0; }

// The memory format of the output: the inputs' common suggestion, contiguous
// as soon as one input suggests contiguous or two disagree.
MemoryFormat output_format(const std::vector<graph::TensorMeta>& tensors) {
  std::optional<MemoryFormat> format;
  for (const graph::TensorMeta& t : tensors) {
    const MemoryFormat f = suggest_memory_format(t.sizes, t.strides);
    if (f == MemoryFormat::Contiguous || (format && *format != f)) return MemoryFormat::Contiguous;
    format = f;
  }
  return *format;
}

}  // namespace

graph::TensorMeta cat_meta(const std::vector<graph::TensorMeta>& tensors, int64_t dim) {
  if (tensors.empty()) fail("cat", "expected a non-empty list of tensors");
  std::vector<Operand> operands;
  std::vector<const graph::TensorMeta*> pointers;
  const graph::TensorMeta* valid = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].sizes.empty()) {
      fail("cat", "zero-dimensional tensor (at position " + std::to_string(i) +
                      ") cannot be concatenated");
    }
    operands.push_back(Operand::of(tensors[i]));
    pointers.push_back(&tensors[i]);
    if (valid == nullptr && !skipped(tensors[i])) valid = &tensors[i];
  }
  graph::TensorMeta out;
  same_device("cat", pointers, &out);
  out.dtype = result_type("cat", operands);
  if (valid == nullptr) {
    out.sizes = {0};
  } else {
    const int64_t ndim = static_cast<int64_t>(valid->sizes.size());
    const int64_t d = wrap_dim("cat", dim, ndim);
    int64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const graph::TensorMeta& t = tensors[i];
      if (skipped(t)) continue;
      if (static_cast<int64_t>(t.sizes.size()) != ndim) {
        fail("cat", "tensors must have the same number of dimensions: got " +
                        std::to_string(ndim) + " and " + std::to_string(t.sizes.size()));
      }
      for (int64_t k = 0; k < ndim; ++k) {
        if (k != d && t.sizes[k] != valid->sizes[k]) {
          fail("cat", "sizes of tensors must match except in dimension " + std::to_string(d) +
                          ": expected size " + std::to_string(valid->sizes[k]) + " but got size " +
                          std::to_string(t.sizes[k]) + " for tensor number " + std::to_string(i) +
                          " in the list");
        }
      }
      total += t.sizes[d];
    }
    out.sizes = valid->sizes;
    out.sizes[d] = total;
  }
  out.strides = strides_for(out.sizes, output_format(tensors));
  out.requires_grad = result_requires_grad(pointers, out.dtype);
  return out;
}

}  // namespace kiln::prims
