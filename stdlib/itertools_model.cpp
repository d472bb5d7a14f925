// itertools over known items: each call evaluates eagerly into an Iterator
// value, like map() and generator expressions (see builtins_model.cpp).
// The endless iterators (count, repeat without a count) stay StdObjects
// that only islice, zip, map and next take items from.
#include <algorithm>
#include "base/class_dict.h"

#include "stdlib/model_registry.h"
#include "stdlib/model_support.h"

namespace kiln::stdlib {
namespace {

ValuePtr iterator_of(std::vector<ValuePtr> items) {
  return tracer::make_sequence(ValueKind::Iterator, std::move(items));
}

ValuePtr tuple_of(std::vector<ValuePtr> items) { return tracer::make_sequence(ValueKind::Tuple, std::move(items)); }

// unpack(), refusing endless iterators with a message naming the call.
std::vector<ValuePtr> items_of(BuiltinContext& context, const BuiltinCall& call, const ValuePtr& iterable) {
  if (is_unbounded(*iterable)) {
    context.abort(BreakCode::UnsupportedCall, call.name + "() over an endless " + tracer::describe_value(*iterable));
  }
  return context.unpack(iterable);
}

ValuePtr chain_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 0, SIZE_MAX);
  std::vector<ValuePtr> items;
  for (const ValuePtr& iterable : call.args) {
    std::vector<ValuePtr> part = items_of(context, call, iterable);
    items.insert(items.end(), part.begin(), part.end());
  }
  return iterator_of(std::move(items));
}

ValuePtr chain_from_iterable_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  std::vector<ValuePtr> items;
  for (const ValuePtr& iterable : items_of(context, call, call.args[0])) {
    std::vector<ValuePtr> part = items_of(context, call, iterable);
    items.insert(items.end(), part.begin(), part.end());
  }
  return iterator_of(std::move(items));
}

// Runs the real itertools function of the call on `args` (ranges standing
// for the pools): combinatorics on positions, so the items themselves
// (tensors included) never reach Python. Returns the index tuples.
std::vector<std::vector<size_t>> index_tuples(BuiltinContext& context, const BuiltinCall& call,
                                              PyObject* args, PyObject* kwargs) {
  PyRef iterator = PyRef::steal(PyObject_Call(call.callee->obj.get(), args, kwargs));
  PyRef tuples = iterator ? PyRef::steal(PySequence_List(iterator.get())) : PyRef();
  if (!tuples) context.abort_python_error(call.name + "() raised");
  std::vector<std::vector<size_t>> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tuples.get()); ++i) {
    PyObject* tuple = PyList_GET_ITEM(tuples.get(), i);
    std::vector<size_t> indices;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(tuple); ++j) {
      indices.push_back(PyLong_AsSize_t(PyTuple_GET_ITEM(tuple, j)));
    }
    out.push_back(std::move(indices));
  }
  return out;
}

// product(*iterables, repeat=n), combinations(xs, r), permutations(xs[, r]),
// combinations_with_replacement(xs, r).
ValuePtr combinatoric_model(BuiltinContext& context, BuiltinCall& call) {
  const bool is_product = call.name == "itertools.product";
  PyRef kwargs;
  if (ValuePtr repeat = take_keyword(call.kwargs, "repeat")) {
    kwargs = PyRef::steal(Py_BuildValue("{s:n}", "repeat", int_argument(context, *repeat, "product()'s repeat")));
  }
  if (ValuePtr r = take_keyword(call.kwargs, "r")) call.args.push_back(r);
  expect_args(context, call, is_product ? 0 : 1, is_product ? SIZE_MAX : 2);
  // Pools become range(len(pool)); combinations' r passes through.
  const size_t n_pools = is_product ? call.args.size() : 1;
  std::vector<std::vector<ValuePtr>> pools;
  PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(call.args.size())));
  for (size_t k = 0; k < call.args.size(); ++k) {
    PyObject* arg;
    if (k < n_pools) {
      pools.push_back(items_of(context, call, call.args[k]));
      arg = PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyRange_Type), "n",
                                  static_cast<Py_ssize_t>(pools.back().size()));
    } else if (is_none(*call.args[k])) {
      arg = Py_NewRef(Py_None);
    } else {
      arg = PyLong_FromSsize_t(int_argument(context, *call.args[k], call.name + "()'s r"));
    }
    if (!arg) context.abort_python_error(call.name);
    PyTuple_SET_ITEM(args.get(), static_cast<Py_ssize_t>(k), arg);
  }
  std::vector<ValuePtr> items;
  for (const std::vector<size_t>& indices : index_tuples(context, call, args.get(), kwargs.get())) {
    std::vector<ValuePtr> tuple;
    for (size_t j = 0; j < indices.size(); ++j) {
      // product(a, b, repeat=2) cycles through the pools: a, b, a, b.
      const std::vector<ValuePtr>& pool = pools[is_product ? j % pools.size() : 0];
      tuple.push_back(pool[indices[j]]);
    }
    items.push_back(tuple_of(std::move(tuple)));
  }
  return iterator_of(std::move(items));
}

