#include "graph/tensor_meta.h"

#include <sstream>

namespace kiln::graph {
namespace {

struct DTypeNames {
  const char* torch_name;
  const char* short_name;
};

constexpr DTypeNames kDTypeNames[] = {
#define KILN_DTYPE_NAMES(name, torch_name, short_name) {torch_name, short_name},
    KILN_DTYPES(KILN_DTYPE_NAMES)
#undef KILN_DTYPE_NAMES
};

void append_list(std::ostringstream& out, const std::vector<int64_t>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out << ", ";
    out << values[i];
  }
}

}  // namespace

const char* dtype_name(DType dtype) {
  return kDTypeNames[static_cast<int>(dtype)].torch_name;
}

const char* dtype_short_name(DType dtype) {
  return kDTypeNames[static_cast<int>(dtype)].short_name;
}

DType dtype_from_name(const std::string& name) {
  std::string bare = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
  // torch's aliases print under their canonical names, but accept both.
  if (bare == "float") return DType::Float32;
  if (bare == "double") return DType::Float64;
  if (bare == "half") return DType::Float16;
  if (bare == "long") return DType::Int64;
  if (bare == "int") return DType::Int32;
  for (int i = 0; i < static_cast<int>(DType::Other); ++i) {
    if (bare == kDTypeNames[i].torch_name) return static_cast<DType>(i);
  }
  return DType::Other;
}

std::string device_name(DeviceType type, int index) {
  std::string base;
  switch (type) {
    case DeviceType::CPU: base = "cpu"; break;
    case DeviceType::CUDA: base = "cuda"; break;
    case DeviceType::Meta: base = "meta"; break;
    case DeviceType::Other: base = "other"; break;
  }
  if (index >= 0) base += ":" + std::to_string(index);
  return base;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t running = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = running;
    running *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return strides;
}

std::string format_tensor_meta(const TensorMeta& meta, const std::vector<std::string>* symbolic_sizes) {
  std::ostringstream out;
  out << dtype_short_name(meta.dtype) << "[";
  if (symbolic_sizes && symbolic_sizes->size() == meta.sizes.size()) {
    for (size_t i = 0; i < meta.sizes.size(); ++i) {
      if (i) out << ", ";
      if ((*symbolic_sizes)[i].empty()) {
        out << meta.sizes[i];
      } else {
        out << (*symbolic_sizes)[i];
      }
    }
  } else {
    append_list(out, meta.sizes);
  }
  out << "]";
  if (meta.strides != contiguous_strides(meta.sizes)) {
    out << " stride=(";
    append_list(out, meta.strides);
    out << ")";
  }
  if (meta.device_type != DeviceType::CPU) out << " " << device_name(meta.device_type, meta.device_index);
  if (meta.requires_grad) out << " grad";
  return out.str();
}

}  // namespace kiln::graph
