#include "guards/guard_set.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "runtime/aten_bridge.h"
#include "base/dict_order.h"
#include "base/environ.h"
#include "base/py_text.h"

namespace kiln::guards {
namespace {

std::string type_name(PyObject* obj) { return Py_TYPE(obj)->tp_name; }

// The keys of a dict as the text of a tuple, for explanations.
std::string keys_text(PyObject* value) {
  std::vector<base::PyRef> keys;
  if (!value || !PyDict_Check(value) || !base::dict_keys_in_order(value, keys)) {
    PyErr_Clear();
    return "(unreadable)";
  }
  base::PyRef tuple = base::PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(keys.size())));
  for (size_t i = 0; i < keys.size(); ++i) {
    Py_INCREF(keys[i].get());
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), keys[i].get());
  }
  return base::py_repr(tuple.get());
}

// "off", "cpu bfloat16", "cuda bfloat16", "cpu bfloat16, cuda float16".
std::string describe_autocast(const runtime::AutocastState& state) {
  if (!state.any()) return "off";
  std::string text;
  if (state.cpu) text = std::string("cpu ") + graph::dtype_name(state.cpu_dtype);
  if (state.cuda) text += (text.empty() ? "cuda " : ", cuda ") + std::string(graph::dtype_name(state.cuda_dtype));
  return text;
}

// The instance dicts nn.Module.__call__ consults for per-module hooks
// (hooks registered with_kwargs are in _forward_hooks / _forward_pre_hooks
// too).
constexpr const char* kModuleHookDicts[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                            "_backward_pre_hooks"};
constexpr int kModuleHookDictCount = sizeof(kModuleHookDicts) / sizeof(kModuleHookDicts[0]);

// Returns the name of a non-empty hook dict of `module`, or null when none
// is set. Reads the instance dict directly: no Python code runs.
const char* module_hook_set(PyObject* module) {
  static PyObject* names[kModuleHookDictCount] = {
      PyUnicode_InternFromString(kModuleHookDicts[0]), PyUnicode_InternFromString(kModuleHookDicts[1]),
      PyUnicode_InternFromString(kModuleHookDicts[2]), PyUnicode_InternFromString(kModuleHookDicts[3])};
  PyObject** dict_ptr = _PyObject_GetDictPtr(module);
  if (!dict_ptr || !*dict_ptr) return nullptr;
  for (int i = 0; i < kModuleHookDictCount; ++i) {
    PyObject* hooks = PyDict_GetItemWithError(*dict_ptr, names[i]);
    if (!hooks) {
      PyErr_Clear();
      continue;
    }
    if (!PyDict_Check(hooks) || PyDict_GET_SIZE(hooks) != 0) return kModuleHookDicts[i];
  }
  return nullptr;
}

const char* kind_name(GuardKind kind) {
  switch (kind) {
#define KILN_GUARD_NAME(name, doc) \
  case GuardKind::name: return #name;
    KILN_GUARD_KINDS(KILN_GUARD_NAME)
#undef KILN_GUARD_NAME
  }
  return "?";
}

}  // namespace

GuardSet::~GuardSet() {
  for (Guard& guard : guards_) {
    Py_XDECREF(guard.expected);
    Py_XDECREF(guard.keys);
  }
}

bool GuardSet::has(GuardKind kind, int source) const {
  for (const Guard& guard : guards_) {
    if (guard.kind == kind && guard.source == source) return true;
  }
  return false;
}

void GuardSet::add_tensor_match(int source, const graph::TensorMeta& meta,
                                std::vector<int8_t> dim_symbols) {
  if (has(GuardKind::TensorMatch, source)) return;
  for (int8_t symbol : dim_symbols) symbol_count_ = std::max(symbol_count_, symbol + 1);
  guards_.push_back({.kind = GuardKind::TensorMatch, .source = source, .meta = meta,
                     .dim_symbols = std::move(dim_symbols)});
  indexed_ = false;
}

void GuardSet::add_int_symbol(int source, int8_t symbol) {
  if (has(GuardKind::IntSymbol, source)) return;
  symbol_count_ = std::max(symbol_count_, symbol + 1);
  guards_.push_back({.kind = GuardKind::IntSymbol, .source = source, .dim_symbols = {symbol}});
  indexed_ = false;
}

