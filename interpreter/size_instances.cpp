#include "interpreter/size_instances.h"

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <mutex>
#include <optional>
#include <vector>

#include "base/log.h"
#include "base/py_ref.h"
#include "base/py_text.h"
#include "base/stopwatch.h"
#include "base/torch_api.h"
#include "interpreter/compile_config.h"
#include "runtime/aten_bridge.h"
#include "runtime/eager_executor.h"
#include "runtime/graph_arg_values.h"
#include "tracer/meta_layouts.h"

namespace kiln::interpreter {

// Note [Size instances]
// A dynamic trace (Note [Dynamic shapes]) gives a graph whose sizes are
// symbols and whose size arithmetic (x.size(1), n * 64) is graph nodes.
// kiln's decomposition, autograd and code generators take static sizes, so
// such a graph is compiled per size instead: the first call with a new set
// of symbol values (the sizes of the inputs' symbolic dims) replays every
// node on meta tensors of the call's input sizes, reads each result's sizes
// and strides (with Note [Meta layouts]'s corrections), folds the nodes
// that compute Python ints to constants, and compiles the concrete graph
// as the backend compiles any static graph (decomposition, autograd,
// kernels, CUDA graphs). The frame is traced once; what a new size costs
// is the backend's compile of the instance (its kernels come from the
// kernel cache where the loop text is unchanged), counted by
// kiln.stats()["size_instances"] and logged under `dynamic`.
//
// Every call runs an instance's executor, the first of its size included,
// so in-place writes and random draws happen once, as eagerly. A graph the
// replay cannot take (a node that fails on meta tensors at this size, a
// result whose number of tensors changes) runs that size through the
// eager replay of the symbolic graph, said in the log; so does every size
// past kMaxInstances (a serving loop over unbounded sizes must not compile
// without end). A graph whose sizes keep changing (generate()'s growing
// KV cache: each size is called once) would compile for nothing: once
// kUnusedInstances instances were never called a second time, a new size
// runs the eager replay at its first call and compiles at its second.
// An instance the backend itself runs eagerly (a graph it cannot
// decompose or differentiate) ends the compiles: every other size runs
// the eager replay at once, rather than failing one compile per size.
// Kernels generic in the sizes would make instances cheap; until then a
// size costs one backend compile (a meta replay that copies the metas of
// nodes whose inputs kept their traced layout, then the backend). A graph
// whose calls are mostly at static sizes (a decoding step) does not come
// here: its static regions compile once (Note [Static regions]).

namespace {

constexpr size_t kMaxInstances = 64;
// Instances never called again after which a new size runs eagerly at its
// first call and compiles at its second.
constexpr size_t kUnusedInstances = 8;

using base::PyRef;

// The pending Python error as "Type: message", cleared.
std::string take_error() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "error";
  if (value) text += ": " + base::py_repr(value);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return text;
}

bool holds_tensor(PyObject* obj) {
  if (runtime::is_tensor(obj)) return true;
  if (PyTuple_Check(obj) || PyList_Check(obj)) {
    PyRef items = PyRef::steal(PySequence_Fast(obj, ""));
    if (!items) return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items.get()); ++i) {
      if (holds_tensor(PySequence_Fast_GET_ITEM(items.get(), i))) return true;
    }
  }
  return false;
}

// A meta tensor with `meta`'s sizes, strides and dtype.
PyRef meta_of(const graph::TensorMeta& meta) {
  PyRef sizes = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(meta.sizes.size())));
  PyRef strides = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(meta.strides.size())));
  for (size_t d = 0; d < meta.sizes.size(); ++d) {
    PyTuple_SET_ITEM(sizes.get(), static_cast<Py_ssize_t>(d), PyLong_FromLongLong(meta.sizes[d]));
    PyTuple_SET_ITEM(strides.get(), static_cast<Py_ssize_t>(d), PyLong_FromLongLong(meta.strides[d]));
  }
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(base::torch_api()->torch, graph::dtype_name(meta.dtype)));
  if (!dtype) return PyRef();
  PyRef args = PyRef::steal(PyTuple_Pack(2, sizes.get(), strides.get()));
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyRef device = PyRef::steal(PyUnicode_FromString("meta"));
  PyDict_SetItemString(kwargs.get(), "dtype", dtype.get());
  PyDict_SetItemString(kwargs.get(), "device", device.get());
  return PyRef::steal(PyObject_Call(base::torch_api()->empty_strided, args.get(), kwargs.get()));
}

