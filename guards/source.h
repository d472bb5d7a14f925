// Sources: how to fetch a value again from a frame (a local, a global, an
// attribute chain, an item). Guards and graph inputs are expressed over them.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::guards {

// What a frame offers for fetching sources; filled by interpreter/.
struct FrameView {
  PyObject* const* localsplus = nullptr;  // borrowed, CPython's fast locals
  PyObject* globals = nullptr;            // borrowed dict
  PyObject* builtins = nullptr;           // borrowed dict
  PyObject* closure = nullptr;            // borrowed tuple of cells, or null
};

// The kinds of access path, written once.
#define KILN_SOURCE_KINDS(X)                                       \
  X(Local, "a fast local by localsplus index")                     \
  X(Global, "a name in the frame's globals, then builtins")        \
  X(GlobalIn, "a name in a given globals dict (inlined functions)") \
  X(ClosureCell, "the contents of the frame function's i-th cell") \
  X(Attr, "getattr(base, name)")                                   \
  X(GenericAttr, "object.__getattribute__(base, name)")             \
  X(DictItem, "base[key] where base is a dict")                    \
  X(Index, "base[i] where base is a tuple or list")

enum class SourceKind : uint8_t {
#define KILN_SOURCE_ENUM(name, doc) name,
  KILN_SOURCE_KINDS(KILN_SOURCE_ENUM)
#undef KILN_SOURCE_ENUM
};

// One access path. Sources form a tree through `base`; ids are positions in
// their SourceTable and bases always have smaller ids than what derives
// from them, so fetching in id order never needs recursion.
struct Source {
  SourceKind kind;
  int id = -1;
  int base = -1;             // id of the base source, -1 for roots
  int index = -1;            // Local: localsplus index; ClosureCell/Index: position
  PyObject* name = nullptr;  // owned: str for Global/GlobalIn/Attr, key for DictItem
  PyObject* dict = nullptr;  // owned: GlobalIn's globals dict
  std::string text;          // readable form, e.g. "L['self'].layers[0]"
};

// The sources of one trace; deduplicates identical paths.
class SourceTable {
 public:
  SourceTable() = default;
  SourceTable(const SourceTable&) = delete;
  SourceTable& operator=(const SourceTable&) = delete;
  ~SourceTable();

  // Each returns the id of the (possibly already existing) source.
  int local(int index, const std::string& local_name);
  int global(PyObject* name);
  int global_in(PyObject* globals_dict, PyObject* name);
  int closure_cell(int index, const std::string& var_name);
  int attr(int base, PyObject* name);
  // The generic lookup, skipping a class's own __getattribute__ (Note
  // [Custom getattr]): what super().__getattribute__(name) reads.
  int generic_attr(int base, PyObject* name);
  int dict_item(int base, PyObject* key);
  int index(int base, int position);

  const Source& at(int id) const { return *sources_[id]; }
  int size() const { return static_cast<int>(sources_.size()); }

 private:
  int intern(Source source);
  std::vector<std::unique_ptr<Source>> sources_;
};

// Per-call fetched values, one owned reference (or null) per source id.
// Small tables live inline: a compiled call then allocates nothing here.
class SourceValues {
 public:
  explicit SourceValues(int count = 0) { reset(count); }
  SourceValues(const SourceValues&) = delete;
  SourceValues& operator=(const SourceValues&) = delete;
  ~SourceValues() { clear(); }

  // Drops all held references and resizes to `count` empty slots.
  void reset(int count);
  PyObject* get(int id) const { return data_[id]; }
  void set(int id, PyObject* owned) { data_[id] = owned; }

 private:
  static constexpr int kInline = 24;
  void clear();
  PyObject* inline_[kInline] = {};
  std::vector<PyObject*> heap_;
  PyObject** data_ = inline_;
  int size_ = 0;
};

// Fetches source `id` (its base must already be in `values`). Returns a new
// reference, or null with NO Python error set when the path does not resolve
// (a missing attribute or key is a guard failure, not an error).
PyObject* fetch_source(const SourceTable& table, int id, const FrameView& frame,
                       const SourceValues& values);

}  // namespace kiln::guards
