#include "guards/source.h"

#include "base/py_text.h"

namespace kiln::guards {
namespace {

std::string py_name(PyObject* name) {
  const char* utf8 = PyUnicode_AsUTF8(name);
  if (!utf8) {
    PyErr_Clear();
    return "?";
  }
  return utf8;
}

bool same_key(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (!a || !b || Py_TYPE(a) != Py_TYPE(b)) return false;
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

}  // namespace

SourceTable::~SourceTable() {
  for (auto& source : sources_) {
    Py_XDECREF(source->name);
    Py_XDECREF(source->dict);
  }
}

int SourceTable::intern(Source source) {
  for (auto& existing : sources_) {
    if (existing->kind == source.kind && existing->base == source.base &&
        existing->index == source.index && existing->dict == source.dict &&
        same_key(existing->name, source.name)) {
      return existing->id;
    }
  }
  source.id = size();
  Py_XINCREF(source.name);
  Py_XINCREF(source.dict);
  sources_.push_back(std::make_unique<Source>(std::move(source)));
  return sources_.back()->id;
}

int SourceTable::local(int index, const std::string& local_name) {
  return intern({.kind = SourceKind::Local, .index = index, .text = "L['" + local_name + "']"});
}

int SourceTable::global(PyObject* name) {
  return intern({.kind = SourceKind::Global, .name = name, .text = "G['" + py_name(name) + "']"});
}

int SourceTable::global_in(PyObject* globals_dict, PyObject* name) {
  // A module's globals name the module; a class's dict (a class attribute
  // guarded in place) names the class.
  PyObject* module_name = PyDict_GetItemString(globals_dict, "__name__");
  if (!module_name || !PyUnicode_Check(module_name)) module_name = PyDict_GetItemString(globals_dict, "__qualname__");
  std::string module = module_name && PyUnicode_Check(module_name) ? py_name(module_name) : "?";
  return intern({.kind = SourceKind::GlobalIn,
                 .name = name,
                 .dict = globals_dict,
                 .text = "G[" + module + "]['" + py_name(name) + "']"});
}

int SourceTable::closure_cell(int index, const std::string& var_name) {
  return intern({.kind = SourceKind::ClosureCell, .index = index, .text = "C['" + var_name + "']"});
}

int SourceTable::attr(int base, PyObject* name) {
  return intern({.kind = SourceKind::Attr,
                 .base = base,
                 .name = name,
                 .text = at(base).text + "." + py_name(name)});
}

int SourceTable::generic_attr(int base, PyObject* name) {
  return intern({.kind = SourceKind::GenericAttr,
                 .base = base,
                 .name = name,
                 .text = "object.__getattribute__(" + at(base).text + ", '" + py_name(name) + "')"});
}

int SourceTable::dict_item(int base, PyObject* key) {
  return intern({.kind = SourceKind::DictItem,
                 .base = base,
                 .name = key,
                 .text = at(base).text + "[" + base::py_repr(key) + "]"});
}

int SourceTable::index(int base, int position) {
  return intern({.kind = SourceKind::Index,
                 .base = base,
                 .index = position,
                 .text = at(base).text + "[" + std::to_string(position) + "]"});
}

void SourceValues::clear() {
  for (int i = 0; i < size_; ++i) Py_CLEAR(data_[i]);
  size_ = 0;
}

void SourceValues::reset(int count) {
  clear();
  if (count <= kInline) {
    data_ = inline_;
  } else {
    heap_.assign(count, nullptr);
    data_ = heap_.data();
  }
  size_ = count;
}

PyObject* fetch_source(const SourceTable& table, int id, const FrameView& frame,
                       const SourceValues& values) {
  const Source& source = table.at(id);
  PyObject* base = source.base >= 0 ? values.get(source.base) : nullptr;
  if (source.base >= 0 && !base) return nullptr;
  switch (source.kind) {
    case SourceKind::Local: {
      PyObject* value = frame.localsplus[source.index];
      Py_XINCREF(value);
      return value;
    }
    case SourceKind::Global:
    case SourceKind::GlobalIn: {
      PyObject* globals = source.kind == SourceKind::Global ? frame.globals : source.dict;
      PyObject* value = PyDict_GetItemWithError(globals, source.name);
      if (!value && !PyErr_Occurred() && frame.builtins) {
        value = PyDict_GetItemWithError(frame.builtins, source.name);
      }
      if (!value) {
        PyErr_Clear();
        return nullptr;
      }
      Py_INCREF(value);
      return value;
    }
    case SourceKind::ClosureCell: {
      if (!frame.closure || source.index >= PyTuple_GET_SIZE(frame.closure)) return nullptr;
      PyObject* value = PyCell_GET(PyTuple_GET_ITEM(frame.closure, source.index));
      Py_XINCREF(value);
      return value;
    }
    case SourceKind::Attr: {
      PyObject* value = PyObject_GetAttr(base, source.name);
      if (!value) PyErr_Clear();
      return value;
    }
    case SourceKind::GenericAttr: {
      PyObject* value = PyObject_GenericGetAttr(base, source.name);
      if (!value) PyErr_Clear();
      return value;
    }
    case SourceKind::DictItem: {
      // A dict subclass's own storage, as the trace read it (Note
      // [Dict-backed objects]): no __getitem__ override or __missing__ runs.
      PyObject* value = nullptr;
      if (PyDict_Check(base)) {
        value = PyDict_GetItemWithError(base, source.name);
        Py_XINCREF(value);
      } else {
        value = PyObject_GetItem(base, source.name);
      }
      if (!value) PyErr_Clear();
      return value;
    }
    case SourceKind::Index: {
      if (PyTuple_CheckExact(base)) {
        if (source.index >= PyTuple_GET_SIZE(base)) return nullptr;
        PyObject* value = PyTuple_GET_ITEM(base, source.index);
        Py_INCREF(value);
        return value;
      }
      if (PyList_CheckExact(base)) {
        if (source.index >= PyList_GET_SIZE(base)) return nullptr;
        PyObject* value = PyList_GET_ITEM(base, source.index);
        Py_INCREF(value);
        return value;
      }
      PyObject* value = PySequence_GetItem(base, source.index);
      if (!value) PyErr_Clear();
      return value;
    }
  }
  return nullptr;
}

}  // namespace kiln::guards
