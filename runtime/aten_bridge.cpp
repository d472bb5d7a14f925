#include "runtime/aten_bridge.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SavedTensorHooks.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/version.h>

#include <optional>
#include <sstream>

#include "base/py_ref.h"

namespace kiln::runtime {

using base::PyRef;
namespace {

using graph::DeviceType;
using graph::DType;
using graph::TensorMeta;

DType to_kiln_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Bool: return DType::Bool;
    case c10::ScalarType::Byte: return DType::UInt8;
    case c10::ScalarType::Char: return DType::Int8;
    case c10::ScalarType::Short: return DType::Int16;
    case c10::ScalarType::Int: return DType::Int32;
    case c10::ScalarType::Long: return DType::Int64;
    case c10::ScalarType::Half: return DType::Float16;
    case c10::ScalarType::BFloat16: return DType::BFloat16;
    case c10::ScalarType::Float: return DType::Float32;
    case c10::ScalarType::Double: return DType::Float64;
    case c10::ScalarType::ComplexFloat: return DType::Complex64;
    case c10::ScalarType::ComplexDouble: return DType::Complex128;
    default: return DType::Other;
  }
}

std::optional<c10::ScalarType> to_scalar_type(DType type) {
  switch (type) {
    case DType::Bool: return c10::ScalarType::Bool;
    case DType::UInt8: return c10::ScalarType::Byte;
    case DType::Int8: return c10::ScalarType::Char;
    case DType::Int16: return c10::ScalarType::Short;
    case DType::Int32: return c10::ScalarType::Int;
    case DType::Int64: return c10::ScalarType::Long;
    case DType::Float16: return c10::ScalarType::Half;
    case DType::BFloat16: return c10::ScalarType::BFloat16;
    case DType::Float32: return c10::ScalarType::Float;
    case DType::Float64: return c10::ScalarType::Double;
    case DType::Complex64: return c10::ScalarType::ComplexFloat;
    case DType::Complex128: return c10::ScalarType::ComplexDouble;
    default: return std::nullopt;
  }
}

DeviceType to_kiln_device(c10::DeviceType type) {
  switch (type) {
    case c10::DeviceType::CPU: return DeviceType::CPU;
    case c10::DeviceType::CUDA: return DeviceType::CUDA;
    case c10::DeviceType::Meta: return DeviceType::Meta;
    default: return DeviceType::Other;
  }
}

template <typename A, typename B>
bool same_values(const A& a, const B& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

template <typename A>
std::string format_values(const A& values) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << ")";
  return out.str();
}

}  // namespace

bool is_tensor(PyObject* obj) {
  if (Py_TYPE(obj) == reinterpret_cast<PyTypeObject*>(THPVariableClass)) return true;
  // torch's check calls isinstance, which runs Python and throws on error.
  try {
    return THPVariable_Check(obj);
  } catch (...) {
    PyErr_Clear();
    return false;
  }
}

void read_tensor_meta(PyObject* tensor, TensorMeta* out) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  auto sizes = t.sizes();
  auto strides = t.strides();
  out->sizes.assign(sizes.begin(), sizes.end());
  out->strides.assign(strides.begin(), strides.end());
  out->dtype = to_kiln_dtype(t.scalar_type());
  out->device_type = to_kiln_device(t.device().type());
  out->device_index = static_cast<int8_t>(t.device().index());
  out->requires_grad = t.requires_grad();
}

bool tensor_has_dtype_on(PyObject* tensor, DType dtype, graph::DeviceType device_type, int device_index) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  return to_kiln_dtype(t.scalar_type()) == dtype && to_kiln_device(t.device().type()) == device_type &&
         (device_index < 0 || t.device().index() == device_index);
}

bool tensor_matches(PyObject* tensor, const TensorMeta& meta) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  return t.requires_grad() == meta.requires_grad &&
         to_kiln_dtype(t.scalar_type()) == meta.dtype &&
         to_kiln_device(t.device().type()) == meta.device_type &&
         t.device().index() == meta.device_index &&
         same_values(t.sizes(), meta.sizes) && same_values(t.strides(), meta.strides);
}

