// The narrow interface through which models of Python builtins and std
// modules (stdlib/*_model.cpp) act on a trace. The tracer implements it
// (tracer/trace_stdlib.cpp); models see nothing else of the frame being
// traced, so they can neither reach its stack nor skip its bookkeeping.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

#include "cpython/instruction.h"
#include "tracer/break_reason.h"
#include "tracer/value.h"

namespace kiln::stdlib {

using base::PyRef;
using tracer::BreakCode;
using tracer::KwArgs;
using tracer::Value;
using tracer::ValueKind;
using tracer::ValuePtr;

class BuiltinContext {
 public:
  virtual ~BuiltinContext() = default;

  // The items of an iterable value; consumes what is left of an iterator.
  virtual std::vector<ValuePtr> unpack(const ValuePtr& iterable) = 0;
  // iter(value), as an Iterator value.
  virtual ValuePtr iterate(const ValuePtr& iterable) = 0;
  // The next item of an Iterator value (resuming its generator), or null
  // when it is exhausted.
  virtual ValuePtr next_item(const ValuePtr& iterator) = 0;
  // Calls any value as the CALL instruction would (inlining, graph nodes,
  // other models).
  virtual ValuePtr call(const ValuePtr& callable, std::vector<ValuePtr> args, KwArgs kwargs) = 0;
  // bool(value); aborts on tensors (the answer depends on their data).
  virtual bool truthy(const ValuePtr& value) = 0;

  // a <op> b for a BINARY_OP code (NB_ADD...; in-place forms at 13 + code).
  virtual ValuePtr binary_op(int nb_op, const ValuePtr& a, const ValuePtr& b) = 0;
  // a <cmp> b for a rich comparison code (Py_LT..Py_GE).
  virtual ValuePtr compare(int py_cmp, const ValuePtr& a, const ValuePtr& b) = 0;
  // -a, +a, ~a or not a (op is UnaryNegative, UnaryPositive, UnaryInvert or UnaryNot).
  virtual ValuePtr unary_op(cpython::Op op, const ValuePtr& a) = 0;
  // base.name, with the tracer's attribute rules.
  virtual ValuePtr load_attr(const ValuePtr& base, PyObject* name) = 0;
  // base.name, or null where that raises AttributeError exactly as eager
  // Python would (getattr's default, hasattr).
  virtual ValuePtr try_load_attr(const ValuePtr& base, PyObject* name) = 0;
  // The value the trace stored to base.name and has not yet written back
  // (Note [Side effects]), or null.
  virtual ValuePtr pending_attr_store(const ValuePtr& base, PyObject* name) = 0;
  // self.<name>(*args) for a special method the object's class writes in
  // Python, inlined; null when it has none.
  virtual ValuePtr call_python_special(const ValuePtr& self, const char* name, std::vector<ValuePtr> args) = 0;
  // base[index].
  virtual ValuePtr subscript(const ValuePtr& base, const ValuePtr& index) = 0;
  // container[key] = value.
  virtual void store_subscript(const ValuePtr& container, const ValuePtr& key, const ValuePtr& value) = 0;

  // Emits a graph node calling a torch-level callable (name is for graph text).
  virtual ValuePtr call_torch(const std::string& name, PyObject* target,
                              const std::vector<ValuePtr>& args, const KwArgs& kwargs) = 0;
  // Wraps an object kiln made or treats as fixed: no source, no guard.
  virtual ValuePtr constant(PyObject* obj) = 0;
  // fn(*operands) over ints, a dynamic size among them: a SymInt a graph
  // node computes at run time.
  virtual ValuePtr size_call(const std::string& name, PyObject* fn, const std::vector<ValuePtr>& operands) = 0;
  // tensor.size(dim): a constant, or a SymInt when the size is dynamic.
  virtual ValuePtr tensor_size(const ValuePtr& tensor, int dim) = 0;
  // Reads a plain data attribute of a real object (one that runs no user
  // code, e.g. functools.partial's func), guarded through base's source.
  virtual ValuePtr read_attr(const ValuePtr& base, const char* name) = 0;
  // Guards that an input value still has exactly `type` on later calls.
  virtual void guard_type(const ValuePtr& value, PyObject* type) = 0;
  // Guards that hasattr(value, name) stays `present` on later calls.
  virtual void guard_has_attr(const ValuePtr& value, PyObject* name, bool present) = 0;
  // Records an in-place change of a list, dict, iterator or std object: a
  // container the caller can see is written back after the graph.
  virtual void note_write(const ValuePtr& target) = 0;

  // Fetches and clears the pending Python exception as "Type: message".
  virtual std::string take_python_error() = 0;
  // Raises the pending Python exception in the traced code, where eager
  // Python raises it too: a handler of the traced frames may catch it.
  [[noreturn]] virtual void raise_exact() = 0;

  // Abandons the trace; the tracer turns it into a graph break or an eager run.
  [[noreturn]] void abort(BreakCode code, const std::string& message) {
    throw tracer::TraceAbort(code, message);
  }
  // Abandons the trace with the pending Python exception, after `what`.
  [[noreturn]] void abort_python_error(const std::string& what) {
    throw tracer::TraceAbort(BreakCode::PythonException, what + ": " + take_python_error());
  }
};

// One call handed to a model. Models may move from args and kwargs.
struct BuiltinCall {
  const ValuePtr& callee;   // the builtin, std object or bound container method called
  const std::string& name;  // its display name: "len", "functools.reduce", "list.append"
  std::vector<ValuePtr>& args;
  KwArgs& kwargs;
};

}  // namespace kiln::stdlib
