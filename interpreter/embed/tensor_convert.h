// at::Tensor <-> torch.Tensor objects for libkiln: the one file of
// kiln_embed that includes torch's Python headers.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace kiln::embed {

// Returns a new reference to a tuple of the tensors as torch.Tensor objects
// (the same Python object each time a tensor is wrapped); null with a
// Python error set on failure. The GIL must be held.
PyObject* tensors_to_tuple(const std::vector<at::Tensor>& tensors);

// Appends `result`'s tensors to *out when it is a tensor or a tuple/list of
// tensors; otherwise returns false and says in *problem what it was ("an
// int", "a tuple whose item 1 is a str"). Sets no Python error. GIL held.
bool tensors_from_result(PyObject* result, std::vector<at::Tensor>* out, std::string* problem);

}  // namespace kiln::embed
