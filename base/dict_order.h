// Dicts and OrderedDicts, the two mapping types the tracer models item by
// item: their keys in iteration order, which for an OrderedDict is its own
// order, not the order of its underlying dict storage.
#pragma once

#include <Python.h>

#include <vector>

#include "base/py_ref.h"

namespace kiln::base {

// Appends the keys of `dict` (a dict or a dict subclass) to `keys` in the
// order iterating it gives; false with a Python error set if iteration
// fails. Exact dicts are read through PyDict_Next; any other type through
// its iterator, because PyDict_Next walks the storage beneath an
// OrderedDict's order (move_to_end changes one and not the other).
bool dict_keys_in_order(PyObject* dict, std::vector<PyRef>& keys);

// collections.OrderedDict (imported once, kept for the life of the process);
// null, with no error set, if it cannot be imported.
PyObject* ordered_dict_type();

// collections.defaultdict, as ordered_dict_type.
PyObject* defaultdict_type();

// True for an exact dict or an exact OrderedDict.
bool is_dict_or_ordered_dict(PyObject* obj);

// True when `dict` iterates exactly the keys of the tuple `keys`, in that
// order (identity, else equality). Never leaves a Python error set.
bool dict_has_keys(PyObject* dict, PyObject* keys);

}  // namespace kiln::base
