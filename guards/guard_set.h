// Guards: the assumptions a compiled graph was traced under, checked in C++
// before every reuse. Each kind has a fast check and a verbose explanation.
#pragma once

#include <Python.h>

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "graph/tensor_meta.h"
#include "guards/size_expr.h"
#include "guards/source.h"
#include "base/py_ref.h"
#include "runtime/aten_bridge.h"

namespace kiln::guards {

// Guard kinds, written once: name and what it asserts.
#define KILN_GUARD_KINDS(X)                                                   \
  X(TensorMatch, "a tensor with this dtype, device, sizes, strides, grad")   \
  X(TypeMatch, "an object of exactly this type")                             \
  X(IdMatch, "this very object")                                             \
  X(ConstantMatch, "a value of this type equal to this constant")            \
  X(LengthMatch, "a tuple or list of exactly this type and length")          \
  X(DictKeys, "a dict of exactly this type with these keys in this order")   \
  X(GradMode, "torch.is_grad_enabled() has this value (no source)")         \
  X(DefaultDtype, "torch.get_default_dtype() is this dtype (no source)")    \
  X(DefaultDevice, "torch's default device is this device (no source)")      \
  X(Autocast, "CPU and CUDA autocast are on or off, with these dtypes (no source)") \
  X(NoModuleHooks, "an nn.Module with no forward, pre-forward or backward hooks") \
  X(HasAttr, "an object that has (flag) or lacks (!flag) the attribute named expected") \
  X(EnvVar, "os.environ[keys] is expected, or is unset when expected is null (no source)") \
  X(SizeRelation, "a comparison of sizes the dynamic dims bind has this result (no source)") \
  X(IntSymbol, "an int (exactly) binding a size symbol, like a dynamic dim: >= 2, or 1 with size one") \
  X(Distinct, "objects pairwise distinct from those at others (objects guarded by type)") \
  X(SameObject, "the object at others[0] (one object through two sources, guarded by type)")

enum class GuardKind : uint8_t {
#define KILN_GUARD_ENUM(name, doc) name,
  KILN_GUARD_KINDS(KILN_GUARD_ENUM)
#undef KILN_GUARD_ENUM
};

// Most size symbols one guard set binds (tracer::SymbolTable::kMaxSymbols).
constexpr int kMaxGuardSymbols = 16;

// One guard over one source.
struct Guard {
  GuardKind kind;
  int source = -1;             // -1 for GradMode, DefaultDtype, DefaultDevice and Autocast
  // Owned: the type or constant; for IdMatch a weak reference to the object
  // when it supports them (so guards never keep a model alive), else the
  // object itself.
  PyObject* expected = nullptr;
  bool weak = false;  // IdMatch: `expected` is a weakref
  graph::TensorMeta meta;      // TensorMatch; DefaultDtype: meta.dtype; DefaultDevice: its device
  // TensorMatch with dynamic dims: per dim, the symbol its size binds (-1:
  // static). Dynamic dims accept any size >= 2 (or 1, see
  // GuardSet::admit_size_one), equal for equal symbols, and the tensor
  // must be contiguous. Empty: every dim static. IntSymbol: the one
  // symbol the int binds.
  std::vector<int8_t> dim_symbols;
  Py_ssize_t length = 0;       // LengthMatch only
  PyObject* keys = nullptr;    // DictKeys: owned tuple of the keys in iteration order
  bool flag = false;           // GradMode; HasAttr: the attribute is present
  bool generic = false;        // HasAttr: looked up by object.__getattribute__
  runtime::AutocastState autocast;  // Autocast only
  // SizeRelation: `lhs cmp rhs` is `flag` (Note [Size relations]).
  SizeExpr lhs, rhs;
  int cmp = 0;
  // Distinct: the group's other sources; SameObject: the first source. All
  // are fetched before `source`.
  std::vector<int> others;
};

// All guards of one cache entry, with the sources they read.
class GuardSet {
 public:
  GuardSet() = default;
  GuardSet(const GuardSet&) = delete;
  GuardSet& operator=(const GuardSet&) = delete;
  ~GuardSet();

  SourceTable& sources() { return sources_; }
  const SourceTable& sources() const { return sources_; }