// Reads islice's bound: a constant int, or None for "no bound".
Py_ssize_t slice_bound(BuiltinContext& context, const Value& value, Py_ssize_t none_means) {
  if (is_none(value)) return none_means;
  const Py_ssize_t n = int_argument(context, value, "islice()'s bounds");
  if (n < 0) context.abort(BreakCode::PythonException, "ValueError: islice() bounds must be None or >= 0");
  return n;
}

ValuePtr islice_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 4);
  const ValuePtr& source = call.args[0];
  Py_ssize_t start = 0;
  Py_ssize_t stop = -1;  // -1: to the end
  Py_ssize_t step = 1;
  if (call.args.size() == 2) {
    stop = slice_bound(context, *call.args[1], -1);
  } else {
    start = slice_bound(context, *call.args[1], 0);
    stop = slice_bound(context, *call.args[2], -1);
    if (call.args.size() == 4) step = slice_bound(context, *call.args[3], 1);
    if (step == 0) context.abort(BreakCode::PythonException, "ValueError: islice() step must be >= 1");
  }
  std::vector<ValuePtr> items;
  if (is_unbounded(*source)) {
    if (stop < 0) context.abort(BreakCode::UnsupportedCall, "islice() without a stop over an endless iterator");
    items = take_unbounded(context, source, static_cast<size_t>(stop));
  } else if (source->is(ValueKind::Iterator)) {
    // islice takes items up to stop from a shared iterator and leaves the
    // rest (once it is consumed whole, as every modelled iterator is).
    const size_t left = source->items.size() - source->position;
    const size_t n = stop < 0 ? left : std::min(left, static_cast<size_t>(stop));
    items.assign(source->items.begin() + source->position, source->items.begin() + source->position + n);
    if (n > 0) context.note_write(source);
    source->position += n;
  } else {
    items = context.unpack(source);
    if (stop >= 0 && items.size() > static_cast<size_t>(stop)) items.resize(stop);
  }
  std::vector<ValuePtr> out;
  for (size_t i = static_cast<size_t>(start); i < items.size(); i += static_cast<size_t>(step)) out.push_back(items[i]);
  return iterator_of(std::move(out));
}

ValuePtr accumulate_model(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr initial = take_keyword(call.kwargs, "initial");
  ValuePtr func = take_keyword(call.kwargs, "func");
  if (call.args.size() == 2 && !func) {
    func = call.args[1];
    call.args.pop_back();
  }
  expect_args(context, call, 1, 1);
  if (func && is_none(*func)) func = nullptr;
  std::vector<ValuePtr> out;
  ValuePtr total = initial && !is_none(*initial) ? initial : nullptr;
  if (total) out.push_back(total);
  for (const ValuePtr& item : items_of(context, call, call.args[0])) {
    if (!total) {
      total = item;
    } else {
      total = func ? context.call(func, {total, item}, {}) : context.binary_op(0 /* NB_ADD */, total, item);
    }
    out.push_back(total);
  }
  return iterator_of(std::move(out));
}

ValuePtr repeat_model(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr times = take_keyword(call.kwargs, "times");
  if (call.args.size() == 2 && !times) {
    times = call.args[1];
    call.args.pop_back();
  }
  expect_args(context, call, 1, 1);
  if (!times) return make_std_object(call.callee->obj.get(), {call.args[0]}, {});
  const Py_ssize_t n = std::max<Py_ssize_t>(0, int_argument(context, *times, "repeat()'s times"));
  return iterator_of(std::vector<ValuePtr>(static_cast<size_t>(n), call.args[0]));
}

std::vector<ValuePtr> take_repeat(BuiltinContext&, const ValuePtr& repeat, size_t n) {
  return std::vector<ValuePtr>(n, repeat->items[0]->items[0]);
}

ValuePtr count_model(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr start = take_keyword(call.kwargs, "start");
  ValuePtr step = take_keyword(call.kwargs, "step");
  if (!call.args.empty() && !start) {
    start = call.args[0];
    call.args.erase(call.args.begin());
  }
  if (!call.args.empty() && !step) {
    step = call.args[0];
    call.args.erase(call.args.begin());
  }
  expect_args(context, call, 0, 0);
  start = start ? start : int_value(context, 0);
  step = step ? step : int_value(context, 1);
  for (const ValuePtr& number : {start, step}) {
    if (!number->is(ValueKind::Constant) || !PyNumber_Check(number->obj.get())) {
      context.abort(BreakCode::UnsupportedCall, "itertools.count() of " + tracer::describe_value(*number));
    }
  }
  return make_std_object(call.callee->obj.get(), {start, step}, {});
}

// Takes start, start + step, ... and moves the count past them.
std::vector<ValuePtr> take_count(BuiltinContext& context, const ValuePtr& count, size_t n) {
  ValuePtr& start = count->items[0]->items[0];
  const ValuePtr& step = count->items[0]->items[1];
  std::vector<ValuePtr> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(start);
    context.note_write(count);
    start = context.binary_op(0 /* NB_ADD */, start, step);
  }
  return out;
}