// True when every value `arg` reads is a tensor whose replayed sizes and
// strides are the traced ones (`same[id]`); a non-tensor value (a size
// computation) counts as changed.
bool reads_unchanged(const graph::Arg& arg, const std::vector<bool>& same) {
  if (arg.kind == graph::Arg::Kind::Node) return same[arg.node];
  for (const graph::Arg& item : arg.items) {
    if (!reads_unchanged(item, same)) return false;
  }
  return true;
}

bool is_device_spec(PyObject* obj) {
  return PyUnicode_Check(obj) || Py_TYPE(obj) == reinterpret_cast<PyTypeObject*>(base::torch_api()->device_type);
}

// Calls that change process state the replay must not touch; their
// values are not needed to infer sizes.
bool skipped_in_replay(const graph::Node& node) {
  return node.target_name == "kiln.enter_autocast" || node.target_name == "kiln.exit_autocast";
}

// Runs `node` on the meta values of its arguments, as the tracer ran its
// fakes: device= and Tensor.to's device become "meta", and a factory (a
// call making tensors from no tensor) is made on the meta device. Null
// with a Python error set when the call fails.
PyRef replay_on_meta(const graph::Node& node, PyObject* const* values) {
  PyRef meta = PyRef::steal(PyUnicode_FromString("meta"));
  PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(node.args.size())));
  bool any_tensor = false;
  for (size_t i = 0; i < node.args.size(); ++i) {
    PyObject* value = runtime::materialize_arg(node.args[i], values);
    if (!value) return PyRef();
    if (node.target_name == "Tensor.to" && i > 0 && is_device_spec(value)) {
      Py_DECREF(value);
      value = Py_NewRef(meta.get());
    }
    any_tensor = any_tensor || holds_tensor(value);
    PyTuple_SET_ITEM(args.get(), static_cast<Py_ssize_t>(i), value);
  }
  PyRef kwargs = PyRef::steal(PyDict_New());
  bool has_device = false;
  for (const auto& [key, arg] : node.kwargs) {
    PyRef value = PyRef::steal(runtime::materialize_arg(arg, values));
    if (!value) return PyRef();
    if (key == "device" && value.get() != Py_None) {
      value = meta;
      has_device = true;
    }
    any_tensor = any_tensor || holds_tensor(value.get());
    PyDict_SetItemString(kwargs.get(), key.c_str(), value.get());
  }
  if (!any_tensor && !has_device && !node.metas.empty()) PyDict_SetItemString(kwargs.get(), "device", meta.get());
  PyRef result = PyRef::steal(PyObject_Call(node.target, args.get(), kwargs.get()));
  if (!result || node.metas.empty()) return result;
  return tracer::with_real_layout(node.target_name, args.get(), std::move(result), node.metas[0].device_type);
}

// The tensors of a call's result, in order (a tensor, or a sequence).
std::vector<PyObject*> result_tensors(PyObject* result) {
  if (runtime::is_tensor(result)) return {result};
  std::vector<PyObject*> tensors;
  if (!PyTuple_Check(result) && !PyList_Check(result)) return tensors;
  for (Py_ssize_t i = 0; i < PySequence_Size(result); ++i) {
    PyObject* item = PyTuple_Check(result) ? PyTuple_GET_ITEM(result, i) : PyList_GET_ITEM(result, i);
    if (runtime::is_tensor(item)) tensors.push_back(item);
  }
  return tensors;
}

// `arg` with node refs renumbered into the instance, folded nodes as their
// constants.
void remap_arg(graph::Arg& arg, const std::vector<int>& new_id, const std::vector<PyRef>& folded) {
  if (arg.kind == graph::Arg::Kind::Node) {
    if (folded[arg.node]) {
      arg = graph::Arg::of_constant(folded[arg.node].get());
    } else {
      arg.node = new_id[arg.node];
    }
    return;
  }
  for (graph::Arg& item : arg.items) remap_arg(item, new_id, folded);
}

// Note [Replay memo]
// A model's layers repeat the same calls at the same sizes (GPT-2's twelve
// blocks each make the same views, matmuls and attention), and torch's
// meta kernels cost tens of microseconds a call through Python. So within
// one replay, a call that makes one tensor is keyed by its target and what
// its result can depend on (each tensor argument's dtype, sizes, strides
// and storage offset, ints by value, anything else by identity), and a
// call whose key was seen before gets a fresh meta tensor of the layout the
// first one made instead of running. Ints, floats, strings and slices key
// by value (materialized afresh, a temporary's address may be reused);
// other objects only while something else holds them (dtypes, devices). In-place calls (their names end in
// "_", setitem) and as_strided run every time: they change or read more
// than a layout; so does a call whose result has a storage offset (a fresh
// tensor would lose it).

