// Methods of the containers the trace models item by item (list, dict,
// tuple), applied to the symbolic items. Changes to a container the caller
// can see are written back after the graph (Note [Side effects]).
#include <algorithm>
#include "base/class_dict.h"
#include "base/dict_order.h"

#include "stdlib/model_registry.h"
#include "stdlib/model_support.h"

namespace kiln::stdlib {
namespace {

ValuePtr none(BuiltinContext& context) { return context.constant(Py_None); }

// The container a bound method acts on; aborts for other callers of the
// same C method (a bound method of a real object).
const ValuePtr& self_of(BuiltinContext& context, const BuiltinCall& call, ValueKind kind) {
  const ValuePtr& callee = call.callee;
  if (!callee->is(ValueKind::ContainerMethod) || !callee->self ||
      (!callee->self->is(kind) && kind != ValueKind::Null)) {
    context.abort(BreakCode::UnsupportedCall, "call of " + tracer::describe_value(*callee));
  }
  return callee->self;
}

// Position of a constant key in a dict value, or -1.
int find_key(BuiltinContext& context, const BuiltinCall& call, const Value& dict, const ValuePtr& key) {
  if (!tracer::is_key_value(*key)) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() with a non-constant key");
  }
  for (size_t i = 0; i < dict.keys.size(); ++i) {
    const int equal = PyObject_RichCompareBool(dict.keys[i].get(), key->obj.get(), Py_EQ);
    if (equal == 1) return static_cast<int>(i);
    if (equal < 0) PyErr_Clear();
  }
  return -1;
}

Py_ssize_t normalized_index(BuiltinContext& context, const ValuePtr& index, size_t size, const char* what) {
  Py_ssize_t i = int_argument(context, *index, what);
  if (i < 0) i += static_cast<Py_ssize_t>(size);
  return i;
}

ValuePtr list_append(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::List);
  expect_args(context, call, 1, 1);
  context.note_write(self);
  self->items.push_back(call.args[0]);
  return none(context);
}

ValuePtr list_extend(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::List);
  expect_args(context, call, 1, 1);
  std::vector<ValuePtr> items = context.unpack(call.args[0]);
  context.note_write(self);
  self->items.insert(self->items.end(), items.begin(), items.end());
  return none(context);
}

ValuePtr list_insert(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::List);
  expect_args(context, call, 2, 2);
  const Py_ssize_t n = static_cast<Py_ssize_t>(self->items.size());
  const Py_ssize_t i = std::clamp<Py_ssize_t>(normalized_index(context, call.args[0], self->items.size(), "list.insert()'s index"), 0, n);
  context.note_write(self);
  self->items.insert(self->items.begin() + i, call.args[1]);
  return none(context);
}

ValuePtr list_pop(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::List);
  expect_args(context, call, 0, 1);
  if (self->items.empty()) context.abort(BreakCode::PythonException, "IndexError: pop from empty list");
  const Py_ssize_t n = static_cast<Py_ssize_t>(self->items.size());
  const Py_ssize_t i = call.args.empty() ? n - 1 : normalized_index(context, call.args[0], self->items.size(), "list.pop()'s index");
  if (i < 0 || i >= n) context.abort(BreakCode::PythonException, "IndexError: pop index out of range");
  context.note_write(self);
  ValuePtr item = self->items[i];
  self->items.erase(self->items.begin() + i);
  return item;
}

ValuePtr list_reverse(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::List);
  expect_args(context, call, 0, 0);
  context.note_write(self);
  std::reverse(self->items.begin(), self->items.end());
  return none(context);
}

ValuePtr list_clear(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::List);
  expect_args(context, call, 0, 0);
  context.note_write(self);
  self->items.clear();
  return none(context);
}

ValuePtr list_copy(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::List);
  expect_args(context, call, 0, 0);
  return tracer::make_sequence(ValueKind::List, self->items);
}

// list/tuple .index(x) and .count(x), for constant x among constant items.
ValuePtr sequence_search(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Null);
  expect_args(context, call, 1, 1);
  const ValuePtr& needle = call.args[0];
  if (!needle->is(ValueKind::Constant)) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() of " + tracer::describe_value(*needle));
  }
  Py_ssize_t count = 0;
  Py_ssize_t first = -1;
  for (size_t i = 0; i < self->items.size(); ++i) {
    const ValuePtr& item = self->items[i];
    if (!item->is(ValueKind::Constant)) {
      // A tensor's == is elementwise: what eager Python does here depends on data.
      context.abort(BreakCode::UnsupportedCall, call.name + "() over " + tracer::describe_value(*item));
    }
    const int equal = PyObject_RichCompareBool(item->obj.get(), needle->obj.get(), Py_EQ);
    if (equal < 0) context.abort_python_error(call.name + "()");
    if (equal == 1) {
      if (first < 0) first = static_cast<Py_ssize_t>(i);
      ++count;
    }
  }
  const bool is_index = call.name.size() > 6 && call.name.compare(call.name.size() - 6, 6, ".index") == 0;
  if (is_index && first < 0) context.abort(BreakCode::PythonException, "ValueError: " + call.name + "(x): x not in sequence");
  return int_value(context, is_index ? first : count);
}

