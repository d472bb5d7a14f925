#include "inductor/cuda/cuda_kernel_runner.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inductor/cuda/cuda_autotune.h"
#include "runtime/aten_bridge.h"
#include "base/log.h"
#include "base/py_ref.h"

namespace kiln::inductor::cuda {
namespace {

using base::PyRef;

// The raw cudaStream_t of torch's current stream on `device`: through c10
// (runtime::current_cuda_stream: no Python call, which cost about a
// microsecond of every launch's host time), else through
// torch._C._cuda_getCurrentRawStream (what torch.compile's kernels use)
// or, where torch lacks it, torch.cuda.current_stream(device).cuda_stream.
// False with a Python error set when none answers.
bool current_stream(int device, void** stream) {
  if (runtime::current_cuda_stream(device, stream)) return true;
  static PyObject* raw = [] {
    PyObject* c = PyImport_ImportModule("torch._C");
    PyObject* fn = c ? PyObject_GetAttrString(c, "_cuda_getCurrentRawStream") : nullptr;
    Py_XDECREF(c);
    PyErr_Clear();
    return fn;  // kept for the process
  }();
  PyRef handle;
  if (raw != nullptr) {
    handle = PyRef::steal(PyObject_CallFunction(raw, "i", device));
  } else {
    PyRef cuda = PyRef::steal(PyImport_ImportModule("torch.cuda"));
    PyRef current = cuda ? PyRef::steal(PyObject_CallMethod(cuda.get(), "current_stream", "i", device)) : PyRef();
    if (current) handle = PyRef::steal(PyObject_GetAttrString(current.get(), "cuda_stream"));
  }
  if (!handle) return false;
  const unsigned long long value = PyLong_AsUnsignedLongLong(handle.get());
  if (PyErr_Occurred()) return false;
  *stream = reinterpret_cast<void*>(static_cast<uintptr_t>(value));
  return true;
}

// True when `pointer` is aligned for the vector entry's accesses of `dtype`.
bool aligned(const char* pointer, DType dtype, int width) {
  return reinterpret_cast<uintptr_t>(pointer) % static_cast<uintptr_t>(item_size(dtype) * width) == 0;
}

// Checks that inputs[i] are tensors of the kernel's input dtypes on
// `device` and appends their element pointers to `data`. False with a
// TypeError set otherwise.
bool bind_inputs(const Kernel& kernel, int device, PyObject* const* inputs, std::vector<char*>* data) {
  for (size_t i = 0; i < kernel.inputs.size(); ++i) {
    if (!runtime::is_tensor(inputs[i])) {
      PyErr_Format(PyExc_TypeError, "kernel %s: input %zu is not a tensor", kernel.name.c_str(), i);
      return false;
    }
    if (!runtime::tensor_has_dtype_on(inputs[i], kernel.inputs[i].dtype, graph::DeviceType::CUDA, device)) {
      PyErr_Format(PyExc_TypeError, "kernel %s: input %zu must be a %s tensor on cuda:%d", kernel.name.c_str(), i,
                   graph::dtype_name(kernel.inputs[i].dtype), device);
      return false;
    }
    data->push_back(runtime::tensor_data(inputs[i]));
  }
  return true;
}

// A tuple of new tensors for the kernel's outputs on `device` (each with
// its tensor sizes, strides and dtype), their element pointers appended
// to `data`; null with a Python error set.
PyRef allocate_outputs(const Kernel& kernel, int device, std::vector<char*>* data) {
  PyRef result = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(kernel.outputs.size())));
  if (!result) return PyRef();
  for (size_t i = 0; i < kernel.outputs.size(); ++i) {
    const KernelOutput& out = kernel.outputs[i];
    const std::vector<int64_t>& sizes = out.has_tensor_shape ? out.tensor_sizes : kernel.sizes;
    const std::vector<int64_t>& strides = out.has_tensor_shape ? out.tensor_strides : out.strides;
    PyObject* output = runtime::new_strided_tensor(sizes, strides, out.dtype, graph::DeviceType::CUDA, device);
    if (output == nullptr) return PyRef();
    PyTuple_SET_ITEM(result.get(), static_cast<Py_ssize_t>(i), output);
    data->push_back(runtime::tensor_data(output));
  }
  return result;
}

// True when `source` has a vector entry and every operand read or written
// whole (innermost stride 1) through `data` is aligned for it.
bool use_vector(const CudaSource& source, const Kernel& kernel, const std::vector<char*>& data) {
  bool vector = !source.vector.name.empty();
  const int rank = static_cast<int>(kernel.sizes.size());
  for (size_t op = 0; vector && op < data.size(); ++op) {
    const bool input = op < kernel.inputs.size();
    const std::vector<int64_t>& strides = input ? kernel.inputs[op].strides : kernel.outputs[op - kernel.inputs.size()].strides;
    const DType dtype = input ? kernel.inputs[op].dtype : kernel.outputs[op - kernel.inputs.size()].dtype;
    const char* first = data[op] + (input ? kernel.inputs[op].offset * item_size(dtype) : 0);
    if (strides[rank - 1] == 1 && !aligned(first, dtype, source.vector_width)) vector = false;
  }
  return vector;
}