bool tensor_matches_dynamic(PyObject* tensor, const TensorMeta& meta, const int8_t* dim_symbols,
                            int64_t* symbols, int64_t min_size) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  if (t.requires_grad() != meta.requires_grad || to_kiln_dtype(t.scalar_type()) != meta.dtype ||
      to_kiln_device(t.device().type()) != meta.device_type ||
      t.device().index() != meta.device_index) {
    return false;
  }
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  if (sizes.size() != meta.sizes.size()) return false;
  // Contiguous, with the exact strides (torch's is_contiguous() ignores
  // strides of size-1 dims, which the static guard compares).
  int64_t expected_stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    const int8_t symbol = dim_symbols[i];
    const int64_t size = sizes[i];
    if (symbol < 0) {
      if (size != meta.sizes[i]) return false;
    } else {
      if (size < min_size) return false;
      if (symbols[symbol] < 0) {
        symbols[symbol] = size;
      } else if (symbols[symbol] != size) {
        return false;
      }
    }
    if (strides[i] != expected_stride) return false;
    expected_stride *= size > 1 ? size : 1;
  }
  return true;
}

std::string describe_tensor_mismatch(PyObject* tensor, const TensorMeta& meta) {
  TensorMeta actual;
  read_tensor_meta(tensor, &actual);
  std::ostringstream out;
  if (actual.dtype != meta.dtype) {
    out << "dtype " << graph::dtype_name(actual.dtype) << " != expected "
        << graph::dtype_name(meta.dtype);
  } else if (actual.device_type != meta.device_type || actual.device_index != meta.device_index) {
    out << "device " << graph::device_name(actual.device_type, actual.device_index)
        << " != expected " << graph::device_name(meta.device_type, meta.device_index);
  } else if (actual.sizes != meta.sizes) {
    out << "sizes " << format_values(actual.sizes) << " != expected " << format_values(meta.sizes);
  } else if (actual.strides != meta.strides) {
    out << "strides " << format_values(actual.strides) << " != expected "
        << format_values(meta.strides);
  } else if (actual.requires_grad != meta.requires_grad) {
    out << "requires_grad " << (actual.requires_grad ? "True" : "False") << " != expected "
        << (meta.requires_grad ? "True" : "False");
  }
  return out.str();
}

// functorch includes its front-mode key on the thread while its layer
// stack is not empty (DynamicLayer.cpp); its own header needs JSON headers
// torch's wheel does not ship.
bool functorch_transform_active() {
  return c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerFrontMode);
}

char* tensor_data(PyObject* tensor) {
  return static_cast<char*>(THPVariable_Unpack(tensor).data_ptr());
}

const void* tensor_storage(PyObject* tensor) { return THPVariable_Unpack(tensor).storage().data(); }

PyObject* tensor_over_storage(PyObject* base, DType dtype, const std::vector<int64_t>& sizes,
                              const std::vector<int64_t>& strides) {
  const at::Tensor& t = THPVariable_Unpack(base);
  const std::optional<c10::ScalarType> scalar = to_scalar_type(dtype);
  if (!scalar) {
    PyErr_Format(PyExc_RuntimeError, "kiln: no torch dtype for %s", graph::dtype_name(dtype));
    return nullptr;
  }
  const caffe2::TypeMeta meta = c10::scalarTypeToTypeMeta(*scalar);
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) extent = 0;
    if (extent > 0) extent += (sizes[d] - 1) * strides[d];
  }
  const int64_t need = extent * static_cast<int64_t>(meta.itemsize());
  if (static_cast<int64_t>(t.storage().nbytes()) < need) {
    PyErr_Format(PyExc_RuntimeError, "kiln: a reused buffer of %lld bytes is smaller than the %lld bytes needed",
                 static_cast<long long>(t.storage().nbytes()), static_cast<long long>(need));
    return nullptr;
  }
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(t.storage()), t.key_set(), meta);
  impl->set_sizes_and_strides(sizes, strides);
  return THPVariable_Wrap(at::Tensor(std::move(impl)));
}