void GuardSet::add_type_match(int source, PyObject* type) {
  if (has(GuardKind::TypeMatch, source)) return;
  Py_INCREF(type);
  guards_.push_back({.kind = GuardKind::TypeMatch, .source = source, .expected = type});
  indexed_ = false;
}

void GuardSet::add_id_match(int source, PyObject* object) {
  if (has(GuardKind::IdMatch, source)) return;
  // A weak reference lets the object die; once dead it matches nothing, so
  // a new object reusing its address cannot pass for it. Objects without
  // weakref support are held strongly, which also keeps their id unique.
  PyObject* ref = PyWeakref_NewRef(object, nullptr);
  bool weak = ref != nullptr;
  if (!ref) {
    PyErr_Clear();
    Py_INCREF(object);
    ref = object;
  }
  guards_.push_back({.kind = GuardKind::IdMatch, .source = source, .expected = ref, .weak = weak});
  indexed_ = false;
}

// The object an IdMatch guard expects (borrowed), or null once it died.
static PyObject* id_target(const Guard& guard) {
  if (!guard.weak) return guard.expected;
  PyObject* target = PyWeakref_GET_OBJECT(guard.expected);
  return target == Py_None ? nullptr : target;
}

void GuardSet::add_constant_match(int source, PyObject* constant) {
  if (has(GuardKind::ConstantMatch, source)) return;
  Py_INCREF(constant);
  guards_.push_back({.kind = GuardKind::ConstantMatch, .source = source, .expected = constant});
  indexed_ = false;
}

void GuardSet::add_length_match(int source, PyObject* sequence) {
  if (has(GuardKind::LengthMatch, source)) return;
  if (PyObject_Size(sequence) < 0) {
    PyErr_Clear();
    return;
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(sequence));
  Py_INCREF(type);
  guards_.push_back({.kind = GuardKind::LengthMatch,
                     .source = source,
                     .expected = type,
                     .length = PyObject_Size(sequence)});
  indexed_ = false;
}

void GuardSet::add_dict_keys(int source, PyObject* dict, std::vector<base::PyRef> keys) {
  if (has(GuardKind::DictKeys, source)) return;
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(keys.size()));
  if (!tuple) {
    PyErr_Clear();
    return;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    PyObject* key = keys[i].get();
    Py_INCREF(key);
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), key);
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(dict));
  Py_INCREF(type);
  guards_.push_back({.kind = GuardKind::DictKeys,
                     .source = source,
                     .expected = type,
                     .length = static_cast<Py_ssize_t>(keys.size()),
                     .keys = tuple});
  indexed_ = false;
}

void GuardSet::add_grad_mode(bool enabled) {
  if (has(GuardKind::GradMode, -1)) return;
  guards_.push_back({.kind = GuardKind::GradMode, .flag = enabled});
  indexed_ = false;
}

void GuardSet::add_default_dtype(graph::DType dtype) {
  if (has(GuardKind::DefaultDtype, -1)) return;
  Guard guard{.kind = GuardKind::DefaultDtype};
  guard.meta.dtype = dtype;
  guards_.push_back(std::move(guard));
  indexed_ = false;
}

void GuardSet::add_autocast(const runtime::AutocastState& state) {
  if (has(GuardKind::Autocast, -1)) return;
  guards_.push_back({.kind = GuardKind::Autocast, .autocast = state});
  indexed_ = false;
}

void GuardSet::add_default_device(graph::DeviceType type, int8_t index) {
  if (has(GuardKind::DefaultDevice, -1)) return;
  Guard guard{.kind = GuardKind::DefaultDevice};
  guard.meta.device_type = type;
  guard.meta.device_index = index;
  guards_.push_back(std::move(guard));
  indexed_ = false;
}

void GuardSet::add_no_module_hooks(int source) {
  if (has(GuardKind::NoModuleHooks, source)) return;
  guards_.push_back({.kind = GuardKind::NoModuleHooks, .source = source});
  indexed_ = false;
}

void GuardSet::add_has_attr(int source, PyObject* name, bool present, bool generic) {
  for (const Guard& guard : guards_) {
    if (guard.kind == GuardKind::HasAttr && guard.source == source &&
        PyUnicode_Compare(guard.expected, name) == 0) {
      return;
    }
  }
  Py_INCREF(name);
  guards_.push_back(
      {.kind = GuardKind::HasAttr, .source = source, .expected = name, .flag = present, .generic = generic});
  indexed_ = false;
}

