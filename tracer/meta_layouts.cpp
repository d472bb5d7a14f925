#include "tracer/meta_layouts.h"

#include "base/module_attr.h"
#include "runtime/aten_bridge.h"

namespace kiln::tracer {

// Note [Meta layouts]
// The tracer infers every torch call's result on meta tensors. A few of
// torch's meta kernels give their result another layout than the CPU and
// CUDA kernels that run later, and the fake must have the real strides:
// later views and .stride() read them, and kiln compiles each kernel for
// the layouts of its inputs as the graph records them (an input arriving
// in another layout is copied first, on every call: ConvNeXt's 28 copies
// per step). Known differences, each corrected here:
//   - a Python number raised to a tensor (operator.pow(n, t), torch.pow(n,
//     t), t.__rpow__(n)): contiguous on CPU and CUDA, the exponent's
//     layout on meta;
//   - 2-d convolutions (F.conv2d, F.conv_transpose2d): on CPU (mkldnn and
//     the slow kernels) and CUDA (cuDNN, which torch picks for any conv
//     with a channels-last operand) the result is channels-last when the
//     input or the weight suggests channels-last memory format (float64
//     on CUDA excepted: cuDNN's rule keeps it contiguous); the meta kernel
//     makes it contiguous always. torch.compile's fake tensors correct
//     convolutions the same way (they ask ATen for the backend's format).
//     3-d convolutions keep the meta layout;
//   - F.group_norm of a 4-d input suggesting channels-last: channels-last
//     on CPU (its kernel keeps the input's suggested format), contiguous
//     on CUDA and meta (diffusers' VAE normalizes an attention output
//     transposed back to NCHW, which is NHWC in memory).

namespace {

using base::PyRef;

bool is_number(PyObject* obj) { return PyFloat_Check(obj) || PyLong_Check(obj); }

// number ** tensor, however spelt (`fake_args` hold the call's fakes, its
// numbers as Python numbers).
bool number_base_pow(const std::string& name, PyObject* fake_args) {
  if (PyTuple_GET_SIZE(fake_args) != 2) return false;
  PyObject* first = PyTuple_GET_ITEM(fake_args, 0);
  PyObject* second = PyTuple_GET_ITEM(fake_args, 1);
  if (name == "operator.pow" || name == "torch.pow") return is_number(first) && runtime::is_tensor(second);
  if (name == "Tensor.__rpow__") return runtime::is_tensor(first) && is_number(second);
  return false;
}

bool is_conv2d(const std::string& name) { return name == "F.conv2d" || name == "F.conv_transpose2d"; }

// torch's suggest_memory_format(t) == torch.channels_last.
bool suggests_channels_last(PyObject* tensor, PyObject* channels_last) {
  static PyObject* suggest = base::import_attr("torch._prims_common", "suggest_memory_format");
  if (suggest == nullptr) return false;
  PyRef format = PyRef::steal(PyObject_CallOneArg(suggest, tensor));
  if (!format) {
    PyErr_Clear();
    return false;
  }
  return format.get() == channels_last;
}

}  // namespace

PyRef with_real_layout(const std::string& name, PyObject* fake_args, PyRef result, graph::DeviceType device) {
  if (number_base_pow(name, fake_args)) return PyRef::steal(PyObject_CallMethod(result.get(), "contiguous", nullptr));
  const bool conv = is_conv2d(name) && PyTuple_GET_SIZE(fake_args) >= 2;
  const bool group_norm = name == "F.group_norm" && PyTuple_GET_SIZE(fake_args) >= 1 && device == graph::DeviceType::CPU;
  if (!conv && !group_norm) return result;
  if (device != graph::DeviceType::CPU && device != graph::DeviceType::CUDA) return result;
  static PyObject* torch = PyImport_ImportModule("torch");  // kept for the process
  PyRef channels_last = torch ? PyRef::steal(PyObject_GetAttrString(torch, "channels_last")) : PyRef();
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(result.get(), "dtype"));
  PyRef float64 = torch ? PyRef::steal(PyObject_GetAttrString(torch, "float64")) : PyRef();
  if (!channels_last || !dtype || !float64) return PyRef();
  PyRef ndim = PyRef::steal(PyObject_GetAttrString(result.get(), "ndim"));
  if (!ndim) return PyRef();
  if (PyLong_AsLong(ndim.get()) != 4) return result;
  PyObject* input = PyTuple_GET_ITEM(fake_args, 0);
  if (group_norm) {
    if (!runtime::is_tensor(input) || !suggests_channels_last(input, channels_last.get())) return result;
  } else {
    if (device == graph::DeviceType::CUDA && dtype.get() == float64.get()) return result;
    PyObject* weight = PyTuple_GET_ITEM(fake_args, 1);
    if (!suggests_channels_last(input, channels_last.get()) && !suggests_channels_last(weight, channels_last.get())) {
      return result;
    }
  }
  PyRef method = PyRef::steal(PyObject_GetAttrString(result.get(), "contiguous"));
  PyRef no_args = PyRef::steal(PyTuple_New(0));
  PyRef kwargs = PyRef::steal(PyDict_New());
  if (!method || !no_args || !kwargs || PyDict_SetItemString(kwargs.get(), "memory_format", channels_last.get()) < 0) {
    return PyRef();
  }
  return PyRef::steal(PyObject_Call(method.get(), no_args.get(), kwargs.get()));
}

}  // namespace kiln::tracer