ValuePtr zip_longest_model(BuiltinContext& context, BuiltinCall& call) {
  ValuePtr fill = take_keyword(call.kwargs, "fillvalue");
  expect_args(context, call, 0, SIZE_MAX);
  if (!fill) fill = context.constant(Py_None);
  std::vector<std::vector<ValuePtr>> seqs;
  size_t n = 0;
  for (const ValuePtr& iterable : call.args) {
    seqs.push_back(items_of(context, call, iterable));
    n = std::max(n, seqs.back().size());
  }
  std::vector<ValuePtr> items;
  for (size_t i = 0; i < n; ++i) {
    std::vector<ValuePtr> tuple;
    for (const auto& seq : seqs) tuple.push_back(i < seq.size() ? seq[i] : fill);
    items.push_back(tuple_of(std::move(tuple)));
  }
  return iterator_of(std::move(items));
}

ValuePtr starmap_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  std::vector<ValuePtr> items;
  for (const ValuePtr& args : items_of(context, call, call.args[1])) {
    items.push_back(context.call(call.args[0], items_of(context, call, args), {}));
  }
  return iterator_of(std::move(items));
}

ValuePtr pairwise_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 1, 1);
  std::vector<ValuePtr> seq = items_of(context, call, call.args[0]);
  std::vector<ValuePtr> items;
  for (size_t i = 0; i + 1 < seq.size(); ++i) items.push_back(tuple_of({seq[i], seq[i + 1]}));
  return iterator_of(std::move(items));
}

// takewhile(pred, xs), dropwhile(pred, xs), filterfalse(pred, xs).
ValuePtr predicate_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  const ValuePtr pred = call.args[0];
  auto test = [&](const ValuePtr& item) {
    if (call.name == "itertools.filterfalse" && is_none(*pred)) return context.truthy(item);
    return context.truthy(context.call(pred, {item}, {}));
  };
  std::vector<ValuePtr> items;
  bool dropping = true;
  for (const ValuePtr& item : items_of(context, call, call.args[1])) {
    if (call.name == "itertools.takewhile") {
      if (!test(item)) break;
      items.push_back(item);
    } else if (call.name == "itertools.dropwhile") {
      if (dropping && test(item)) continue;
      dropping = false;
      items.push_back(item);
    } else if (!test(item)) {
      items.push_back(item);
    }
  }
  return iterator_of(std::move(items));
}

ValuePtr compress_model(BuiltinContext& context, BuiltinCall& call) {
  expect_args(context, call, 2, 2);
  std::vector<std::vector<ValuePtr>> seqs = unpack_in_lockstep(context, call.args, call.name);
  std::vector<ValuePtr> items;
  for (size_t i = 0; i < seqs[0].size(); ++i) {
    if (context.truthy(seqs[1][i])) items.push_back(seqs[0][i]);
  }
  return iterator_of(std::move(items));
}

}  // namespace

void register_itertools_model(ModelRegistry& registry) {
  registry.add("itertools", "chain", chain_model);
  registry.add("itertools", "product", combinatoric_model);
  registry.add("itertools", "combinations", combinatoric_model);
  registry.add("itertools", "combinations_with_replacement", combinatoric_model);
  registry.add("itertools", "permutations", combinatoric_model);
  registry.add("itertools", "islice", islice_model);
  registry.add("itertools", "accumulate", accumulate_model);
  registry.add("itertools", "repeat", repeat_model);
  registry.add_instances("itertools", "repeat", nullptr, take_repeat);
  registry.add("itertools", "count", count_model);
  registry.add_instances("itertools", "count", nullptr, take_count);
  registry.add("itertools", "zip_longest", zip_longest_model);
  registry.add("itertools", "starmap", starmap_model);
  registry.add("itertools", "pairwise", pairwise_model);
  registry.add("itertools", "takewhile", predicate_model);
  registry.add("itertools", "dropwhile", predicate_model);
  registry.add("itertools", "filterfalse", predicate_model);
  registry.add("itertools", "compress", compress_model);
  // chain.from_iterable is a class method: keyed by its C method, which
  // every bound copy (itertools.chain.from_iterable) shares.
  PyRef itertools = PyRef::steal(PyImport_ImportModule("itertools"));
  PyRef chain = itertools ? PyRef::steal(PyObject_GetAttrString(itertools.get(), "chain")) : PyRef();
  base::PyRef from_iterable = chain && PyType_Check(chain.get())
      ? base::own_class_attr(reinterpret_cast<PyTypeObject*>(chain.get()), "from_iterable")
      : base::PyRef();
  if (from_iterable) registry.add_object(from_iterable.get(), "itertools.chain.from_iterable", chain_from_iterable_model);
  PyErr_Clear();
}

}  // namespace kiln::stdlib