ValuePtr dict_get(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 1, 2);
  const int i = find_key(context, call, *self, call.args[0]);
  if (i >= 0) return self->items[i];
  return call.args.size() == 2 ? call.args[1] : none(context);
}

// dict.keys(), .values() and .items(), as lists (no live views).
ValuePtr dict_view(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 0, 0);
  const char kind = call.name[call.name.rfind('.') + 1];  // dict.[k]eys, .[v]alues, .[i]tems
  std::vector<ValuePtr> out;
  for (size_t i = 0; i < self->items.size(); ++i) {
    ValuePtr key = context.constant(self->keys[i].get());
    if (kind == 'k') out.push_back(key);
    if (kind == 'v') out.push_back(self->items[i]);
    if (kind == 'i') out.push_back(tracer::make_sequence(ValueKind::Tuple, {key, self->items[i]}));
  }
  return tracer::make_sequence(ValueKind::List, std::move(out));
}

ValuePtr dict_copy(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 0, 0);
  return tracer::copy_dict(*self);
}

ValuePtr dict_clear(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 0, 0);
  context.note_write(self);
  self->items.clear();
  self->keys.clear();
  return none(context);
}

// The `last` flag of OrderedDict.popitem / move_to_end: a positional or
// keyword argument after `positional` others, true by default.
bool last_flag(BuiltinContext& context, const BuiltinCall& call, size_t positional) {
  const ValuePtr* flag = call.args.size() > positional ? &call.args[positional] : nullptr;
  for (const auto& [name, value] : call.kwargs) {
    if (name != "last" || flag) context.abort(BreakCode::UnsupportedCall, call.name + "() with keyword " + name);
    flag = &value;
  }
  if (!flag) return true;
  if (!(*flag)->is(ValueKind::Constant)) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() with a non-constant last=");
  }
  const int truth = PyObject_IsTrue((*flag)->obj.get());
  if (truth < 0) context.abort(BreakCode::PythonException, context.take_python_error());
  return truth == 1;
}

// dict.popitem() (the last item) and OrderedDict.popitem(last=True).
ValuePtr dict_popitem(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  const bool ordered = self->tuple_type.get() != nullptr;
  expect_args(context, call, 0, ordered ? 1 : 0);
  const bool last = ordered ? last_flag(context, call, 0) : true;
  if (self->items.empty()) context.abort(BreakCode::PythonException, "KeyError in " + call.name);
  const size_t i = last ? self->items.size() - 1 : 0;
  context.note_write(self);
  ValuePtr pair = tracer::make_sequence(ValueKind::Tuple, {context.constant(self->keys[i].get()), self->items[i]});
  self->items.erase(self->items.begin() + static_cast<std::ptrdiff_t>(i));
  self->keys.erase(self->keys.begin() + static_cast<std::ptrdiff_t>(i));
  return pair;
}

// OrderedDict.move_to_end(key, last=True).
ValuePtr ordered_dict_move_to_end(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 1, 2);
  const bool last = last_flag(context, call, 1);
  const int i = find_key(context, call, *self, call.args[0]);
  if (i < 0) context.abort(BreakCode::PythonException, "KeyError in " + call.name);
  context.note_write(self);
  PyRef key = self->keys[i];
  ValuePtr item = self->items[i];
  self->keys.erase(self->keys.begin() + i);
  self->items.erase(self->items.begin() + i);
  self->keys.insert(last ? self->keys.end() : self->keys.begin(), key);
  self->items.insert(last ? self->items.end() : self->items.begin(), item);
  return none(context);
}

ValuePtr dict_update(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 1, 1);
  const ValuePtr& other = call.args[0];
  if (!other->is(ValueKind::Dict)) {
    context.abort(BreakCode::UnsupportedCall, "dict.update() with " + tracer::describe_value(*other));
  }
  for (size_t i = 0; i < other->items.size(); ++i) {
    context.store_subscript(self, context.constant(other->keys[i].get()), other->items[i]);
  }
  return none(context);
}