bool tensor_has_layout(PyObject* tensor, const TensorMeta& meta) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  return to_kiln_dtype(t.scalar_type()) == meta.dtype && to_kiln_device(t.device().type()) == meta.device_type &&
         t.device().index() == meta.device_index && same_values(t.sizes(), meta.sizes) &&
         same_values(t.strides(), meta.strides);
}

PyObject* new_cpu_tensor(const std::vector<int64_t>& sizes, DType dtype) {
  const std::optional<c10::ScalarType> scalar = to_scalar_type(dtype);
  if (!scalar) {
    PyErr_Format(PyExc_RuntimeError, "kiln: no torch dtype for %s", graph::dtype_name(dtype));
    return nullptr;
  }
  return THPVariable_Wrap(at::empty(sizes, at::TensorOptions().dtype(*scalar)));
}

PyObject* new_strided_tensor(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, DType dtype,
                             graph::DeviceType device_type, int device_index) {
  const std::optional<c10::ScalarType> scalar = to_scalar_type(dtype);
  if (!scalar) {
    PyErr_Format(PyExc_RuntimeError, "kiln: no torch dtype for %s", graph::dtype_name(dtype));
    return nullptr;
  }
  if (device_type != graph::DeviceType::CPU && device_type != graph::DeviceType::CUDA) {
    PyErr_SetString(PyExc_RuntimeError, "kiln: new tensors go on the CPU or a CUDA device");
    return nullptr;
  }
  const c10::Device device(device_type == graph::DeviceType::CPU ? c10::DeviceType::CPU : c10::DeviceType::CUDA,
                           static_cast<c10::DeviceIndex>(device_index));
  try {
    return THPVariable_Wrap(at::empty_strided(sizes, strides, at::TensorOptions().dtype(*scalar).device(device)));
  } catch (const std::exception& error) {
    PyErr_Format(PyExc_RuntimeError, "kiln: cannot allocate a %s tensor: %s", graph::dtype_name(dtype), error.what());
    return nullptr;
  }
}

bool current_cuda_stream(int device, void** stream) {
  try {
    if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return false;
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    *stream = impl->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device))).native_handle();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

int64_t tensor_version(PyObject* tensor) { return static_cast<int64_t>(THPVariable_Unpack(tensor)._version()); }

namespace {

PyTypeObject* parameter_type() {
  static PyTypeObject* parameter = [] {
    PyObject* module = PyImport_ImportModule("torch.nn.parameter");
    PyObject* type = module ? PyObject_GetAttrString(module, "Parameter") : nullptr;
    Py_XDECREF(module);
    PyErr_Clear();
    return reinterpret_cast<PyTypeObject*>(type);  // kept for the process
  }();
  return parameter;
}

}  // namespace

bool is_parameter(PyObject* obj) { return parameter_type() != nullptr && Py_TYPE(obj) == parameter_type(); }

bool plain_tensor(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  if (type != reinterpret_cast<PyTypeObject*>(THPVariableClass) && type != parameter_type()) return false;
  return at::impl::PythonTorchFunctionTLS::stack_len() == 0;
}

PyObject* aten_unit_dim_strides(PyObject* x, const std::vector<int64_t>& strides) {
  const at::Tensor& t = THPVariable_Unpack(x);
  const auto have = t.strides();
  const auto sizes = t.sizes();
  bool differs = false;
  if (have.size() == strides.size()) {
    for (size_t d = 0; d < strides.size(); ++d) {
      if (have[d] == strides[d]) continue;
      if (sizes[d] != 1) {
        differs = false;
        break;
      }
      differs = true;
    }
  }
  if (!differs) {
    Py_INCREF(x);
    return x;
  }
  try {
    if (t.is_view() || t.requires_grad()) return THPVariable_Wrap(t.as_strided(sizes, strides, t.storage_offset()));
    at::Tensor same = at::empty({0}, t.options());
    same.set_(t.storage(), t.storage_offset(), sizes, strides);
    return THPVariable_Wrap(same);
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "%s", e.what());
    return nullptr;
  }
}

