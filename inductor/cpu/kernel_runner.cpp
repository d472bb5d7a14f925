#include "inductor/cpu/kernel_runner.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "inductor/cpu/thread_pool.h"
#include "inductor/reduction_split.h"

#include "runtime/aten_bridge.h"
#include "base/py_ref.h"

namespace kiln::inductor::cpu {
namespace {

using base::PyRef;

// Note [Huge output pages]
// A large output is fresh memory (glibc maps allocations over 32 MiB, and
// most over 128 KiB, anew and unmaps them when freed), so the kernel's
// first touch of each 4 KiB page faults: ~35 ms for 64 MiB here, more than
// a fused kernel's own work. The machine's transparent huge pages are
// "madvise", so the runner asks for them on the 2 MiB-aligned middle of
// every output of at least 4 MiB before the kernel runs: a 512th of the
// faults. Only the output's own pages are advised; failure is harmless.
void advise_huge_pages(char* data, int64_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes < int64_t{4} << 20) return;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(bytes)) & ~(kHuge - 1);
  if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
}

// The bytes an output tensor spans from its first element.
int64_t output_bytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, DType dtype) {
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    extent += (sizes[d] - 1) * strides[d];
  }
  return extent * item_size(dtype);
}

// Runs a split kernel's steps (Note [Split reductions]): partial steps and
// the store step (when outputs vary along the reduced dims) over the
// chunks on the pool, combine steps on this thread.
void call_split_kernel(const CpuKernel& compiled, const Kernel& kernel, const ReductionSplit& split,
                       char* const* data, int threads) {
  std::vector<int64_t> workspace(static_cast<size_t>(split_workspace_words(split)), 0);
  const size_t operands = kernel.inputs.size() + kernel.outputs.size();
  std::vector<char*> bound(data, data + operands);
  bound.push_back(reinterpret_cast<char*>(workspace.data()));
  const int chunks = static_cast<int>(split.chunks);
  for (int64_t step = 0; step < split_steps(split); ++step) {
    workspace[0] = step;  // read by every call of this step; written between steps only
    const bool store = step == split_steps(split) - 1;
    if (step % 2 == 1 || (store && !split.store_pass)) {
      compiled.fn(bound.data(), kernel.sizes.data(), 0, 1);
    } else {
      parallel_run(chunks, threads, [&](int chunk) { compiled.fn(bound.data(), kernel.sizes.data(), chunk, chunk + 1); });
    }
  }
}

}  // namespace

int torch_thread_count() {
  static PyObject* get = [] {
    PyObject* torch = PyImport_ImportModule("torch");
    PyObject* fn = torch ? PyObject_GetAttrString(torch, "get_num_threads") : nullptr;
    Py_XDECREF(torch);
    return fn;  // kept for the process
  }();
  if (get == nullptr) {
    PyErr_Clear();
    return 1;
  }
  PyRef n = PyRef::steal(PyObject_CallNoArgs(get));
  const long value = n ? PyLong_AsLong(n.get()) : -1;
  if (value < 1) {
    PyErr_Clear();
    return 1;
  }
  return static_cast<int>(value);
}

void call_cpu_kernel(const CpuKernel& compiled, const Kernel& kernel, char* const* data, int threads) {
  // No output point when a kept dim is empty; an empty reduced dim still
  // stores each kept point's reduction of nothing (sum 0, prod 1) and what
  // is computed from it.
  int64_t numel = 1;
  for (int d = 0; d < static_cast<int>(kernel.sizes.size()); ++d) {
    if (kernel.sizes[d] == 0 && !is_reduced(kernel, d)) return;
    numel *= kernel.sizes[d];
  }
  const ReductionSplit split = split_reduction(kernel);
  if (split.chunks > 0) {
    call_split_kernel(compiled, kernel, split, data, threads);
    return;
  }
  // The sizes array, with the strides the code reads at run time (Note
  // [Run-time outer layout]): on the stack for all but the widest kernels.
  const RuntimeOuterDims outer = runtime_outer_dims(kernel, split);
  const size_t words = abi_size_words(kernel, outer);
  int64_t small[64];
  std::vector<int64_t> large(words > 64 ? words : 0);
  int64_t* sizes = words > 64 ? large.data() : small;
  fill_abi_sizes(kernel, outer, sizes);
  const int dim = parallel_dim(kernel);
  const int64_t extent = dim < 0 ? 1 : kernel.sizes[dim];
  if (numel < kParallelMinElements || threads <= 1 || extent <= 1) {
    compiled.fn(data, sizes, 0, extent);
    return;
  }
  // Four ranges per thread, taken as threads come free, so one slowed by
  // the machine's other load does less; boundaries on multiples of 16 when
  // the dim is long enough, so vector loops in the inner dim start aligned.
  int64_t chunks = std::min<int64_t>(int64_t{4} * threads, extent);
  const int64_t align = extent >= 16 * chunks ? 16 : 1;
  const int64_t step = (extent / align + chunks - 1) / chunks * align;
  chunks = (extent + step - 1) / step;
  parallel_run(static_cast<int>(chunks), threads, [&](int chunk) {
    const int64_t begin = chunk * step;
    compiled.fn(data, sizes, begin, std::min(extent, begin + step));
  });
}

PyObject* run_cpu_kernel(const CpuKernel& compiled, const Kernel& kernel, PyObject* const* inputs, int threads,
                         PyObject* const* reuse) {
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
    const KernelOutput& out = kernel.outputs[i];
    const bool own_shape = out.has_tensor_shape;
    const std::vector<int64_t>& sizes = own_shape ? out.tensor_sizes : kernel.sizes;
    const std::vector<int64_t>& strides = own_shape ? out.tensor_strides : out.strides;
    const bool reused = reuse != nullptr && reuse[i] != nullptr;
    if (reused && !runtime::is_tensor(reuse[i])) {
      PyErr_Format(PyExc_TypeError, "kernel %s: the buffer for output %zu is not a tensor", kernel.name.c_str(), i);
      return nullptr;
    }
    PyObject* output = reused ? runtime::tensor_over_storage(reuse[i], out.dtype, sizes, strides)
                              : runtime::new_strided_tensor(sizes, strides, out.dtype, graph::DeviceType::CPU, -1);
    if (output == nullptr) return nullptr;
    PyTuple_SET_ITEM(result.get(), static_cast<Py_ssize_t>(i), output);
    data.push_back(runtime::tensor_data(output));
    // A reused buffer's pages are already mapped (and advised when it was new).
    if (!reused) advise_huge_pages(data.back(), output_bytes(sizes, strides, out.dtype));
  }
  int64_t numel = 1;
  for (int64_t size : kernel.sizes) numel *= size;
  if (threads <= 0) threads = numel >= kParallelMinElements ? torch_thread_count() : 1;
  // The GIL is released: kernels of several Python threads may run at once.
  Py_BEGIN_ALLOW_THREADS
  call_cpu_kernel(compiled, kernel, data.data(), threads);
  Py_END_ALLOW_THREADS
  return result.release();
}

}  // namespace kiln::inductor::cpu
