// Max pooling that saves its indices for the backward (Note [Max pooling
// with saved indices]); average pooling over windows that tile the input
// as a mean (Note [Tiling average pools]).
#include <Python.h>

#include <string>
#include <vector>

#include "prims/decompositions.h"
#include "base/module_attr.h"
#include "base/py_ref.h"

namespace kiln::prims {
namespace {

// Note [Max pooling with saved indices]
// F.max_pool2d stays torch's call, but one whose input needs a gradient
// calls kiln._pooling.max_pool2d, which returns the argmax indices too
// (torch.ops.aten.max_pool2d_with_indices, what torch's max_pool2d runs
// when the input needs a gradient), and whose own gradient
// (`max_pool2d.kiln_vjp`, Note [Extern gradients]) hands them to torch's
// backward kernel, as eager autograd does. As a plain extern, its gradient
// ran the pooling again under autograd in the backward (ResNets' stem: 1 ms
// of a small CPU training step). Both calls are kiln's own and functional:
// pure. Without a gradient the call stays F.max_pool2d (no indices kept).

// A pooling argument as torch's _pair spreads it: two ints from one or two;
// `fallback` for None or an empty sequence (stride defaults to the kernel).
std::vector<int64_t> pair_of(DecomposeCall& c, const char* name, const std::vector<int64_t>& fallback = {}) {
  std::vector<int64_t> values = c.given(name) ? c.ints(name) : fallback;
  if (values.empty()) values = fallback;
  if (values.size() == 1) values.push_back(values[0]);
  if (values.size() != 2) c.unsupported(std::string(name) + " of other than 1 or 2 ints");
  return values;
}

base::PyRef as_tuple(const std::vector<int64_t>& pair) {
  return base::PyRef::steal(Py_BuildValue("(LL)", static_cast<long long>(pair[0]), static_cast<long long>(pair[1])));
}

}  // namespace

std::vector<int> decompose_MaxPool2d(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  if (!b.meta(x).requires_grad) c.unsupported("no gradient: torch's call keeps no indices");
  if (c.given("return_indices") && c.flag("return_indices")) c.unsupported("return_indices");
  static PyObject* pool = [] {
    PyObject* found = base::import_attr("kiln._pooling", "max_pool2d");
    if (!found) PyErr_Clear();
    return found;
  }();
  if (!pool) c.unsupported("kiln._pooling does not import");
  const std::vector<int64_t> kernel_size = pair_of(c, "kernel_size");
  const base::PyRef kernel = as_tuple(kernel_size);
  const base::PyRef stride = as_tuple(pair_of(c, "stride", kernel_size));
  const base::PyRef padding = as_tuple(pair_of(c, "padding"));
  const base::PyRef dilation = as_tuple(pair_of(c, "dilation"));
  const bool ceil_mode = c.flag("ceil_mode");
  graph::TensorMeta out = c.traced(0);
  out.requires_grad = true;
  graph::TensorMeta indices = c.traced(0);
  indices.dtype = DType::Int64;
  indices.requires_grad = false;
  std::vector<graph::Arg> args = {graph::Arg::of_node(x),
                                  graph::Arg::of_constant(kernel.get()),
                                  graph::Arg::of_constant(stride.get()),
                                  graph::Arg::of_constant(padding.get()),
                                  graph::Arg::of_constant(dilation.get()),
                                  graph::Arg::of_constant(ceil_mode ? Py_True : Py_False)};
  return {b.extern_call(pool, "kiln._pooling.max_pool2d", std::move(args), {}, {out, indices}, /*pure=*/true,
                        /*fresh=*/true)[0]};
}

// Note [Tiling average pools]
// F.avg_pool2d whose windows tile the input (stride = kernel, no padding:
// DenseNet's transitions, ResNet-D's shortcut pools) is each window's sum
// divided by its size (or divisor_override), as torch's kernel computes
// it: the input split into [N, C, H/kh, kh, W/kw, kw] (a view; rows and
// columns past the last whole window dropped, as floor mode drops them)
// and summed over the window dims. As prims the pool fuses with its
// neighbours and its gradient is kiln's (the window's share broadcast
// back), where the extern ran again under autograd in the backward.
// Overlapping or padded windows stay torch's call.
std::vector<int> decompose_AvgPool2d(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  const graph::TensorMeta xm = b.meta(x);  // a copy: new nodes move the metas
  if (xm.sizes.size() != 4 || !is_floating(xm.dtype)) c.unsupported("avg_pool2d of other than a 4-d float input");
  const std::vector<int64_t> kernel = pair_of(c, "kernel_size");
  if (pair_of(c, "stride", kernel) != kernel) c.unsupported("windows that do not tile the input");
  if (pair_of(c, "padding") != std::vector<int64_t>{0, 0}) c.unsupported("padding");
  const graph::TensorMeta& traced = c.traced(0);
  const int64_t n = xm.sizes[0], channels = xm.sizes[1];
  const int64_t rows = traced.sizes[2], cols = traced.sizes[3];
  if (rows * kernel[0] > xm.sizes[2] || cols * kernel[1] > xm.sizes[3]) c.unsupported("ceil_mode windows past the input");
  int value = x;
  if (rows * kernel[0] != xm.sizes[2]) value = b.slice(value, 2, 0, rows * kernel[0]);
  if (cols * kernel[1] != xm.sizes[3]) value = b.slice(value, 3, 0, cols * kernel[1]);
  // 16-bit inputs sum and divide in float32, rounded once, as torch's kernel.
  value = to_dtype(b, b.reshape(value, {n, channels, rows, kernel[0], cols, kernel[1]}), opmath_dtype(xm.dtype));
  const int sum = b.reduce(Prim::Sum, value, {3, 5}, false);
  const double divisor = c.given("divisor_override") ? static_cast<double>(c.integer("divisor_override"))
                                                     : static_cast<double>(kernel[0] * kernel[1]);
  const int out = b.binary(Prim::Div, PrimArg::of_value(sum), PrimArg::of_scalar(Scalar::of_float(divisor)));
  return {in_traced_layout(b, to_dtype(b, out, xm.dtype), traced)};
}

}  // namespace kiln::prims