void GuardSet::add_env_var(PyObject* name, PyObject* value) {
  for (const Guard& guard : guards_) {
    if (guard.kind == GuardKind::EnvVar && PyObject_RichCompareBool(guard.keys, name, Py_EQ) == 1) return;
  }
  PyErr_Clear();
  Py_INCREF(name);
  Py_XINCREF(value);
  guards_.push_back({.kind = GuardKind::EnvVar, .expected = value, .keys = name});
  indexed_ = false;
}

void GuardSet::add_size_relation(const SizeExpr& lhs, int cmp, const SizeExpr& rhs, bool result) {
  for (const Guard& guard : guards_) {
    if (guard.kind == GuardKind::SizeRelation && guard.lhs == lhs && guard.rhs == rhs && guard.cmp == cmp) return;
  }
  guards_.push_back({.kind = GuardKind::SizeRelation, .flag = result, .lhs = lhs, .rhs = rhs, .cmp = cmp});
  indexed_ = false;
}

void GuardSet::add_same_object(int a, int b) {
  if (a == b) return;
  guards_.push_back({.kind = GuardKind::SameObject, .source = std::max(a, b), .others = {std::min(a, b)}});
  indexed_ = false;
}

void GuardSet::add_distinct(std::vector<int> sources) {
  if (sources.size() < 2) return;
  std::sort(sources.begin(), sources.end());
  const int last = sources.back();  // checked once every one is fetched
  sources.pop_back();
  guards_.push_back({.kind = GuardKind::Distinct, .source = last, .others = std::move(sources)});
  indexed_ = false;
}

void GuardSet::build_index() const {
  by_source_.assign(sources_.size(), {});
  relations_.clear();
  for (int i = 0; i < static_cast<int>(guards_.size()); ++i) {
    if (guards_[i].source >= 0) by_source_[guards_[i].source].push_back(i);
    if (guards_[i].kind == GuardKind::SizeRelation) relations_.push_back(i);
  }
  indexed_ = true;
}