// Note [Lazy replay metas]
// Most of a decoding step's replay is copies: the inputs' layouts and the
// nodes whose inputs kept their traced layout (and memo hits). Making each
// a meta tensor (torch.empty_strided through Python, ~10-20 us) cost more
// than the few calls that do run (~150 tensors a step of the zoo's GPT-2
// against ~10 calls). So those stay TensorMeta, and a meta tensor is made
// only for an argument of a call that runs on the meta device or keys the
// memo.

// `tensor`'s storage offset, -1 when it cannot be read (the error cleared).
int64_t storage_offset(PyObject* tensor) {
  PyRef offset = PyRef::steal(PyObject_CallMethod(tensor, "storage_offset", nullptr));
  const int64_t value = offset ? PyLong_AsLongLong(offset.get()) : -1;
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return -1;
  }
  return value;
}

// Appends to `key` what a meta call's result can depend on of `value`;
// false when the value cannot be keyed (a Python error on reading it, or a
// temporary object that only its address would name).
bool append_memo_key(PyObject* value, std::string* key) {
  if (runtime::is_tensor(value)) {
    graph::TensorMeta meta;
    runtime::read_tensor_meta(value, &meta);
    const int64_t offset = storage_offset(value);
    if (offset < 0) return false;
    *key += "T" + graph::format_tensor_meta(meta) + "@" + std::to_string(offset) + (meta.requires_grad ? "g" : "") + ";";
    return true;
  }
  if (PyTuple_Check(value) || PyList_Check(value)) {
    *key += PyTuple_Check(value) ? "(" : "[";
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(value); ++i) {
      if (!append_memo_key(PySequence_Fast_GET_ITEM(value, i), key)) return false;
    }
    *key += ")";
    return true;
  }
  if (PySlice_Check(value)) {
    auto* slice = reinterpret_cast<PySliceObject*>(value);
    *key += "S";
    return append_memo_key(slice->start, key) && append_memo_key(slice->stop, key) &&
           append_memo_key(slice->step, key);
  }
  if (PyLong_CheckExact(value) || PyFloat_CheckExact(value) || PyUnicode_CheckExact(value) || PyBool_Check(value) ||
      value == Py_None) {
    // By value: materialize_arg may make these afresh (an address could be
    // reused by another value).
    *key += std::string(Py_TYPE(value)->tp_name) + ":" + base::py_repr(value) + ";";
    return true;
  }
  // Objects the graph holds for the whole replay (dtypes, devices, memory
  // formats, callables): by identity.
  if (Py_REFCNT(value) > 1) {
    *key += "P" + std::to_string(reinterpret_cast<uintptr_t>(value)) + ";";
    return true;
  }
  return false;  // a temporary of another type: not keyed
}

// The memo key of `node`'s call over the replayed values, "" when the call
// is not memoized (Note [Replay memo]).
std::string memo_key(const graph::Node& node, PyObject* const* values) {
  const std::string& name = node.target_name;
  if (node.metas.size() != 1 || node.returns_tuple || name.empty() || name.back() == '_' ||
      name.find("setitem") != std::string::npos || name.find("as_strided") != std::string::npos) {
    return "";
  }
  std::string key = name + "#" + std::to_string(reinterpret_cast<uintptr_t>(node.target)) + "#" +
                    std::to_string(static_cast<int>(node.metas[0].device_type)) + "|";
  auto add = [&](const graph::Arg& arg) {
    PyRef value = PyRef::steal(runtime::materialize_arg(arg, values));
    return value && append_memo_key(value.get(), &key);
  };
  for (const graph::Arg& arg : node.args) {
    if (!add(arg)) return (PyErr_Clear(), "");
  }
  for (const auto& [name_of, arg] : node.kwargs) {
    key += name_of + "=";
    if (!add(arg)) return (PyErr_Clear(), "");
  }
  return key;
}

// Restores the thread's grad mode when the replay ends (a graph may switch it).
struct GradModeScope {
  bool saved = runtime::grad_mode_enabled();
  ~GradModeScope() { runtime::set_grad_mode(saved); }
};

