// Which objects the tracer guards by type rather than identity, and which
// dicts and keys it reads item by item (tracer/object_guards.cpp).
#pragma once

#include <Python.h>

namespace kiln::tracer {

// A dict, an OrderedDict or a defaultdict.
bool is_plain_dict(PyObject* obj);
// A key a dict guard compares without running Python code.
bool plain_key(PyObject* key);
// An instance of a plain Python class, guarded by type (Note [Objects
// guarded by type]); with `dict_bases`, dict and OrderedDict may be among
// its bases (their items guarded by the caller).
bool is_identity_free(PyObject* obj, bool dict_bases = false);
// An object of a dict subclass read as an Object with items (Note
// [Dict-backed objects]).
bool is_dict_backed(PyObject* obj);

}  // namespace kiln::tracer