bool GuardSet::holds(const Guard& guard, PyObject* value, const SourceValues& values, int64_t* symbols) const {
  switch (guard.kind) {
    case GuardKind::TensorMatch:
      if (!value || !runtime::is_tensor(value)) return false;
      if (!guard.dim_symbols.empty()) {
        return runtime::tensor_matches_dynamic(value, guard.meta, guard.dim_symbols.data(), symbols,
                                               admits_size_one_ ? 1 : 2);
      }
      return runtime::tensor_matches(value, guard.meta);
    case GuardKind::TypeMatch:
      return value && reinterpret_cast<PyObject*>(Py_TYPE(value)) == guard.expected;
    case GuardKind::IntSymbol: {
      if (!value || !PyLong_CheckExact(value)) return false;
      int overflow = 0;
      const long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
      if (overflow || n < (admits_size_one_ ? 1 : 2)) return false;
      int64_t& bound = symbols[guard.dim_symbols[0]];
      if (bound >= 0) return bound == n;
      bound = n;
      return true;
    }
    case GuardKind::IdMatch:
      return value && value == id_target(guard);
    case GuardKind::ConstantMatch: {
      if (!value) return false;
      if (value == guard.expected) return true;
      if (Py_TYPE(value) != Py_TYPE(guard.expected)) return false;
      if (PyFloat_CheckExact(value)) {
        // Bitwise: -0.0 and 0.0 trace differently (x * -0.0), and a NaN
        // constant must match itself.
        const double a = PyFloat_AS_DOUBLE(value);
        const double b = PyFloat_AS_DOUBLE(guard.expected);
        return std::memcmp(&a, &b, sizeof(double)) == 0;
      }
      int eq = PyObject_RichCompareBool(value, guard.expected, Py_EQ);
      if (eq < 0) PyErr_Clear();
      return eq == 1;
    }
    case GuardKind::LengthMatch:
      if (!value || reinterpret_cast<PyObject*>(Py_TYPE(value)) != guard.expected) return false;
      if (PyTuple_CheckExact(value)) return PyTuple_GET_SIZE(value) == guard.length;
      if (PyList_CheckExact(value)) return PyList_GET_SIZE(value) == guard.length;
      if (PyDict_Check(value)) return PyDict_GET_SIZE(value) == guard.length;
      {
        Py_ssize_t n = PyObject_Size(value);
        if (n < 0) PyErr_Clear();
        return n == guard.length;
      }
    case GuardKind::DictKeys:
      return value && reinterpret_cast<PyObject*>(Py_TYPE(value)) == guard.expected &&
             base::dict_has_keys(value, guard.keys);
    case GuardKind::GradMode:
      return runtime::grad_mode_enabled() == guard.flag;
    case GuardKind::DefaultDtype:
      return runtime::default_dtype() == guard.meta.dtype;
    case GuardKind::DefaultDevice: {
      graph::DeviceType type;
      int8_t index;
      runtime::default_device(&type, &index);
      return type == guard.meta.device_type && index == guard.meta.device_index;
    }
    case GuardKind::Autocast:
      return runtime::autocast_state() == guard.autocast;
    case GuardKind::NoModuleHooks:
      return value && module_hook_set(value) == nullptr;
    case GuardKind::EnvVar: {
      PyObject* now = base::environ_value(guard.keys);
      const bool same = now == guard.expected ||
                        (now && guard.expected && PyObject_RichCompareBool(now, guard.expected, Py_EQ) == 1);
      Py_XDECREF(now);
      PyErr_Clear();
      return same;
    }
    case GuardKind::HasAttr: {
      if (!value) return false;
      if (guard.generic) {
        PyObject* attr = PyObject_GenericGetAttr(value, guard.expected);
        Py_XDECREF(attr);
        PyErr_Clear();
        return (attr != nullptr) == guard.flag;
      }
      const int found = PyObject_HasAttr(value, guard.expected);  // clears any error
      return (found == 1) == guard.flag;
    }
    case GuardKind::SizeRelation: {
      for (const SizeExpr* e : {&guard.lhs, &guard.rhs}) {
        for (const auto& term : e->terms) {
          if (term.first >= symbol_count_ || symbols[term.first] < 0) return false;
        }
      }
      return compare_sizes(guard.cmp, guard.lhs.eval(symbols), guard.rhs.eval(symbols)) == guard.flag;
    }
    case GuardKind::Distinct: {
      if (!value) return false;
      for (size_t i = 0; i < guard.others.size(); ++i) {
        PyObject* a = values.get(guard.others[i]);
        if (a == value) return false;
        for (size_t j = i + 1; j < guard.others.size(); ++j) {
          if (a == values.get(guard.others[j])) return false;
        }
      }
      return true;
    }
    case GuardKind::SameObject:
      return value && value == values.get(guard.others[0]);
  }
  return false;
}

// Note [Last failed guard first]
// An entry that misses tends to miss on the same guard call after call:
// every decode step of generate() checks the first step's static entry,
// whose guards (about 450 for a small transformers model: its config,
// modules, the cache's layers) all hold up to the KV cache's length, read
// late in the trace. So a failed check remembers the guard that failed,
// and the next check tests it first, after the guards of the sources it is
// read through (fetched root first, as the full walk would: a base's type
// guard comes before its attribute is read). When it fails again the
// check ends there; otherwise the walk runs as always, the sources already
// fetched kept. A check that holds forgets the guard. Distinct and
// SameObject guards (they read other sources) and size relations (they need every symbol bound)
// wait for the walk.
bool GuardSet::last_failure_repeats(const FrameView& frame, SourceValues& values) const {
  const int failed = last_failed_.load(std::memory_order_relaxed);
  if (failed < 0 || guards_[failed].source < 0) return false;
  int chain[64];
  int depth = 0;
  for (int id = guards_[failed].source; id >= 0 && depth < 64; id = sources_.at(id).base) chain[depth++] = id;
  if (depth == 64) return false;
  int64_t symbols[kMaxGuardSymbols];
  std::fill_n(symbols, symbol_count_, -1);
  while (depth-- > 0) {
    const int id = chain[depth];
    PyObject* value = fetch_source(sources_, id, frame, values);
    values.set(id, value);
    if (!value) return true;  // the walk fails on it too
    for (int g : by_source_[id]) {
      const GuardKind kind = guards_[g].kind;
      if (kind != GuardKind::Distinct && kind != GuardKind::SameObject && !holds(guards_[g], value, values, symbols)) {
        return true;
      }
    }
  }
  return false;
}