ValuePtr dict_pop(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 1, 2);
  const int i = find_key(context, call, *self, call.args[0]);
  if (i < 0) {
    if (call.args.size() == 2) return call.args[1];
    context.abort(BreakCode::PythonException, "KeyError in dict.pop");
  }
  context.note_write(self);
  ValuePtr item = self->items[i];
  self->items.erase(self->items.begin() + i);
  self->keys.erase(self->keys.begin() + i);
  return item;
}

ValuePtr dict_setdefault(BuiltinContext& context, BuiltinCall& call) {
  const ValuePtr& self = self_of(context, call, ValueKind::Dict);
  expect_args(context, call, 1, 2);
  const int i = find_key(context, call, *self, call.args[0]);
  if (i >= 0) return self->items[i];
  ValuePtr value = call.args.size() == 2 ? call.args[1] : none(context);
  context.store_subscript(self, call.args[0], value);
  return value;
}

// Puts `value` under the constant `key` of a dict the model is building:
// a repeated key keeps its first position and takes the new value.
void put_item(BuiltinContext& context, const std::string& what, Value& dict, const ValuePtr& key,
              const ValuePtr& value) {
  if (!key->is(ValueKind::Constant) || (!PyUnicode_CheckExact(key->obj.get()) && !PyLong_CheckExact(key->obj.get()))) {
    context.abort(BreakCode::UnsupportedCall, what + "() with a key that is not a str or int constant");
  }
  for (size_t i = 0; i < dict.keys.size(); ++i) {
    const int equal = PyObject_RichCompareBool(dict.keys[i].get(), key->obj.get(), Py_EQ);
    if (equal < 0) PyErr_Clear();
    if (equal == 1) {
      dict.items[i] = value;
      return;
    }
  }
  dict.keys.push_back(key->obj);
  dict.items.push_back(value);
}

// dict(...) and OrderedDict(...): from a mapping or an iterable of pairs,
// then keyword arguments; a new container the trace owns.
ValuePtr dict_new(BuiltinContext& context, BuiltinCall& call) {
  if (call.args.size() > 1) context.abort(BreakCode::UnsupportedCall, call.name + "() with several positional arguments");
  ValuePtr dict = tracer::make_sequence(ValueKind::Dict, {});
  if (call.name == "OrderedDict") dict->tuple_type = PyRef::borrow(base::ordered_dict_type());
  if (!call.args.empty()) {
    const ValuePtr& source = call.args[0];
    if (source->is(ValueKind::Dict)) {
      for (size_t i = 0; i < source->items.size(); ++i) {
        put_item(context, call.name, *dict, context.constant(source->keys[i].get()), source->items[i]);
      }
    } else {
      for (const ValuePtr& pair : context.unpack(source)) {
        std::vector<ValuePtr> parts = context.unpack(pair);
        if (parts.size() != 2) context.abort(BreakCode::PythonException, "ValueError: " + call.name + "() sequence element is not a pair");
        put_item(context, call.name, *dict, parts[0], parts[1]);
      }
    }
  }
  for (const auto& [name, value] : call.kwargs) {
    PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
    put_item(context, call.name, *dict, context.constant(key.get()), value);
  }
  return dict;
}

// dict.fromkeys(iterable, value=None): every key (constants) maps to the
// same value, as in Python (transformers' cache layers start their state
// dicts so). Bound to a dict subclass it would make that class: not modelled.
ValuePtr dict_fromkeys(BuiltinContext& context, BuiltinCall& call) {
  PyObject* bound = call.callee->obj ? PyCFunction_GetSelf(call.callee->obj.get()) : nullptr;
  if (!PyCFunction_Check(call.callee->obj.get()) || bound != reinterpret_cast<PyObject*>(&PyDict_Type)) {
    context.abort(BreakCode::UnsupportedCall, "fromkeys of a dict subclass");
  }
  if (call.args.empty() || call.args.size() > 2 || !call.kwargs.empty()) {
    context.abort(BreakCode::PythonException, "TypeError: dict.fromkeys takes an iterable and an optional value");
  }
  const ValuePtr value = call.args.size() == 2 ? call.args[1] : context.constant(Py_None);
  ValuePtr dict = tracer::make_sequence(ValueKind::Dict, {});
  for (const ValuePtr& key : context.unpack(call.args[0])) put_item(context, call.name, *dict, key, value);
  return dict;
}

