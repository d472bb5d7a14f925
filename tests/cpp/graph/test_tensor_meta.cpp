// Tests of graph/tensor_meta.h: dtype names, contiguous strides (against
// torch's own) and the text form used in graphs and guards.
#include <Python.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/tensor_meta.h"
#include "runtime/aten_bridge.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::graph {
namespace {

using test::eval;
using test::PyRef;

TensorMeta meta(std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorMeta m;
  m.sizes = std::move(sizes);
  m.strides = std::move(strides);
  return m;
}

TEST(TensorMeta, FormatDefaults) {
  EXPECT_EQ(format_tensor_meta(meta({2, 3}, {3, 1})), "f32[2, 3]");
  EXPECT_EQ(format_tensor_meta(meta({}, {})), "f32[]");
  EXPECT_EQ(format_tensor_meta(meta({0}, {1})), "f32[0]");
}

TEST(TensorMeta, FormatStridesDeviceAndGrad) {
  TensorMeta m = meta({3, 2}, {1, 3});
  EXPECT_EQ(format_tensor_meta(m), "f32[3, 2] stride=(1, 3)");
  m.requires_grad = true;
  EXPECT_EQ(format_tensor_meta(m), "f32[3, 2] stride=(1, 3) grad");
  m.strides = {2, 1};
  m.dtype = DType::BFloat16;
  m.device_type = DeviceType::CUDA;
  m.device_index = 1;
  EXPECT_EQ(format_tensor_meta(m), "bf16[3, 2] cuda:1 grad");
  m.device_type = DeviceType::Meta;
  m.device_index = -1;
  m.requires_grad = false;
  EXPECT_EQ(format_tensor_meta(m), "bf16[3, 2] meta");
}

TEST(TensorMeta, ContiguousStridesMatchTorch) {
  const std::vector<std::vector<int64_t>> shapes = {{},     {5},    {2, 3},       {2, 1, 3}, {1, 1},
                                                    {2, 0}, {0, 3}, {4, 1, 0, 2}, {3, 4, 5}};
  for (const auto& sizes : shapes) {
    std::string expression = "torch.empty((";
    for (int64_t s : sizes) expression += std::to_string(s) + ", ";
    expression += "))";
    if (sizes.empty()) expression = "torch.empty(())";
    PyRef tensor = eval(expression);
    ASSERT_TRUE(tensor);
    TensorMeta read;
    runtime::read_tensor_meta(tensor.get(), &read);
    EXPECT_EQ(contiguous_strides(sizes), read.strides) << expression;
    // So a freshly made tensor never prints a stride note.
    EXPECT_EQ(format_tensor_meta(read).find("stride"), std::string::npos)
        << format_tensor_meta(read);
  }
}

TEST(TensorMeta, DtypeNamesRoundTrip) {
  for (int i = 0; i < static_cast<int>(DType::Other); ++i) {
    const DType dtype = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype) << dtype_name(dtype);
    EXPECT_EQ(dtype_from_name(std::string("torch.") + dtype_name(dtype)), dtype);
    // torch knows every name kiln prints.
    PyRef torch_dtype = eval(std::string("str(torch.") + dtype_name(dtype) + ")");
    ASSERT_TRUE(torch_dtype);
    EXPECT_EQ(test::str_of(torch_dtype.get()), std::string("torch.") + dtype_name(dtype));
  }
  EXPECT_EQ(dtype_from_name("torch.float"), DType::Float32);
  EXPECT_EQ(dtype_from_name("double"), DType::Float64);
  EXPECT_EQ(dtype_from_name("torch.half"), DType::Float16);
  EXPECT_EQ(dtype_from_name("long"), DType::Int64);
  EXPECT_EQ(dtype_from_name("int"), DType::Int32);
  EXPECT_EQ(dtype_from_name("torch.qint8"), DType::Other);
  EXPECT_STREQ(dtype_short_name(DType::Float32), "f32");
  EXPECT_STREQ(dtype_short_name(DType::Bool), "b8");
  EXPECT_STREQ(dtype_short_name(DType::Complex128), "c128");
}

TEST(TensorMeta, DeviceNames) {
  EXPECT_EQ(device_name(DeviceType::CPU, -1), "cpu");
  EXPECT_EQ(device_name(DeviceType::CUDA, 0), "cuda:0");
  EXPECT_EQ(device_name(DeviceType::Meta, -1), "meta");
}

TEST(TensorMeta, ReadFromTensors) {
  PyRef t = eval("torch.zeros(4, 3, dtype=torch.float64).t().requires_grad_()");
  TensorMeta m;
  runtime::read_tensor_meta(t.get(), &m);
  EXPECT_EQ(m.sizes, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(m.strides, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(m.dtype, DType::Float64);
  EXPECT_EQ(m.device_type, DeviceType::CPU);
  EXPECT_TRUE(m.requires_grad);
  EXPECT_EQ(format_tensor_meta(m), "f64[3, 4] stride=(1, 3) grad");
  EXPECT_TRUE(runtime::tensor_matches(t.get(), m));
  EXPECT_EQ(runtime::describe_tensor_mismatch(t.get(), m), "");
  TensorMeta other = m;
  other.device_type = DeviceType::Meta;
  EXPECT_FALSE(runtime::tensor_matches(t.get(), other));
  EXPECT_EQ(runtime::describe_tensor_mismatch(t.get(), other), "device cpu != expected meta");
}

TEST(TensorMeta, IsTensor) {
  EXPECT_TRUE(runtime::is_tensor(eval("torch.ones(1)").get()));
  EXPECT_TRUE(runtime::is_tensor(eval("torch.nn.Parameter(torch.ones(1))").get()));
  EXPECT_FALSE(runtime::is_tensor(eval("[torch.ones(1)]").get()));
  EXPECT_FALSE(runtime::is_tensor(eval("torch.Size([1])").get()));
  EXPECT_FALSE(PyErr_Occurred());
}

TEST(TensorMeta, IsTensorOnAnObjectWhoseClassRaises) {
  // isinstance() consults __class__, which may raise: not a tensor, no error.
  PyRef globals = test::exec_module(
      "class Liar:\n"
      "    @property\n"
      "    def __class__(self):\n"
      "        raise RuntimeError('no class for you')\n"
      "liar = Liar()\n");
  EXPECT_FALSE(runtime::is_tensor(test::item(globals, "liar").get()));
  EXPECT_FALSE(PyErr_Occurred()) << test::take_error();
}

}  // namespace
}  // namespace kiln::graph