bool GuardSet::check(const FrameView& frame, SourceValues& values) const {
  if (!indexed_) build_index();
  values.reset(sources_.size());
  int64_t symbols[kMaxGuardSymbols];
  std::fill_n(symbols, symbol_count_, -1);
  for (const Guard& guard : guards_) {
    if (guard.source < 0 && guard.kind != GuardKind::SizeRelation && !holds(guard, nullptr, values, symbols)) return false;
  }
  if (last_failure_repeats(frame, values)) return false;
  for (int id = 0; id < sources_.size(); ++id) {
    PyObject* value = values.get(id);  // fetched by last_failure_repeats
    if (!value) {
      value = fetch_source(sources_, id, frame, values);
      values.set(id, value);
    }
    for (int g : by_source_[id]) {
      if (!holds(guards_[g], value, values, symbols)) {
        last_failed_.store(g, std::memory_order_relaxed);
        return false;
      }
    }
    // A source that no longer resolves fails even without a guard on it,
    // since a graph input or a derived guard depends on it.
    if (!value) return false;
  }
  if (!ones_together(symbols)) return false;
  for (int g : relations_) {
    if (!holds(guards_[g], nullptr, values, symbols)) {
      last_failed_.store(g, std::memory_order_relaxed);
      return false;
    }
  }
  // Held: the next check need not test a guard first twice.
  if (last_failed_.load(std::memory_order_relaxed) >= 0) last_failed_.store(-1, std::memory_order_relaxed);
  return true;
}

bool GuardSet::ones_together(const int64_t* symbols) const {
  if (!admits_size_one_) return true;
  int ones = 0, bound = 0;
  for (int i = 0; i < symbol_count_; ++i) {
    if (symbols[i] < 0) continue;
    ++bound;
    ones += symbols[i] == 1;
  }
  return ones == 0 || ones == bound;
}