// Untimed launches, then timed ones, per candidate (Note [CUDA autotuning]).
constexpr int kTuneWarmup = 3;
constexpr int kTuneReps = 10;

}  // namespace

PyObject* run_cuda_kernel(const CudaKernel& compiled, const Kernel& kernel, int device, PyObject* const* inputs,
                          const std::vector<int64_t>& words) {
  std::vector<char*> data;
  data.reserve(kernel.inputs.size() + kernel.outputs.size());
  if (!bind_inputs(kernel, device, inputs, &data)) return nullptr;
  PyRef result = allocate_outputs(kernel, device, &data);
  if (!result) return nullptr;
  const CudaSource& source = compiled.source;
  if (source.empty) return result.release();
  // The vector entry when every operand read or written whole is aligned.
  const bool vector = use_vector(source, kernel, data);
  void* stream = nullptr;
  if (!current_stream(device, &stream)) return nullptr;
  // A run-time layout (Note [CUDA run-time layout]): this kernel's words
  // after the pointers, and a grid for its rows (`source` may have been
  // written for another kernel of the same text).
  if (words.size() != layout_word_count(source, kernel)) {
    PyErr_Format(PyExc_RuntimeError, "kiln CUDA kernel %s: %zu layout words for a source that takes %zu",
                 kernel.name.c_str(), words.size(), layout_word_count(source, kernel));
    return nullptr;
  }
  std::vector<void*> args;
  args.reserve(data.size() + words.size());
  for (char*& pointer : data) args.push_back(&pointer);
  for (const int64_t& word : words) args.push_back(const_cast<int64_t*>(&word));
  try {
    const CudaEntry& entry = vector ? source.vector : source.scalar;
    const int64_t grid = source.layout_sizes > 0 ? grid_for_rows(entry, kernel_rows(kernel)) : entry.grid;
    launch_function(compiled.function(device, vector), device, grid, entry.block, stream, args.data());
  } catch (const CudaError& error) {
    PyErr_Format(PyExc_RuntimeError, "kiln CUDA kernel %s: %s", kernel.name.c_str(), error.what());
    return nullptr;
  }
  return result.release();
}

TunedKernel tune_cuda_kernel(const Kernel& kernel, int device, PyObject* const* inputs) {
  TunedKernel result;
  try {
    const std::string arch = device_arch(device);
    const std::string key = autotune_key(kernel, arch);
    if (std::optional<LaunchConfig> chosen = autotune_cache().find(key)) {
      result.kernel = compile_cuda_cached(kernel, arch, *chosen);
      return result;
    }
    std::vector<char*> data;
    if (!bind_inputs(kernel, device, inputs, &data)) return result;
    void* stream = nullptr;
    if (!current_stream(device, &stream)) return result;
    const std::vector<LaunchConfig> candidates = launch_candidates(kernel);
    const bool capturing = stream_capturing(device, stream);
    std::shared_ptr<const CudaKernel> first = compile_cuda_cached(kernel, arch, candidates[0]);
    if (candidates.size() < 2 || first->source.empty || capturing) {
      // Nothing to choose, or nothing can be timed now: the default,
      // chosen for good only when there was nothing to choose.
      result.kernel = std::move(first);
      if (capturing) {
        result.final = false;
      } else {
        autotune_cache().insert(key, candidates[0]);
      }
      return result;
    }
    PyRef scratch = allocate_outputs(kernel, device, &data);  // written by every candidate, then dropped
    if (!scratch) return result;
    std::vector<void*> args;
    for (char*& pointer : data) args.push_back(&pointer);
    std::vector<CandidateTiming> timings;
    std::vector<std::shared_ptr<const CudaKernel>> compiled;
    for (const LaunchConfig& config : candidates) {
      CandidateTiming timing;
      timing.config = config;
      std::shared_ptr<const CudaKernel> candidate;
      try {
        candidate = compile_cuda_cached(kernel, arch, config);
        const bool vector = use_vector(candidate->source, kernel, data);
        const CudaEntry& entry = vector ? candidate->source.vector : candidate->source.scalar;
        timing.ms = time_launches(candidate->function(device, vector), device, entry.grid, entry.block, stream,
                                  args.data(), kTuneWarmup, kTuneReps);
      } catch (const CudaError& error) {
        timing.error = error.what();
        candidate = nullptr;
      }
      timings.push_back(std::move(timing));
      compiled.push_back(std::move(candidate));
    }
    const std::optional<size_t> winner = fastest_candidate(timings);
    KILN_LOG(autotune, "kernel " << kernel.name << " on " << arch << ": " << timings.size() << " candidates\n"
                                 << format_timings(timings, winner));
    const LaunchConfig best = winner ? timings[*winner].config : candidates[0];
    const LaunchConfig chosen = autotune_cache().insert(key, best);
    result.kernel = winner && chosen == best ? compiled[*winner] : compile_cuda_cached(kernel, arch, chosen);
    result.timed = winner.has_value();
  } catch (const CudaError& error) {
    PyErr_Format(PyExc_RuntimeError, "kiln CUDA kernel %s: autotuning: %s", kernel.name.c_str(), error.what());
    result.kernel = nullptr;
  }
  return result;
}

}  // namespace kiln::inductor::cuda