// One symbolic dim of an input: the input's position, the dim, its symbol.
struct SymbolicDim {
  int input = 0;
  int dim = 0;  // -1: the input is a dynamic int
  std::string symbol;
};

// An instance: its concrete graph and executor; a null executor means the
// size runs through the symbolic graph's eager replay.
struct Instance {
  std::unique_ptr<graph::Graph> graph;
  std::unique_ptr<runtime::GraphExecutor> executor;
  mutable std::atomic<bool> reused{false};  // called again after its first call
};

class SizeInstanceExecutor final : public runtime::GraphExecutor {
 public:
  SizeInstanceExecutor(const graph::Graph& graph, std::string name, InstanceCompiler compile)
      : graph_(graph), name_(std::move(name)), compile_(std::move(compile)), eager_(graph) {
    const std::vector<int>& inputs = graph.inputs();
    for (size_t k = 0; k < inputs.size(); ++k) {
      const graph::Node& node = graph.node(inputs[k]);
      if (!node.int_symbol.empty()) dims_.push_back({static_cast<int>(k), -1, node.int_symbol});
      if (node.symbolic_sizes.empty()) continue;
      const std::vector<std::string>& dims = node.symbolic_sizes[0];
      for (size_t d = 0; d < dims.size(); ++d) {
        if (!dims[d].empty()) dims_.push_back({static_cast<int>(k), static_cast<int>(d), dims[d]});
      }
    }
  }

  PyObject* run(PyObject* const* inputs) const override {
    std::vector<int64_t> key(dims_.size());
    graph::TensorMeta meta;
    for (size_t i = 0; i < dims_.size(); ++i) {
      if (dims_[i].dim < 0) {
        key[i] = PyLong_AsLongLong(inputs[dims_[i].input]);  // guarded an exact int in range
        continue;
      }
      runtime::read_tensor_meta(inputs[dims_[i].input], &meta);
      key[i] = meta.sizes[dims_[i].dim];
    }
    std::shared_ptr<const Instance> instance;
    bool first_sight = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = instances_.find(key);
      if (found != instances_.end()) {
        instance = found->second;
        if (instance->executor && !instance->reused.exchange(true)) ++reused_;
      } else if (eager_only_) {
        first_sight = true;  // the backend gave up on this graph at another size
      } else if (instances_.size() - reused_ >= kUnusedInstances) {
        // Sizes keep changing: a size compiles at its second call.
        first_sight = seen_once_.insert(key).second;
      }
    }
    if (first_sight) {
      if (!eager_only_) {
        KILN_LOG(dynamic, name_ << " at " << label(key) << ": runs eagerly (" << kUnusedInstances
                                << " instances were never called again; this size compiles at its next call)");
      }
      return eager_.run(inputs);
    }
    if (!instance) instance = add_instance(key, inputs);
    if (!instance) return nullptr;
    return instance->executor ? instance->executor->run(inputs) : eager_.run(inputs);
  }

  const char* name() const override { return "size instances"; }

 private:
  std::string label(const std::vector<int64_t>& key) const {
    std::string text;
    for (size_t i = 0; i < key.size(); ++i) {
      if (i) text += ", ";
      text += dims_[i].symbol + "=" + std::to_string(key[i]);
    }
    return text;
  }

  // Instantiates and compiles the instance of `key` (outside the lock: the
  // compile runs Python), keeping the first one made where two threads
  // raced. Null with a Python error set when the compile raised.
  std::shared_ptr<const Instance> add_instance(const std::vector<int64_t>& key, PyObject* const* inputs) const {
    auto instance = std::make_shared<Instance>();
    const std::string what = name_ + " at " + label(key);
    size_t count;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      count = instances_.size();
    }
    if (count >= kMaxInstances) {
      KILN_LOG(dynamic, what << ": runs eagerly: " << kMaxInstances << " sizes compiled already");
    } else {
      const base::Stopwatch clock;
      std::string why;
      instance->graph = instantiate_sizes(graph_, inputs, &why);
      if (instance->graph) {
        instance->executor = compile_(*instance->graph, what);
        stats().size_instances++;
        KILN_LOG(dynamic, "size instance " << what << " compiled in " << clock.ms() << " ms ("
                                           << instance->executor->name() << ")");
        // The backend replays it through torch (its `backend` log says
        // why): the reason holds at other sizes, which compile no more.
        if (std::string(instance->executor->name()) == "eager") {
          eager_only_ = true;
          KILN_LOG(dynamic, name_ << ": the backend ran the instance at " << label(key)
                                  << " eagerly; other sizes run the eager replay without compiling");
        }
      } else {
        stats().prim_fallbacks++;
        KILN_LOG(dynamic, what << ": runs eagerly: " << why);
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return instances_.emplace(key, std::move(instance)).first->second;
  }

  const graph::Graph& graph_;
  const std::string name_;
  const InstanceCompiler compile_;
  const runtime::EagerExecutor eager_;
  std::vector<SymbolicDim> dims_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<const Instance>> instances_;
  mutable size_t reused_ = 0;                          // instances called again
  mutable std::atomic<bool> eager_only_{false};        // an instance fell back to eager
  mutable std::set<std::vector<int64_t>> seen_once_;  // sizes run eagerly once
};

}  // namespace