std::string GuardSet::explain(const Guard& guard, PyObject* value, const int64_t* symbols) const {
  const std::string where = guard.source >= 0 ? sources_.at(guard.source).text : "";
  std::ostringstream out;
  if (guard.kind == GuardKind::GradMode) {
    out << "grad mode is " << (guard.flag ? "disabled" : "enabled") << ", expected "
        << (guard.flag ? "enabled" : "disabled");
    return out.str();
  }
  if (guard.kind == GuardKind::DefaultDtype) {
    out << "the default dtype is " << graph::dtype_name(runtime::default_dtype()) << ", expected "
        << graph::dtype_name(guard.meta.dtype);
    return out.str();
  }
  if (guard.kind == GuardKind::DefaultDevice) {
    graph::DeviceType type;
    int8_t index;
    runtime::default_device(&type, &index);
    out << "the default device is " << graph::device_name(type, index) << ", expected "
        << graph::device_name(guard.meta.device_type, guard.meta.device_index);
    return out.str();
  }
  if (guard.kind == GuardKind::EnvVar) {
    PyObject* now = base::environ_value(guard.keys);
    out << "os.environ[" << base::py_repr(guard.keys) << "] is " << (now ? base::py_repr(now) : "unset")
        << ", expected " << (guard.expected ? base::py_repr(guard.expected) : "unset");
    Py_XDECREF(now);
    PyErr_Clear();
    return out.str();
  }
  if (guard.kind == GuardKind::SizeRelation) {
    const std::string relation =
        guard.lhs.text() + " " + comparison_text(guard.cmp) + " " + guard.rhs.text();
    out << "size relation " << relation << " is " << (guard.flag ? "False" : "True") << " (";
    for (int i = 0; i < symbol_count_; ++i) out << (i ? ", " : "") << "s" << i << "=" << symbols[i];
    out << "), traced with it " << (guard.flag ? "True" : "False");
    return out.str();
  }
  if (guard.kind == GuardKind::Autocast) {
    out << "autocast is " << describe_autocast(runtime::autocast_state()) << ", expected "
        << describe_autocast(guard.autocast);
    return out.str();
  }
  if (!value) {
    out << where << " no longer exists";
    return out.str();
  }
  switch (guard.kind) {
    case GuardKind::TensorMatch:
      if (!runtime::is_tensor(value)) {
        out << where << " is a " << type_name(value) << ", expected a tensor";
      } else if (!guard.dim_symbols.empty()) {
        out << where << ": " << explain_dynamic_mismatch(value, guard, symbols);
      } else {
        out << where << ": " << runtime::describe_tensor_mismatch(value, guard.meta);
      }
      break;
    case GuardKind::TypeMatch:
      out << where << " has type " << type_name(value) << ", expected "
          << reinterpret_cast<PyTypeObject*>(guard.expected)->tp_name;
      break;
    case GuardKind::IdMatch:
      out << where << (id_target(guard) ? " is a different object than when traced"
                                        : " was traced with an object that has since been freed");
      break;
    case GuardKind::ConstantMatch:
      out << where << " == " << base::py_repr(value) << ", expected " << base::py_repr(guard.expected);
      break;
    case GuardKind::IntSymbol: {
      const int symbol = guard.dim_symbols[0];
      if (!PyLong_CheckExact(value)) {
        out << where << " is a " << type_name(value) << ", expected an int (dynamic, s" << symbol << ")";
      } else if (symbols[symbol] >= 0) {
        out << where << " == " << base::py_repr(value) << ", but s" << symbol << " is " << symbols[symbol]
            << " in an earlier input (traced as equal sizes)";
      } else {
        out << where << " == " << base::py_repr(value) << ", but dynamic int s" << symbol
            << " was traced for values >= " << (admits_size_one_ ? 1 : 2);
      }
      break;
    }
    case GuardKind::LengthMatch:
      out << where << " has type " << type_name(value) << " and length "
          << PyObject_Length(value) << ", expected "
          << reinterpret_cast<PyTypeObject*>(guard.expected)->tp_name << " of length "
          << guard.length;
      PyErr_Clear();
      break;
    case GuardKind::DictKeys:
      out << where << " is " << type_name(value) << " with keys " << keys_text(value)
          << ", expected " << reinterpret_cast<PyTypeObject*>(guard.expected)->tp_name << " with keys "
          << base::py_repr(guard.keys);
      break;
    case GuardKind::GradMode:
    case GuardKind::DefaultDtype:
    case GuardKind::DefaultDevice:
    case GuardKind::Autocast:
      break;
    case GuardKind::NoModuleHooks:
      out << where << "." << module_hook_set(value) << " is not empty: hooks were registered";
      break;
    case GuardKind::EnvVar:
    case GuardKind::SizeRelation:
      break;
    case GuardKind::HasAttr:
      out << where << (guard.flag ? " lacks" : " has") << " the attribute " << base::py_repr(guard.expected)
          << (guard.flag ? ", which it had when traced" : ", which it lacked when traced");
      break;
    case GuardKind::Distinct: {
      out << "two of " << where;
      for (int other : guard.others) out << ", " << sources_.at(other).text;
      out << " are one object; they were distinct objects when traced";
      break;
    }
    case GuardKind::SameObject:
      out << where << " is not " << sources_.at(guard.others[0]).text << ", which it was when traced";
      break;
  }
  return out.str();
}

std::string GuardSet::check_verbose(const FrameView& frame) const {
  if (!indexed_) build_index();
  int64_t symbols[kMaxGuardSymbols];
  std::fill_n(symbols, symbol_count_, -1);
  SourceValues values(sources_.size());
  for (const Guard& guard : guards_) {
    if (guard.source < 0 && guard.kind != GuardKind::SizeRelation && !holds(guard, nullptr, values, symbols)) {
      return explain(guard, nullptr, symbols);
    }
  }
  for (int id = 0; id < sources_.size(); ++id) {
    PyObject* value = fetch_source(sources_, id, frame, values);
    values.set(id, value);
    for (int g : by_source_[id]) {
      // explain() must see the bindings from before this guard ran.
      int64_t before[kMaxGuardSymbols];
      std::copy_n(symbols, symbol_count_, before);
      if (!holds(guards_[g], value, values, symbols)) return explain(guards_[g], value, before);
    }
    if (!value) return sources_.at(id).text + " no longer exists";
  }
  if (!ones_together(symbols)) {
    std::ostringstream out;
    out << "dynamic sizes (";
    for (int i = 0; i < symbol_count_; ++i) out << (i ? ", " : "") << "s" << i << "=" << symbols[i];
    out << ") mix 1 with other sizes; size 1 was traced only with every dynamic size 1";
    return out.str();
  }
  for (int g : relations_) {
    if (!holds(guards_[g], nullptr, values, symbols)) return explain(guards_[g], nullptr, symbols);
  }
  return "";
}