  // Adding a guard that already exists (same kind and source) does nothing.
  // `dim_symbols` as in Guard (empty: static sizes and strides).
  void add_tensor_match(int source, const graph::TensorMeta& meta,
                        std::vector<int8_t> dim_symbols = {});
  void add_type_match(int source, PyObject* type);
  void add_id_match(int source, PyObject* object);
  void add_constant_match(int source, PyObject* constant);
  void add_length_match(int source, PyObject* sequence);
  // `keys`: the dict's keys in its iteration order (what the trace read).
  void add_dict_keys(int source, PyObject* dict, std::vector<base::PyRef> keys);
  void add_grad_mode(bool enabled);
  void add_default_dtype(graph::DType dtype);
  void add_default_device(graph::DeviceType type, int8_t index);
  void add_autocast(const runtime::AutocastState& state);
  void add_no_module_hooks(int source);
  // hasattr(source, name) is `present` (a getattr default or a hasattr the
  // trace relied on; a present attribute that is read is guarded by its
  // own source). With `generic`, through the generic lookup, skipping the
  // class's own __getattribute__ (Note [Custom getattr]). The first guard
  // of a source and name stands.
  void add_has_attr(int source, PyObject* name, bool present, bool generic = false);
  // os.environ.get(name) is `value` (null: the variable is unset).
  void add_env_var(PyObject* name, PyObject* value);
  // A dynamic Python int (Note [Dynamic ints] in tracer/dynamic_shapes.cpp):
  // the int at `source` binds `symbol` as a dynamic dim's size would.
  void add_int_symbol(int source, int8_t symbol);
  // `lhs cmp rhs` (Py_LT .. Py_GE over the symbols TensorMatch guards
  // bind) is `result`.
  void add_size_relation(const SizeExpr& lhs, int cmp, const SizeExpr& rhs, bool result);
  // The sources hold pairwise different objects (objects guarded by type
  // only, Note [Objects guarded by type] in tracer/object_guards.cpp): one
  // guard for the group, checked once all are fetched.
  void add_distinct(std::vector<int> sources);
  // The two sources hold one object (an object guarded by type reached
  // through a second source): checked once both are fetched.
  void add_same_object(int a, int b);
  // Dynamic dims accept size 1 too, as long as every symbol is 1 together
  // (the trace held at that point: Note [The size-one point] in
  // tracer/dynamic_shapes.cpp).
  void admit_size_one() { admits_size_one_ = true; }

  // The hot path: fetches every source into `values` and checks every
  // guard. True when all hold; `values` then holds what graph inputs need.
  // Never leaves a Python error set.
  bool check(const FrameView& frame, SourceValues& values) const;

  // Explains the first failing guard in words ("" when all hold).
  std::string check_verbose(const FrameView& frame) const;

  // An input dim whose size alone makes a TensorMatch guard fail (same
  // dtype, device, rank and grad), or an int whose value alone fails its
  // ConstantMatch: what automatic dynamic shapes marks dynamic before
  // tracing again.
  struct SizeChange {
    std::string source;  // source text, "L['x']"
    int dim = 0;         // -1: the int at `source` itself
    int64_t traced = 0;  // the size the guard expects
    int64_t now = 0;     // the size the frame has
  };
  std::vector<SizeChange> size_changes(const FrameView& frame) const;

  // The (source text, dim) of every dynamic dim the TensorMatch guards
  // bind, and (source text, -1) of every int an IntSymbol guard binds.
  std::vector<std::pair<std::string, int>> dynamic_dims() const;

  // The text of every source a TensorMatch guard reads.
  std::vector<std::string> tensor_sources() const;

  // Readable listing, one guard per line, in a stable order.
  std::string format() const;

  int guard_count() const { return static_cast<int>(guards_.size()); }

 private:
  bool has(GuardKind kind, int source) const;
  // `symbols` holds the sizes dynamic dims bound so far (-1: unbound).
  // `values` holds the sources fetched so far.
  bool holds(const Guard& guard, PyObject* value, const SourceValues& values, int64_t* symbols) const;
  std::string explain(const Guard& guard, PyObject* value, const int64_t* symbols) const;
  std::string explain_dynamic_mismatch(PyObject* value, const Guard& guard,
                                       const int64_t* symbols) const;
  std::string describe(const Guard& guard) const;
  // True when the guard that failed last still fails, checked with the
  // guards on its source and the sources it is read through (Note [Last
  // failed guard first]); fetches those sources into `values`.
  bool last_failure_repeats(const FrameView& frame, SourceValues& values) const;

  SourceTable sources_;
  std::vector<Guard> guards_;
  int symbol_count_ = 0;  // symbols the TensorMatch guards bind
  bool admits_size_one_ = false;
  // With size 1 admitted: the symbols are all 1 or none is (the one
  // combination with 1 in it the trace was checked at).
  bool ones_together(const int64_t* symbols) const;
  // Guards grouped by source id so check() can test each value right after
  // fetching it.
  mutable std::vector<std::vector<int>> by_source_;
  // SizeRelation guards: checked after every source bound its symbols.
  mutable std::vector<int> relations_;
  mutable bool indexed_ = false;
  // The guard whose failure ended the last check, or -1 when it held.
  mutable std::atomic<int> last_failed_{-1};
  void build_index() const;
};

}  // namespace kiln::guards