namespace {
bool autocast_on(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
c10::ScalarType autocast_dtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void set_autocast(c10::DeviceType device, bool on) { at::autocast::set_autocast_enabled(device, on); }
}  // namespace

AutocastState autocast_state() {
  AutocastState state;
  state.cpu = autocast_on(c10::DeviceType::CPU);
  state.cuda = autocast_on(c10::DeviceType::CUDA);
  // The dtypes matter only while autocast is on; reading them then keeps
  // states of autocast-off threads equal.
  if (state.cpu) state.cpu_dtype = to_kiln_dtype(autocast_dtype(c10::DeviceType::CPU));
  if (state.cuda) state.cuda_dtype = to_kiln_dtype(autocast_dtype(c10::DeviceType::CUDA));
  return state;
}

AutocastOff::AutocastOff()
    : cpu_(autocast_on(c10::DeviceType::CPU)), cuda_(autocast_on(c10::DeviceType::CUDA)) {
  if (cpu_) set_autocast(c10::DeviceType::CPU, false);
  if (cuda_) set_autocast(c10::DeviceType::CUDA, false);
}

AutocastOff::~AutocastOff() {
  if (cpu_) set_autocast(c10::DeviceType::CPU, true);
  if (cuda_) set_autocast(c10::DeviceType::CUDA, true);
}

// Note [Saved-tensor hooks while tracing]
// The tracer runs torch ops on meta fakes with autograd recording (a
// result's requires_grad is part of its metadata), so each op that saves a
// tensor for its backward would call the user's pack hook with a fake: a
// hook reading the storage (activation offloading, a byte count) raised,
// and the trace broke at every op; one with side effects ran them at trace
// time. torch's own tracers mark the thread as tracing, which makes
// autograd skip the default hooks; the compiled graph's own saves still
// call them when it runs.
SavedTensorHooksPaused::SavedTensorHooksPaused()
    : was_tracing_(at::SavedTensorDefaultHooks::set_tracing(true)) {}

SavedTensorHooksPaused::~SavedTensorHooksPaused() { at::SavedTensorDefaultHooks::set_tracing(was_tracing_); }

bool grad_mode_enabled() { return at::GradMode::is_enabled(); }

int64_t torch_function_mode_count() { return at::impl::PythonTorchFunctionTLS::stack_len(); }

graph::DType default_dtype() { return to_kiln_dtype(c10::get_default_dtype_as_scalartype()); }

void default_device(graph::DeviceType* type, int8_t* index) {
  *type = graph::DeviceType::CPU;
  *index = -1;
  // torch.set_default_device is a torch-function mode (DeviceContext); with
  // no mode on this thread's stack the default is the CPU, read without
  // entering Python.
  if (at::impl::PythonTorchFunctionTLS::stack_len() == 0) return;
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef getter = torch ? PyRef::steal(PyObject_GetAttrString(torch.get(), "get_default_device")) : PyRef();
  PyRef device = getter ? PyRef::steal(PyObject_CallNoArgs(getter.get())) : PyRef();
  PyRef name = device ? PyRef::steal(PyObject_GetAttrString(device.get(), "type")) : PyRef();
  PyRef at = device ? PyRef::steal(PyObject_GetAttrString(device.get(), "index")) : PyRef();
  if (!name || !at || !PyUnicode_Check(name.get())) {
    // A torch without get_default_device has no set_default_device either.
    PyErr_Clear();
    return;
  }
  const std::string text = PyUnicode_AsUTF8(name.get());
  *type = text == "cpu" ? graph::DeviceType::CPU : text == "cuda" ? graph::DeviceType::CUDA
        : text == "meta" ? graph::DeviceType::Meta : graph::DeviceType::Other;
  *index = at.get() == Py_None ? -1 : static_cast<int8_t>(PyLong_AsLong(at.get()));
}

void set_grad_mode(bool enabled) { at::GradMode::set_enabled(enabled); }

}  // namespace kiln::runtime