std::vector<GuardSet::SizeChange> GuardSet::size_changes(const FrameView& frame) const {
  if (!indexed_) build_index();
  std::vector<SizeChange> changes;
  SourceValues values(sources_.size());
  for (int id = 0; id < sources_.size(); ++id) {
    PyObject* value = fetch_source(sources_, id, frame, values);
    values.set(id, value);
    if (!value) break;  // later sources may derive from this one
    if (PyLong_CheckExact(value)) {
      // An int guarded by value whose value alone changed (Note [Dynamic
      // ints] in tracer/dynamic_shapes.cpp).
      for (int g : by_source_[id]) {
        const Guard& guard = guards_[g];
        if (guard.kind != GuardKind::ConstantMatch || !PyLong_CheckExact(guard.expected)) continue;
        int overflow = 0;
        const long long now = PyLong_AsLongLongAndOverflow(value, &overflow);
        const long long traced = PyLong_AsLongLongAndOverflow(guard.expected, &overflow);
        if (!overflow && now != traced) changes.push_back({sources_.at(id).text, -1, traced, now});
      }
      continue;
    }
    if (!runtime::is_tensor(value)) continue;
    for (int g : by_source_[id]) {
      const Guard& guard = guards_[g];
      if (guard.kind != GuardKind::TensorMatch) continue;
      graph::TensorMeta actual;
      runtime::read_tensor_meta(value, &actual);
      const graph::TensorMeta& expected = guard.meta;
      if (actual.dtype != expected.dtype || actual.device_type != expected.device_type ||
          actual.device_index != expected.device_index ||
          actual.requires_grad != expected.requires_grad ||
          actual.sizes.size() != expected.sizes.size()) {
        continue;
      }
      for (size_t d = 0; d < actual.sizes.size(); ++d) {
        const bool dynamic = d < guard.dim_symbols.size() && guard.dim_symbols[d] >= 0;
        if (!dynamic && actual.sizes[d] != expected.sizes[d]) {
          changes.push_back({sources_.at(id).text, static_cast<int>(d), expected.sizes[d], actual.sizes[d]});
        }
      }
    }
  }
  return changes;
}

std::vector<std::pair<std::string, int>> GuardSet::dynamic_dims() const {
  std::vector<std::pair<std::string, int>> dims;
  for (const Guard& guard : guards_) {
    if (guard.kind == GuardKind::IntSymbol) dims.emplace_back(sources_.at(guard.source).text, -1);
    if (guard.kind != GuardKind::TensorMatch) continue;
    for (size_t d = 0; d < guard.dim_symbols.size(); ++d) {
      if (guard.dim_symbols[d] >= 0) dims.emplace_back(sources_.at(guard.source).text, static_cast<int>(d));
    }
  }
  return dims;
}

std::vector<std::string> GuardSet::tensor_sources() const {
  std::vector<std::string> texts;
  for (const Guard& guard : guards_) {
    if (guard.kind == GuardKind::TensorMatch) texts.push_back(sources_.at(guard.source).text);
  }
  return texts;
}

std::string GuardSet::explain_dynamic_mismatch(PyObject* value, const Guard& guard,
                                               const int64_t* symbols) const {
  graph::TensorMeta actual;
  runtime::read_tensor_meta(value, &actual);
  const graph::TensorMeta& expected = guard.meta;
  std::ostringstream out;
  if (actual.sizes.size() == expected.sizes.size()) {
    for (size_t d = 0; d < actual.sizes.size(); ++d) {
      const int symbol = guard.dim_symbols[d];
      const int64_t size = actual.sizes[d];
      if (symbol < 0 && size != expected.sizes[d]) {
        out << "size of dim " << d << " is " << size << ", expected " << expected.sizes[d];
        return out.str();
      }
      if (symbol >= 0 && size < (admits_size_one_ ? 1 : 2)) {
        out << "size of dim " << d << " is " << size << ", but dynamic dim s" << symbol
            << " was traced for sizes >= " << (admits_size_one_ ? 1 : 2);
        return out.str();
      }
      if (symbol >= 0 && symbols[symbol] >= 0 && size != symbols[symbol]) {
        out << "size of dim " << d << " is " << size << ", but s" << symbol << " is "
            << symbols[symbol] << " in an earlier input (traced as equal sizes)";
        return out.str();
      }
    }
    if (actual.strides != graph::contiguous_strides(actual.sizes) && actual.dtype == expected.dtype &&
        actual.device_type == expected.device_type && actual.requires_grad == expected.requires_grad) {
      return "not contiguous; a tensor with dynamic sizes was traced contiguous";
    }
  }
  return runtime::describe_tensor_mismatch(value, expected);
}

