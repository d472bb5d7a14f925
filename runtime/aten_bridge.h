// The one bridge to ATen: reading tensors that Python hands kiln. Only
// aten_bridge.cpp includes ATen/torch headers; everything else sees kiln's
// TensorMeta.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>

#include <string>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::runtime {

// True when `obj` is a torch.Tensor (or subclass) instance.
bool is_tensor(PyObject* obj);

// Fills `out` from a tensor. Precondition: is_tensor(obj).
void read_tensor_meta(PyObject* tensor, graph::TensorMeta* out);

// The guard's hot path: true iff the tensor has exactly `meta`.
// Precondition: is_tensor(tensor).
bool tensor_matches(PyObject* tensor, const graph::TensorMeta& meta);

// The guard's hot path for a tensor with dynamic dims: dims whose
// `dim_symbols` entry is -1 must have meta's size; the others any size >=
// `min_size` (2, or 1 where the trace held at size 1), equal to
// symbols[symbol] when that is bound (>= 0), else binding it; the tensor
// must be contiguous. Other fields as tensor_matches.
bool tensor_matches_dynamic(PyObject* tensor, const graph::TensorMeta& meta,
                            const int8_t* dim_symbols, int64_t* symbols, int64_t min_size);

// Explains in words how the tensor differs from `meta` ("" when it matches).
std::string describe_tensor_mismatch(PyObject* tensor, const graph::TensorMeta& meta);

// True while a torch.func transform (vmap, grad, jvp, functionalize) runs
// on this thread: the tensors Python code sees are its wrappers, which have
// no storage of their own.
bool functorch_transform_active();

// The address of the tensor's first element (data_ptr(), storage offset
// included). Precondition: is_tensor(tensor).
char* tensor_data(PyObject* tensor);

// The raw cudaStream_t of torch's current stream on CUDA device `device`,
// read through c10 without a Python call; false where torch's CUDA backend
// is not loaded or does not answer.
bool current_cuda_stream(int device, void** stream);

// The tensor's version counter (bumped by every in-place write).
// Precondition: is_tensor(tensor).
int64_t tensor_version(PyObject* tensor);

// True when `obj` is exactly an nn.Parameter (not a subclass).
bool is_parameter(PyObject* obj);

// The start of the tensor's storage: two tensors share memory exactly when
// these agree. Precondition: is_tensor(tensor).
const void* tensor_storage(PyObject* tensor);

// A new tensor of `dtype` with `sizes` and `strides` over `base`'s storage
// from its start: not a view of `base` (its own version counter, no _base),
// for a buffer kiln hands from a dead tensor to a new one. Returns null
// with a RuntimeError set when the storage is smaller than the tensor's
// span or `dtype` has no torch equivalent. Precondition: is_tensor(base).
PyObject* tensor_over_storage(PyObject* base, graph::DType dtype, const std::vector<int64_t>& sizes,
                              const std::vector<int64_t>& strides);

// True when the tensor has this dtype and is on this device (index -1:
// any), read without copying its sizes. Precondition: is_tensor(tensor).
bool tensor_has_dtype_on(PyObject* tensor, graph::DType dtype, graph::DeviceType device_type, int device_index);

// True when the tensor has meta's dtype, device, sizes and strides
// (requires_grad is not compared). Precondition: is_tensor(tensor).
bool tensor_has_layout(PyObject* tensor, const graph::TensorMeta& meta);

// A new contiguous, uninitialized CPU tensor; null with a RuntimeError set
// for a dtype torch lacks.
PyObject* new_cpu_tensor(const std::vector<int64_t>& sizes, graph::DType dtype);

// A new uninitialized tensor with these sizes and strides on a CPU or CUDA
// device (index -1: the current one), allocated by torch's allocator
// without a Python call; null with a Python error set when torch refuses.
PyObject* new_strided_tensor(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                             graph::DType dtype, graph::DeviceType device_type, int device_index);

// True when an ATen call from C++ on `obj` does what the Python call
// would: `obj` is a torch.Tensor or an nn.Parameter (no __torch_function__
// of its own) and no torch-function mode is active on this thread.
bool plain_tensor(PyObject* obj);

// `x` (a new reference) with its strides along size-1 dims set to
// `strides`' (where they differ: a view of x's base when x is a view or
// requires grad, else a tensor on x's storage that is no view): torch's layout for a value whose
// other strides already agree; `x` itself when any other stride differs.
// Precondition: is_tensor(x).
PyObject* aten_unit_dim_strides(PyObject* x, const std::vector<int64_t>& strides);

// This thread's autocast state for the CPU and CUDA: whether each is on
// and its lower dtype (torch.get_autocast_dtype). What a graph traced
// under autocast depends on (the Autocast guard).
struct AutocastState {
  bool cpu = false;
  bool cuda = false;
  graph::DType cpu_dtype = graph::DType::BFloat16;
  graph::DType cuda_dtype = graph::DType::Float16;

  bool any() const { return cpu || cuda; }
  bool operator==(const AutocastState&) const = default;
};

// The autocast state in effect now (thread-local TLS reads, no Python).
AutocastState autocast_state();

// Turns CPU and CUDA autocast off for its lifetime and restores the state
// it found: kiln's prim graphs carry autocast's casts explicitly (Note
// [Explicit autocast casts]), so torch ops they call must not cast again.
class AutocastOff {
 public:
  AutocastOff();
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool cpu_;
  bool cuda_;
};

// Keeps the user's saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks,
// save_on_cpu, checkpointing) from firing while kiln runs torch on meta
// fakes: they fire once per saved tensor when the compiled graph runs, as in
// eager, and never on a fake (Note [Saved-tensor hooks while tracing]).
class SavedTensorHooksPaused {
 public:
  SavedTensorHooksPaused();
  ~SavedTensorHooksPaused();
  SavedTensorHooksPaused(const SavedTensorHooksPaused&) = delete;
  SavedTensorHooksPaused& operator=(const SavedTensorHooksPaused&) = delete;

 private:
  bool was_tracing_;
};

// True when autograd is recording (torch.is_grad_enabled()).
bool grad_mode_enabled();

// How many torch-function modes are on this thread's stack (read without
// entering Python).
int64_t torch_function_mode_count();

// torch.get_default_dtype(): the dtype of factories and Python floats.
graph::DType default_dtype();

// Where torch factories put tensors without device=: CPU unless a
// torch.set_default_device (torch >= 2.0) is in effect on this thread.
// Fast when no torch-function mode is active, which is the common case.
void default_device(graph::DeviceType* type, int8_t* index);

// Sets whether autograd records (torch._C._set_grad_enabled).
void set_grad_mode(bool enabled);

}  // namespace kiln::runtime
