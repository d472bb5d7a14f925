// Handles to the torch and Python objects the tracer compares against,
// looked up once (with the GIL held) and kept for the process lifetime.
#pragma once

#include <Python.h>

namespace kiln::base {

struct TorchApi {
  PyObject* torch = nullptr;             // the torch module
  PyObject* functional = nullptr;        // torch.nn.functional
  PyObject* tensor_type = nullptr;       // torch.Tensor
  PyObject* module_type = nullptr;       // torch.nn.Module
  PyObject* module_call = nullptr;       // torch.nn.Module.__call__
  PyObject* module_list_type = nullptr;  // torch.nn.ModuleList
  PyObject* sequential_type = nullptr;   // torch.nn.Sequential
  PyObject* module_dict_type = nullptr;  // torch.nn.ModuleDict
  PyObject* global_hooks_module = nullptr;  // torch.nn.modules.module
  PyObject* empty_strided = nullptr;     // torch.empty_strided
  PyObject* dtype_type = nullptr;        // torch.dtype
  PyObject* device_type = nullptr;       // torch.device
  PyObject* memory_format_type = nullptr;  // torch.memory_format
  PyObject* layout_type = nullptr;       // torch.layout
  PyObject* size_type = nullptr;         // torch.Size
  PyObject* operator_module = nullptr;   // operator
  PyObject* getitem = nullptr;           // operator.getitem
  PyObject* builtin_getattr = nullptr;   // builtins.getattr
  PyObject* no_grad = nullptr;           // torch.no_grad
  PyObject* enable_grad = nullptr;       // torch.enable_grad
  PyObject* set_grad_enabled = nullptr;  // torch.set_grad_enabled
  PyObject* set_grad_mode = nullptr;     // torch._C._set_grad_enabled
};

// Returns the handles, importing torch on first use. Returns null with a
// Python error set if torch cannot be imported.
const TorchApi* torch_api();

}  // namespace kiln::base
