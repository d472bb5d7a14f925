// Symbolic values: what the tracer keeps on its stack and in its locals.
// Each knows where it came from (its source), so guards can be derived.
#pragma once

#include <Python.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/tensor_meta.h"
#include "guards/size_expr.h"
#include "base/py_ref.h"

namespace kiln::tracer {

using base::PyRef;

//  X(kind, what it models)
#define KILN_VALUE_KINDS(X)                                                    \
  X(Null, "CPython's NULL stack marker")                                       \
  X(Constant, "an immutable Python value: None, bool, int, float, str, dtype") \
  X(Tensor, "a tensor: a graph value with a fake (meta) twin")                 \
  X(Tuple, "a tuple of values")                                                \
  X(List, "a list of values")                                                  \
  X(Dict, "a dict with constant keys")                                         \
  X(Module, "an nn.Module instance")                                           \
  X(Function, "a user Python function, inlined when called")                   \
  X(Method, "a Python function bound to self")                                 \
  X(TensorMethod, "a Tensor method bound to a tensor value")                   \
  X(ContainerMethod, "a list or dict method bound to a container value")       \
  X(TorchCallable, "a torch callable that becomes a graph node")               \
  X(Builtin, "a Python builtin or std-module function kiln models")            \
  X(PyModule, "a Python module object")                                        \
  X(Object, "any other Python object, read through guarded attributes")        \
  X(Iterator, "an iterator over a known sequence of values")                  \
  X(Cell, "a closure cell; items[0] is its contents, absent when unbound")    \
  X(LocalFunction, "a function created by the trace (lambda, nested def)")    \
  X(GradModeContext, "torch.no_grad() / enable_grad() / set_grad_enabled(b)") \
  X(GradModeExit, "__exit__ of an entered grad-mode context")                  \
  X(UserContextExit, "__exit__ of an entered context whose class defines "     \
                     "__enter__/__exit__ in Python: self is the context")      \
  X(Super, "super(cls, self): obj is cls, self the receiver")                 \
  X(Record, "an instance of a plain Python class made by the trace: "        \
            "tuple_type is its class, self the class value, attrs its __dict__, " \
            "contents its items when it is a dict (Note [User objects])")     \
  X(AutocastContext, "torch.autocast(...) not yet entered: obj is the real "  \
                     "autocast object")                                        \
  X(AutocastExit, "__exit__ of an entered autocast block: node is the graph " \
                  "value of the entered context, obj the tracing twin")       \
  X(SymInt, "an int that depends on a dynamic size (Note [Dynamic shapes])")  \
  X(StdObject, "an object of a modelled std type made by the trace "           \
               "(functools.partial, operator.itemgetter, itertools.count)")     \
  X(Set, "a set of Python constants: obj is a private set object, replaced "  \
         "(never changed) when the set changes")

enum class ValueKind : uint8_t {
#define KILN_VALUE_ENUM(name, doc) name,
  KILN_VALUE_KINDS(KILN_VALUE_ENUM)
#undef KILN_VALUE_ENUM
};

// Returns the kind's name, e.g. "Tensor".
const char* value_kind_name(ValueKind kind);

struct Value;
using ValuePtr = std::shared_ptr<Value>;
class FrameTracer;
using KwArgs = std::vector<std::pair<std::string, ValuePtr>>;

// True for a subclass of enum.Enum (`obj` a class).
bool is_enum_class(PyObject* obj);
// True for a member of an enum.Enum subclass.
bool is_enum_member(PyObject* obj);
// True when comparing instances of `type` runs no Python code: no class in
// its MRO defines __eq__/__ne__ in Python (IntEnum's come from int).
bool native_equality(PyTypeObject* type);

// True when instances of `type` compare and hash by identity (object's own
// __eq__ and __hash__: classes, typing's special forms).
bool identity_equality(PyTypeObject* type);

// True for a value that keys a dict as a constant does: a Constant, or an
// identity-guarded Object that is an enum member whose equality runs no
// Python code (diffusers keys its attention backend registry by members)
// or compares by identity (huggingface_hub keys validators by typing.Union).
bool is_key_value(const Value& value);

// True when some tensor among `values` (through tuples and lists)
// requires grad.
bool any_requires_grad(const std::vector<ValuePtr>& values);

// The birth a value made now gets: values are numbered in the order they are
// made, across the process (Note [Changes of new values]).
uint64_t next_value_birth();

struct Value {
  ValueKind kind = ValueKind::Null;
  // When the value was made (next_value_birth): a graph break backing out
  // of an instruction ignores changes to values the instruction made.
  uint64_t birth = next_value_birth();
  int source = -1;  // id in the trace's SourceTable, -1 if made by the trace
  PyRef obj;        // the real object (Constant, Module, Function, callables,
                    // PyModule, Object); Method: the function; StdObject:
                    // its type; ContainerMethod: the method's descriptor
  // Tensor
  int node = -1;
  // A tensor read through a source: the real tensor's address while the
  // trace runs, its identity in sets (Note [Tensors in sets]); 0 otherwise.
  uintptr_t tensor_address = 0;
  PyRef fake;  // meta tensor with the same metadata
  graph::TensorMeta meta;
  // Tensor in a trace with dynamic sizes: the fakes at the other sample
  // points (Note [Dynamic shapes]); empty when the trace has none.
  std::vector<PyRef> alt_fakes;
  // SymInt: its value at each sample point ([0] is the real one). It is
  // computed at run time by calling `obj` on `items` (tensors, SymInts,
  // constants), then indexing the result with `sym_index` when set; `node`
  // is the graph node doing so, made when first needed.
  std::vector<int64_t> sym_points;
  PyRef sym_index;
  // SymInt: the size as an exact expression of the symbols, where the
  // tracer knows it (Note [Size relations] in guards/size_expr.cpp).
  std::optional<guards::SizeExpr> sym_expr;
  // Tensor made by a call in a dynamic trace: each dim's exact expression
  // where a shape rule gives it (Note [Exact dims through shape rules] in
  // trace_sizes.cpp); empty when no rule applied.
  std::vector<std::optional<guards::SizeExpr>> dim_exprs;
  // SymInt: a slice whose bounds (`items`: start, stop, step) involve
  // SymInts, built at run time by calling `obj` (slice); it has no
  // sym_points and is no int (only a subscript's key).
  bool sym_slice = false;
  // Builtin: a logging.Logger method (`obj`, bound), called after the
  // graph with the call's constant arguments (Note [Deferred logging]).
  bool deferred_call = false;
  // Object: its source is guarded by type only (Note [Objects guarded by
  // type]); TraceState::pin_identity adds the identity guard once the trace
  // reads who the object is.
  bool identity_deferred = false;
  // Tuple/List items, Dict values, Iterator's sequence; StdObject: a Tuple
  // of its constructor's positional arguments, then a Dict of its keywords
  std::vector<ValuePtr> items;
  std::vector<PyRef> keys;  // Dict keys
  size_t position = 0;      // Iterator: next item
  ValuePtr self;            // Method/TensorMethod/Super receiver; Record: its class value;
                            // Dict made as a defaultdict: its default_factory (null: None)
  int func_source = -1;     // Method without a source: its function's entry in its class's dict
  PyRef tuple_type;         // Tuple: a namedtuple / structseq type (torch.return_types.max);
                            // Record: its dataclass
  ValuePtr defaults;        // LocalFunction: tuple of default values, or null
  ValuePtr kwdefaults;      // LocalFunction: dict of keyword-only defaults, or null
  PyRef globals;            // LocalFunction: the globals of the frame that made it
  // Iterator over a generator an inlined frame called: its frame, suspended
  // at a yield, makes the items after `items` on demand (Note [Generators]);
  // null once all are known.
  std::shared_ptr<FrameTracer> generator;
  ValuePtr attrs;           // Record: its instance __dict__, a Dict value
  ValuePtr contents;        // Record, or Object the frame was given (Note [Dict-backed objects]),
                            // of a dict subclass: its items, a Dict value (else null)
  bool object_items = false;  // Dict: the items of such an Object, which the trace does not write
  bool outer_cell = false;  // Cell: belongs to a scope the caller can see
  bool grad_enabled = false;  // GradModeContext: mode it sets; GradModeExit: mode it restores
  bool already_set = false;   // GradModeContext: set_grad_enabled() set it when called
  bool restore_to = false;    // GradModeContext with already_set: the mode before the call
  std::string name;         // TensorMethod: method name; TorchCallable: display name

  bool is(ValueKind k) const { return kind == k; }
};

// Constructors for the common kinds.
ValuePtr make_null();
ValuePtr make_constant(PyRef obj, int source = -1);
ValuePtr make_sequence(ValueKind kind, std::vector<ValuePtr> items, int source = -1);
// A new Dict value with `dict`'s keys and items, and its kind of dict (an
// OrderedDict's copy is an OrderedDict, a defaultdict's keeps its factory).
ValuePtr copy_dict(const Value& dict);
ValuePtr make_object(ValueKind kind, PyRef obj, int source = -1);

// A short description for error messages, e.g. "Tensor f32[2, 3]" or "int 3".
std::string describe_value(const Value& value);

}  // namespace kiln::tracer