bool has_symbolic_sizes(const graph::Graph& graph) {
  for (const graph::Node& node : graph.nodes()) {
    if (!node.symbolic_sizes.empty() || !node.int_symbol.empty()) return true;
  }
  return false;
}

std::string size_instance_refusal(const graph::Graph& graph) {
  for (const graph::Node& node : graph.nodes()) {
    // Its traced dtypes hold only under autocast: not decomposed at any size.
    if (node.autocast_implicit) return node.target_name + " is cast implicitly by autocast";
  }
  return "";
}

std::unique_ptr<graph::Graph> instantiate_sizes(const graph::Graph& graph, PyObject* const* inputs,
                                                std::string* why) {
  const size_t n = graph.nodes().size();
  std::vector<PyRef> values(n);
  std::vector<PyObject*> raw(n, nullptr);
  // Per node: its replayed tensors have the traced sizes and strides. A
  // call reading only such tensors and constants makes what it made when
  // traced: its metas are copied, not recomputed (torch's meta kernels
  // cost up to milliseconds a call; a decoding step's graph changes few).
  std::vector<bool> same(n, false);
  // Note [Lazy replay metas]: a tensor input's, a copied node's or a memo
  // hit's layout, made a meta tensor only when a replayed call reads it.
  std::vector<std::optional<graph::TensorMeta>> lazy(n);
  std::unordered_map<std::string, graph::TensorMeta> memo;  // Note [Replay memo]
  int replayed = 0, memo_hits = 0, materialized = 0;
  // Gives every node `arg` reads that is only a layout yet its meta tensor.
  std::function<bool(const graph::Arg&)> materialize = [&](const graph::Arg& arg) {
    if (arg.kind == graph::Arg::Kind::Node) {
      if (raw[arg.node] || !lazy[arg.node]) return true;
      values[arg.node] = meta_of(*lazy[arg.node]);
      raw[arg.node] = values[arg.node].get();
      ++materialized;
      return raw[arg.node] != nullptr;
    }
    for (const graph::Arg& item : arg.items) {
      if (!materialize(item)) return false;
    }
    return true;
  };
  {
    const GradModeScope grad_mode;
    int next_input = 0;
    for (const graph::Node& node : graph.nodes()) {
      PyRef value;
      if (node.kind == graph::NodeKind::Input) {
        PyObject* input = inputs[next_input++];
        if (node.metas.empty()) {
          value = PyRef::borrow(input);
        } else {
          graph::TensorMeta meta;
          runtime::read_tensor_meta(input, &meta);
          same[node.id] = meta.sizes == node.metas[0].sizes && meta.strides == node.metas[0].strides;
          lazy[node.id] = std::move(meta);
          continue;
        }
      } else if (skipped_in_replay(node)) {
        value = PyRef::borrow(Py_None);
      } else {
        bool unchanged = node.symbolic_sizes.empty() && node.metas.size() == 1 && !node.returns_tuple;
        for (const graph::Arg& arg : node.args) unchanged = unchanged && reads_unchanged(arg, same);
        for (const auto& kw : node.kwargs) unchanged = unchanged && reads_unchanged(kw.second, same);
        if (unchanged) {
          lazy[node.id] = node.metas[0];
          same[node.id] = true;
          continue;
        }
        bool ready = true;
        for (const graph::Arg& arg : node.args) ready = ready && materialize(arg);
        for (const auto& kw : node.kwargs) ready = ready && materialize(kw.second);
        const std::string key = ready ? memo_key(node, raw.data()) : "";
        auto found = key.empty() ? memo.end() : memo.find(key);
        if (!ready) {
          // meta_of failed: its error is reported below.
        } else if (found != memo.end()) {
          ++memo_hits;
          same[node.id] = found->second.sizes == node.metas[0].sizes &&
                          found->second.strides == node.metas[0].strides;
          lazy[node.id] = found->second;
          continue;
        } else {
          value = replay_on_meta(node, raw.data());
          ++replayed;
        }
        if (value && node.metas.size() == 1 && runtime::is_tensor(value.get())) {
          graph::TensorMeta meta;
          runtime::read_tensor_meta(value.get(), &meta);
          same[node.id] = meta.sizes == node.metas[0].sizes && meta.strides == node.metas[0].strides;
          if (!key.empty() && storage_offset(value.get()) == 0) memo.emplace(key, meta);
        }
      }
      if (!value) {
        *why = "node %" + std::to_string(node.id) + " (" + node.target_name + ") fails on meta tensors: " + take_error();
        return nullptr;
      }
      raw[node.id] = value.get();
      values[node.id] = std::move(value);
    }
  }
  auto out = std::make_unique<graph::Graph>();
  std::vector<int> new_id(n, -1);
  std::vector<PyRef> folded(n);
  int next_input = 0;
  for (const graph::Node& node : graph.nodes()) {
    if (node.kind == graph::NodeKind::Input) {
      PyObject* input = inputs[next_input++];
      if (node.metas.empty()) {
        new_id[node.id] = out->add_object_input(node.input_source, node.input_name);
        // A dynamic int is a constant of the instance, like sizes read from
        // tensors (Note [Dynamic ints]); the input stays, unread.
        if (!node.int_symbol.empty()) folded[node.id] = PyRef::borrow(input);
      } else {
        graph::TensorMeta meta;
        runtime::read_tensor_meta(input, &meta);
        new_id[node.id] = out->add_input(node.input_source, node.input_name, meta);
      }
      continue;
    }
    PyObject* value = raw[node.id];
    // A size computation (x.size(1), n * 64, a slice's bounds): its value
    // at these sizes.
    if (node.metas.empty() && value && (PyLong_CheckExact(value) || PySlice_Check(value))) {
      folded[node.id] = values[node.id];
      continue;
    }
    std::vector<graph::Arg> args = node.args;
    for (graph::Arg& arg : args) remap_arg(arg, new_id, folded);
    std::vector<std::pair<std::string, graph::Arg>> kwargs = node.kwargs;
    for (auto& kw : kwargs) remap_arg(kw.second, new_id, folded);
    const int id = out->add_call(node.target_name, node.target, std::move(args), std::move(kwargs));
    new_id[node.id] = id;
    graph::Node& made = out->node(id);
    made.returns_tuple = node.returns_tuple;
    made.autocast_implicit = node.autocast_implicit;
    made.fresh_result = node.fresh_result;
    if (node.metas.empty()) continue;
    if (lazy[node.id]) {
      graph::TensorMeta meta = node.metas[0];
      meta.sizes = lazy[node.id]->sizes;
      meta.strides = lazy[node.id]->strides;
      made.metas.push_back(std::move(meta));
      continue;
    }
    const std::vector<PyObject*> tensors = result_tensors(value);
    if (tensors.size() != node.metas.size()) {
      *why = "node %" + std::to_string(node.id) + " (" + node.target_name + ") makes " +
             std::to_string(tensors.size()) + " tensors at these sizes, " + std::to_string(node.metas.size()) +
             " when traced";
      return nullptr;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      graph::TensorMeta replayed;
      runtime::read_tensor_meta(tensors[i], &replayed);
      graph::TensorMeta meta = node.metas[i];
      meta.sizes = std::move(replayed.sizes);
      meta.strides = std::move(replayed.strides);
      made.metas.push_back(std::move(meta));
    }
  }
  graph::Arg output = graph.output();
  remap_arg(output, new_id, folded);
  out->set_output(std::move(output));
  KILN_LOG(dynamic, "size replay: " << replayed << " calls on meta tensors, " << memo_hits
                                    << " from the replay's memo (Note [Replay memo]), " << materialized
                                    << " layouts made meta tensors (Note [Lazy replay metas])");
  return out;
}

std::unique_ptr<runtime::GraphExecutor> size_instance_executor(const graph::Graph& graph, const std::string& name,
                                                               InstanceCompiler compile) {
  return std::make_unique<SizeInstanceExecutor>(graph, name, std::move(compile));
}

}  // namespace kiln::interpreter
