// Note [Own metas]: result metadata of common torch calls computed by kiln
// during tracing, instead of by calling them on meta tensors. torch 2 runs
// many meta kernels (addmm for F.linear, relu, ...) as Python decompositions
// under torch._disable_dynamo, whose first call imports torch._dynamo and
// with it ~900 modules (sympy, torch.distributed, torch.onnx): seconds of a
// process's first compile. Only plain cases are answered (float tensors,
// contiguous inputs, no options that change the result's layout); anything
// else, every error included, goes to torch's meta path and its message.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tracer/value.h"

namespace kiln::tracer {

// What a call returns, as the fields of a meta tensor to make.
struct OwnMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  graph::DType dtype = graph::DType::Float32;
  bool requires_grad = false;
  const Value* like = nullptr;  // an argument with the result's dtype (its fake gives the dtype object)
};

// Unary pointwise ops that keep a float input's dtype (and its shape), as
// the tracer names them.
const std::set<std::string>& unary_float_ops();

// The result metadata of `name(*args, **kwargs)` when kiln has its own rule
// for this case, else nothing. `grad_mode`: whether grad mode is on.
std::optional<OwnMeta> own_meta(const std::string& name, const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                                bool grad_mode);

}  // namespace kiln::tracer
