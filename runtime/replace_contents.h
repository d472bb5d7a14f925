// Writing a traced container's new items back into the caller's object.
#pragma once

#include <Python.h>

namespace kiln::runtime {

// Gives the caller's list or mapping `target` the items of `contents` (a
// list or dict the graph built), keeping the object itself; 0 on success,
// -1 with a Python error set. Exact lists and dicts take the C API; any
// other type takes its own methods (`clear()` then `update()`, or slice
// assignment), because the C API writes a subclass's dict storage beneath
// its bookkeeping: an OrderedDict written through PyDict_Update keeps the
// items but not their order links, so it iterates as empty and a later pop
// raises KeyError (Note [Side effects]).
int replace_contents(PyObject* target, PyObject* contents);

}  // namespace kiln::runtime
