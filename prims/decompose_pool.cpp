// Max pooling that saves its indices for the backward (Note [Max pooling
// with saved indices]).
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

// A tuple of two ints: `values` as torch's _pair spreads it.
base::PyRef pair_of(DecomposeCall& c, const std::vector<int64_t>& values, const char* name) {
  if (values.size() != 1 && values.size() != 2) c.unsupported(std::string(name) + " of other than 1 or 2 ints");
  const int64_t first = values[0], second = values.size() == 2 ? values[1] : values[0];
  return base::PyRef::steal(Py_BuildValue("(LL)", static_cast<long long>(first), static_cast<long long>(second)));
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
  const base::PyRef kernel = pair_of(c, c.ints("kernel_size"), "kernel_size");
  const base::PyRef stride = c.given("stride") && !c.ints("stride").empty() ? pair_of(c, c.ints("stride"), "stride")
                                                                            : kernel;
  const base::PyRef padding = pair_of(c, c.ints("padding"), "padding");
  const base::PyRef dilation = pair_of(c, c.ints("dilation"), "dilation");
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

}  // namespace kiln::prims