// defaultdict(factory, ...): a dict whose missing keys the subscript fills
// by calling factory (FrameTracer::subscript); the rest reads as dict(...).
ValuePtr defaultdict_new(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr factory;
  if (!call.args.empty()) {
    factory = call.args.front();
    call.args.erase(call.args.begin());
  }
  if (factory && factory->is(ValueKind::Constant) && factory->obj.get() == Py_None) factory = nullptr;
  // The factory is rebuilt into the result as a constant: a function the
  // trace made (a lambda) has no object to rebuild from.
  if (factory && (!factory->obj || factory->is(ValueKind::LocalFunction))) {
    context.abort(BreakCode::UnsupportedCall, "defaultdict() of a function the trace made");
  }
  if (factory && !PyCallable_Check(factory->obj.get())) {
    context.abort(BreakCode::PythonException, "TypeError: first argument must be callable or None");
  }
  ValuePtr dict = dict_new(context, call);
  dict->tuple_type = PyRef::borrow(base::defaultdict_type());
  dict->self = factory;
  return dict;
}

}  // namespace

void register_containers_model(ModelRegistry& registry) {
  registry.add("builtins", "dict", dict_new);
  if (base::PyRef fromkeys = base::PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyDict_Type), "fromkeys"))) {
    registry.add_object(fromkeys.get(), "dict.fromkeys", dict_fromkeys);
  }
  PyErr_Clear();
  if (PyObject* ordered = base::ordered_dict_type()) registry.add_object(ordered, "OrderedDict", dict_new);
  if (PyObject* defaults = base::defaultdict_type()) registry.add_object(defaults, "defaultdict", defaultdict_new);
  struct Entry {
    PyTypeObject* type;
    const char* name;
    ModelFn fn;
  };
  static const Entry kEntries[] = {
      {&PyList_Type, "append", list_append},   {&PyList_Type, "extend", list_extend},
      {&PyList_Type, "insert", list_insert},   {&PyList_Type, "pop", list_pop},
      {&PyList_Type, "reverse", list_reverse}, {&PyList_Type, "clear", list_clear},
      {&PyList_Type, "copy", list_copy},       {&PyList_Type, "index", sequence_search},
      {&PyList_Type, "count", sequence_search}, {&PyTuple_Type, "index", sequence_search},
      {&PyTuple_Type, "count", sequence_search}, {&PyDict_Type, "get", dict_get},
      {&PyDict_Type, "keys", dict_view},       {&PyDict_Type, "values", dict_view},
      {&PyDict_Type, "items", dict_view},      {&PyDict_Type, "copy", dict_copy},
      {&PyDict_Type, "update", dict_update},   {&PyDict_Type, "pop", dict_pop},
      {&PyDict_Type, "setdefault", dict_setdefault}, {&PyDict_Type, "clear", dict_clear},
      {&PyDict_Type, "popitem", dict_popitem},
  };
  for (const Entry& entry : kEntries) {
    base::PyRef descriptor = base::own_class_attr(entry.type, entry.name);
    if (!descriptor) continue;
    registry.add_object(descriptor.get(), std::string(entry.type->tp_name) + "." + entry.name, entry.fn);
  }
  // OrderedDict overrides most of dict's methods with its own descriptors
  // (same meaning, its own order) and adds move_to_end; a method of it not
  // listed here has no model and breaks the graph.
  struct OrderedEntry {
    const char* name;
    ModelFn fn;
  };
  static const OrderedEntry kOrderedEntries[] = {
      {"keys", dict_view},   {"values", dict_view},  {"items", dict_view},
      {"copy", dict_copy},   {"update", dict_update}, {"pop", dict_pop},
      {"setdefault", dict_setdefault}, {"clear", dict_clear}, {"popitem", dict_popitem},
      {"move_to_end", ordered_dict_move_to_end},
  };
  auto* ordered = reinterpret_cast<PyTypeObject*>(base::ordered_dict_type());
  for (const OrderedEntry& entry : kOrderedEntries) {
    if (!ordered) break;
    base::PyRef descriptor = base::own_class_attr(ordered, entry.name);
    if (!descriptor) continue;  // inherited from dict: the dict entry serves
    registry.add_object(descriptor.get(), std::string("OrderedDict.") + entry.name, entry.fn);
  }
  // defaultdict's own copy keeps its factory (dict_copy copies it too).
  if (auto* defaults = reinterpret_cast<PyTypeObject*>(base::defaultdict_type())) {
    if (base::PyRef copy = base::own_class_attr(defaults, "copy")) {
      registry.add_object(copy.get(), "defaultdict.copy", dict_copy);
    }
  }
}

}  // namespace kiln::stdlib
