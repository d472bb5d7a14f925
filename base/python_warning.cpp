#include "base/python_warning.h"

namespace kiln::base {

void warn(PyObject* category, const std::string& message) {
  if (PyErr_WarnEx(category, message.c_str(), 1) < 0) PyErr_Clear();
}

}  // namespace kiln::base
