#include "inductor/cpu/kernel_runner.h"

#include <string>
#include <vector>

#include "runtime/aten_bridge.h"
#include "runtime/py_ref.h"

namespace kiln::inductor::cpu {
namespace {

using runtime::PyRef;

// A tuple of Python ints.
PyRef int_tuple(const std::vector<int64_t>& values) {
  PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(values.size())));
  if (!tuple) return tuple;
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* item = PyLong_FromLongLong(values[i]);
    if (item == nullptr) return PyRef();
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), item);
  }
  return tuple;
}

// torch.empty_strided(sizes, strides, dtype=dtype): a new reference or null.
PyObject* empty_strided(const std::vector<int64_t>& sizes, const KernelOutput& output) {
  static PyObject* torch = PyImport_ImportModule("torch");  // kept for the process
  if (torch == nullptr) return nullptr;
  PyRef function = PyRef::steal(PyObject_GetAttrString(torch, "empty_strided"));
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(torch, graph::dtype_name(output.dtype)));
  PyRef size_tuple = int_tuple(sizes), stride_tuple = int_tuple(output.strides);
  if (!function || !dtype || !size_tuple || !stride_tuple) return nullptr;
  PyRef args = PyRef::steal(PyTuple_Pack(2, size_tuple.get(), stride_tuple.get()));
  PyRef kwargs = PyRef::steal(PyDict_New());
  if (!args || !kwargs || PyDict_SetItemString(kwargs.get(), "dtype", dtype.get()) < 0) return nullptr;
  return PyObject_Call(function.get(), args.get(), kwargs.get());
}

}  // namespace

PyObject* run_cpu_kernel(const CpuKernel& compiled, const Kernel& kernel, PyObject* const* inputs) {
  std::vector<char*> data;
  for (size_t i = 0; i < kernel.inputs.size(); ++i) {
    graph::TensorMeta meta;
    if (!runtime::is_tensor(inputs[i])) {
      PyErr_Format(PyExc_TypeError, "kernel %s: input %zu is not a tensor", kernel.name.c_str(), i);
      return nullptr;
    }
    runtime::read_tensor_meta(inputs[i], &meta);
    if (meta.dtype != kernel.inputs[i].dtype || meta.device_type != graph::DeviceType::CPU) {
      PyErr_Format(PyExc_TypeError, "kernel %s: input %zu must be a CPU %s tensor", kernel.name.c_str(), i,
                   graph::dtype_name(kernel.inputs[i].dtype));
      return nullptr;
    }
    data.push_back(runtime::tensor_data(inputs[i]));
  }
  PyRef result = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(kernel.outputs.size())));
  if (!result) return nullptr;
  for (size_t i = 0; i < kernel.outputs.size(); ++i) {
    PyObject* output = empty_strided(kernel.sizes, kernel.outputs[i]);
    if (output == nullptr) return nullptr;
    PyTuple_SET_ITEM(result.get(), static_cast<Py_ssize_t>(i), output);
    data.push_back(runtime::tensor_data(output));
  }
  int64_t numel = 1;
  for (int64_t size : kernel.sizes) numel *= size;
  // The loops are bounded by sizes; the GIL is released so kernels of
  // several threads may run at once.
  if (numel > 0) {
    Py_BEGIN_ALLOW_THREADS
    compiled.fn(data.data(), kernel.sizes.data());
    Py_END_ALLOW_THREADS
  }
  return result.release();
}

}  // namespace kiln::inductor::cpu
