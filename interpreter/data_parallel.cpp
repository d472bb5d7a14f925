#include "interpreter/data_parallel.h"

#include <Python.h>

#include "base/log.h"
#include "base/py_ref.h"

namespace kiln::interpreter {

int64_t active_ddp_bucket_bytes() {
  using base::PyRef;
  // DDP sets the class attribute _active_ddp_module around its wrapped
  // module's call (for Dynamo, which cuts its graphs by the same rule). A
  // process that never imported DDP has no such module running.
  PyRef name = PyRef::steal(PyUnicode_FromString("torch.nn.parallel.distributed"));
  PyRef module = name ? PyRef::steal(PyImport_GetModule(name.get())) : PyRef();
  if (!module) {
    PyErr_Clear();
    return 0;
  }
  PyRef ddp = PyRef::steal(PyObject_GetAttrString(module.get(), "DistributedDataParallel"));
  PyRef active = ddp ? PyRef::steal(PyObject_GetAttrString(ddp.get(), "_active_ddp_module")) : PyRef();
  if (!active || active.get() == Py_None) {
    PyErr_Clear();
    return 0;
  }
  PyRef cap = PyRef::steal(PyObject_GetAttrString(active.get(), "bucket_bytes_cap"));
  const long long bytes = cap && PyLong_Check(cap.get()) ? PyLong_AsLongLong(cap.get()) : -1;
  if (bytes <= 0 || PyErr_Occurred()) {
    PyErr_Clear();
    KILN_LOG(backend, "DistributedDataParallel's forward is running but its bucket_bytes_cap is unreadable: "
                      "its gradients arrive when the whole backward is done");
    return 0;
  }
  return bytes;
}

}  // namespace kiln::interpreter
