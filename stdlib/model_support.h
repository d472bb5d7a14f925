// Helpers the model files share: argument checks, reading constant
// arguments, and running a real Python callable on constant values.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

#include "stdlib/builtin_context.h"

namespace kiln::stdlib {

// Aborts unless the call has min..max positional arguments and no keywords.
void expect_args(BuiltinContext& context, const BuiltinCall& call, size_t min, size_t max);

// The Python object for a constant, or a tuple/list of constants (a
// torch.Size stays itself); null for anything else, iterators included.
PyRef python_constant(const Value& value);

// True if the value is, or holds, a tensor.
bool holds_tensor(const Value& value);

// True for the constant None.
bool is_none(const Value& value);

// Reads a constant int argument; aborts with `what` otherwise.
Py_ssize_t int_argument(BuiltinContext& context, const Value& value, const std::string& what);

// Wraps a new int.
ValuePtr int_value(BuiltinContext& context, Py_ssize_t n);

// The value of keyword `key`, removed from kwargs; null if absent.
ValuePtr take_keyword(KwArgs& kwargs, const char* key);

// Calls the real callable `fn` on the Python values of the call's arguments,
// which must be constants (user objects would run their own __len__,
// __eq__, ... once, and the answer be baked into the graph). With
// `consumes_iterable`, the first argument may be an iterator of constants,
// which the call consumes as the real builtin would.
ValuePtr fold_constants(BuiltinContext& context, PyObject* fn, const BuiltinCall& call,
                        bool consumes_iterable);

// Items of each iterable in lockstep, as zip() and map() take them: the
// shortest bounded one sets the length, unbounded ones (itertools.count)
// give that many items. Aborts if all are unbounded.
std::vector<std::vector<ValuePtr>> unpack_in_lockstep(BuiltinContext& context,
                                                      const std::vector<ValuePtr>& iterables,
                                                      const std::string& what);

}  // namespace kiln::stdlib
