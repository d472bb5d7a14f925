// TensorMeta: what kiln knows about a tensor without touching ATen (sizes,
// strides, dtype, device, requires_grad).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::graph {

// Element types kiln distinguishes, written once.
#define KILN_DTYPES(X)            \
  X(Bool, "bool", "b8")           \
  X(UInt8, "uint8", "u8")         \
  X(Int8, "int8", "i8")           \
  X(Int16, "int16", "i16")        \
  X(Int32, "int32", "i32")        \
  X(Int64, "int64", "i64")        \
  X(Float16, "float16", "f16")    \
  X(BFloat16, "bfloat16", "bf16") \
  X(Float32, "float32", "f32")    \
  X(Float64, "float64", "f64")    \
  X(Complex64, "complex64", "c64") \
  X(Complex128, "complex128", "c128") \
  X(Other, "other", "?")

enum class DType : int8_t {
#define KILN_DTYPE_ENUM(name, torch_name, short_name) name,
  KILN_DTYPES(KILN_DTYPE_ENUM)
#undef KILN_DTYPE_ENUM
};

enum class DeviceType : int8_t { CPU, CUDA, Meta, Other };

// A tensor's metadata, as the guards check it and the graph records it.
struct TensorMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  DType dtype = DType::Float32;
  DeviceType device_type = DeviceType::CPU;
  int8_t device_index = -1;
  bool requires_grad = false;

  bool operator==(const TensorMeta&) const = default;
};

// Returns torch's name of a dtype without the "torch." prefix, e.g. "float32".
const char* dtype_name(DType dtype);

// Returns the short form used in graph text, e.g. "f32".
const char* dtype_short_name(DType dtype);

// Returns the DType named like torch's str(dtype) ("torch.float32" or "float32").
DType dtype_from_name(const std::string& name);

// Returns "cpu", "cuda:0", ... as torch prints devices.
std::string device_name(DeviceType type, int index);

// Formats meta as in graph text: "f32[2, 3]" plus stride and grad notes
// when they are not the defaults ("f32[3, 2] stride=(1, 3) grad").
// With `symbolic_sizes` (per dim, "" for static dims), dynamic dims print
// by name ("f32[s0, 3]") and strides are shown only when not contiguous.
std::string format_tensor_meta(const TensorMeta& meta,
                               const std::vector<std::string>* symbolic_sizes = nullptr);

// Returns the row-major contiguous strides for `sizes`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

}  // namespace kiln::graph