std::string GuardSet::describe(const Guard& guard) const {
  std::ostringstream out;
  out << kind_name(guard.kind);
  if (guard.source >= 0) out << " " << sources_.at(guard.source).text;
  switch (guard.kind) {
    case GuardKind::TensorMatch: {
      if (guard.dim_symbols.empty()) {
        out << " " << graph::format_tensor_meta(guard.meta);
        break;
      }
      std::vector<std::string> names;
      for (int8_t symbol : guard.dim_symbols) names.push_back(symbol < 0 ? "" : "s" + std::to_string(symbol));
      out << " " << graph::format_tensor_meta(guard.meta, &names)
          << (admits_size_one_ ? " (dynamic dims >= 2 or all 1, contiguous)" : " (dynamic dims >= 2, contiguous)");
      break;
    }
    case GuardKind::TypeMatch:
      out << " " << reinterpret_cast<PyTypeObject*>(guard.expected)->tp_name;
      break;
    case GuardKind::IdMatch: {
      PyObject* target = id_target(guard);
      out << " <" << (target ? type_name(target) : std::string("dead object")) << ">";
      break;
    }
    case GuardKind::ConstantMatch: out << " " << base::py_repr(guard.expected); break;
    case GuardKind::IntSymbol:
      out << " s" << static_cast<int>(guard.dim_symbols[0]) << (admits_size_one_ ? " (an int >= 2, or all 1)" : " (an int >= 2)");
      break;
    case GuardKind::LengthMatch:
      out << " " << reinterpret_cast<PyTypeObject*>(guard.expected)->tp_name << " len="
          << guard.length;
      break;
    case GuardKind::DictKeys:
      out << " " << reinterpret_cast<PyTypeObject*>(guard.expected)->tp_name << " keys="
          << base::py_repr(guard.keys);
      break;
    case GuardKind::GradMode: out << (guard.flag ? " enabled" : " disabled"); break;
    case GuardKind::DefaultDtype: out << " " << graph::dtype_name(guard.meta.dtype); break;
    case GuardKind::DefaultDevice:
      out << " " << graph::device_name(guard.meta.device_type, guard.meta.device_index);
      break;
    case GuardKind::Autocast: out << " " << describe_autocast(guard.autocast); break;
    case GuardKind::NoModuleHooks: break;
    case GuardKind::HasAttr:
      out << (guard.flag ? " has " : " lacks ") << base::py_repr(guard.expected)
          << (guard.generic ? " (object.__getattribute__)" : "");
      break;
    case GuardKind::EnvVar:
      out << " os.environ[" << base::py_repr(guard.keys) << "] "
          << (guard.expected ? "== " + base::py_repr(guard.expected) : std::string("unset"));
      break;
    case GuardKind::SizeRelation:
      out << " " << guard.lhs.text() << " " << comparison_text(guard.cmp) << " " << guard.rhs.text() << " is "
          << (guard.flag ? "True" : "False");
      break;
    case GuardKind::Distinct:
      out << " and";
      for (size_t i = 0; i < guard.others.size(); ++i) out << (i ? ", " : " ") << sources_.at(guard.others[i]).text;
      out << " are distinct objects";
      break;
    case GuardKind::SameObject:
      out << " is " << sources_.at(guard.others[0]).text;
      break;
  }
  return out.str();
}

std::string GuardSet::format() const {
  std::string out;
  for (const Guard& guard : guards_) out += describe(guard) + "\n";
  return out;
}

}  // namespace kiln::guards
