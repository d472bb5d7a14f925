#include "base/torch_api.h"

namespace kiln::base {
namespace {

PyObject* attr_path(PyObject* root, const char* path) {
  PyObject* current = root;
  Py_INCREF(current);
  const char* start = path;
  while (*start) {
    const char* dot = start;
    while (*dot && *dot != '.') ++dot;
    PyObject* name = PyUnicode_FromStringAndSize(start, dot - start);
    PyObject* next = PyObject_GetAttr(current, name);
    Py_DECREF(name);
    Py_DECREF(current);
    if (!next) return nullptr;
    current = next;
    start = *dot ? dot + 1 : dot;
  }
  return current;
}

bool load(TorchApi* api) {
  api->torch = PyImport_ImportModule("torch");
  if (!api->torch) return false;
  api->functional = PyImport_ImportModule("torch.nn.functional");
  api->global_hooks_module = PyImport_ImportModule("torch.nn.modules.module");
  api->operator_module = PyImport_ImportModule("operator");
  PyObject* builtins = PyImport_ImportModule("builtins");
  if (!api->functional || !api->global_hooks_module || !api->operator_module || !builtins) {
    return false;
  }
  api->builtin_getattr = PyObject_GetAttrString(builtins, "getattr");
  Py_DECREF(builtins);
  api->tensor_type = attr_path(api->torch, "Tensor");
  api->module_type = attr_path(api->torch, "nn.Module");
  api->module_call = attr_path(api->torch, "nn.Module.__call__");
  api->module_list_type = attr_path(api->torch, "nn.ModuleList");
  api->sequential_type = attr_path(api->torch, "nn.Sequential");
  api->module_dict_type = attr_path(api->torch, "nn.ModuleDict");
  api->empty_strided = attr_path(api->torch, "empty_strided");
  api->dtype_type = attr_path(api->torch, "dtype");
  api->device_type = attr_path(api->torch, "device");
  api->memory_format_type = attr_path(api->torch, "memory_format");
  api->layout_type = attr_path(api->torch, "layout");
  api->size_type = attr_path(api->torch, "Size");
  api->getitem = PyObject_GetAttrString(api->operator_module, "getitem");
  api->no_grad = attr_path(api->torch, "no_grad");
  api->enable_grad = attr_path(api->torch, "enable_grad");
  api->set_grad_enabled = attr_path(api->torch, "set_grad_enabled");
  api->set_grad_mode = attr_path(api->torch, "_C._set_grad_enabled");
  return api->tensor_type && api->module_type && api->module_call && api->module_list_type &&
         api->sequential_type && api->module_dict_type && api->empty_strided && api->no_grad &&
         api->enable_grad && api->set_grad_enabled && api->set_grad_mode &&
         api->dtype_type && api->device_type && api->size_type && api->getitem &&
         api->builtin_getattr;
}

}  // namespace

const TorchApi* torch_api() {
  static TorchApi api;
  static bool loaded = false;
  if (!loaded) {
    if (!load(&api)) return nullptr;
    loaded = true;
  }
  return &api;
}

}  // namespace kiln::base
