#include "runtime/cuda_graph_executor.h"

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/aten_bridge.h"
#include "base/log.h"
#include "base/py_ref.h"

namespace kiln::runtime {

using base::PyRef;

// Note [CUDA graphs]
// Small models on a GPU spend their time launching kernels, not running
// them. With mode="reduce-overhead" a compiled CUDA graph runs normally on
// its first call (lazy initialization: cuBLAS handles, kernel loading) and
// is captured into a torch.cuda.CUDAGraph on its second, through the same
// executor (torch's ops and kiln's kernels launch on torch's current
// stream, which torch.cuda.graph makes the capturing one); every later call
// replays it: one launch. Inputs whose memory was the same on the first
// two calls (parameters, buffers) are read in place and must stay there: a
// call where one moved captures again. Other inputs are copied into
// buffers the graph owns. Outputs live in the graph's private memory pool
// and the next replay overwrites them, so each call returns copies (one
// copy kernel per output; torch.compile returns the buffers themselves and
// makes callers clone). The graph's memory stays allocated while the
// executor lives. A call that finds a replay in progress on another thread
// (the buffers are shared) runs the graph without CUDA graphs; a capture
// that fails (an op that synchronizes with the CPU) turns CUDA graphs off
// for this graph, logged under `backend`.

namespace {

uintptr_t data_address(PyObject* obj) {
  return is_tensor(obj) ? reinterpret_cast<uintptr_t>(tensor_data(obj)) : 0;
}

// A copy of `out` with every tensor cloned (tuples, lists and dicts
// rebuilt; anything else shared). Null with a Python error set on failure.
PyObject* copy_outputs(PyObject* out) {
  if (is_tensor(out)) return PyObject_CallMethod(out, "clone", nullptr);
  if (PyTuple_Check(out) || PyList_Check(out)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(out);
    PyRef made = PyRef::steal(PyTuple_Check(out) ? PyTuple_New(n) : PyList_New(n));
    if (!made) return nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = copy_outputs(PySequence_Fast_GET_ITEM(out, i));
      if (!item) return nullptr;
      if (PyTuple_Check(out)) {
        PyTuple_SET_ITEM(made.get(), i, item);
      } else {
        PyList_SET_ITEM(made.get(), i, item);
      }
    }
    return made.release();
  }
  if (PyDict_CheckExact(out)) {
    PyRef made = PyRef::steal(PyDict_New());
    if (!made) return nullptr;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(out, &pos, &key, &value)) {
      PyRef item = PyRef::steal(copy_outputs(value));
      if (!item || PyDict_SetItem(made.get(), key, item.get()) < 0) return nullptr;
    }
    return made.release();
  }
  Py_INCREF(out);
  return out;
}

std::string python_error_text() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyRef text = PyRef::steal(value ? PyObject_Str(value) : nullptr);
  std::string out = text && PyUnicode_Check(text.get()) ? PyUnicode_AsUTF8(text.get()) : "unknown error";
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return out;
}

class CudaGraphExecutor final : public GraphExecutor {
 public:
  CudaGraphExecutor(std::unique_ptr<GraphExecutor> inner, size_t inputs, std::string name,
                    std::function<void()> on_capture)
      : inner_(std::move(inner)), input_count_(inputs), name_(std::move(name)), on_capture_(std::move(on_capture)) {}

  // Not immutable, unlike other executors: the capture and its buffers are
  // state, guarded by the GIL and `busy_` (Note [CUDA graphs]).
  PyObject* run(PyObject* const* inputs) const override {
    if (off_ || busy_) return inner_->run(inputs);
    busy_ = true;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{busy_};
    if (first_addresses_.empty()) {
      for (size_t i = 0; i < input_count_; ++i) first_addresses_.push_back(data_address(inputs[i]));
      return inner_->run(inputs);
    }
    if (graph_ && !inputs_in_place(inputs)) {
      KILN_LOG(backend, "CUDA graph of " << name_ << ": a parameter moved; capturing again");
      drop_capture();
    }
    if (!graph_ && !capture(inputs)) return off_ ? inner_->run(inputs) : nullptr;
    for (size_t i = 0; i < input_count_; ++i) {
      if (!buffers_[i]) continue;
      PyRef copied = PyRef::steal(PyObject_CallMethod(buffers_[i].get(), "copy_", "O", inputs[i]));
      if (!copied) return nullptr;
    }
    PyRef replayed = PyRef::steal(PyObject_CallMethod(graph_.get(), "replay", nullptr));
    if (!replayed) return nullptr;
    return copy_outputs(output_.get());
  }

  const char* name() const override { return inner_->name(); }

 private:
  bool inputs_in_place(PyObject* const* inputs) const {
    for (size_t i = 0; i < input_count_; ++i) {
      if (!buffers_[i] && data_address(inputs[i]) != captured_addresses_[i]) return false;
    }
    return true;
  }

  void drop_capture() const {
    graph_ = PyRef();
    output_ = PyRef();
    buffers_.clear();
    captured_addresses_.clear();
  }

  // Captures the graph; false with off_ set when it cannot be (logged), or
  // with a Python error set when setting up failed.
  bool capture(PyObject* const* inputs) const {
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    PyRef cuda = torch ? PyRef::steal(PyObject_GetAttrString(torch.get(), "cuda")) : PyRef();
    PyRef graph = cuda ? PyRef::steal(PyObject_CallMethod(cuda.get(), "CUDAGraph", nullptr)) : PyRef();
    PyRef context = graph ? PyRef::steal(PyObject_CallMethod(cuda.get(), "graph", "O", graph.get())) : PyRef();
    if (!context) return false;
    std::vector<PyRef> buffers(input_count_);
    std::vector<PyObject*> args(input_count_);
    std::vector<uintptr_t> addresses(input_count_, 0);
    for (size_t i = 0; i < input_count_; ++i) {
      args[i] = inputs[i];
      if (!is_tensor(inputs[i])) continue;
      addresses[i] = data_address(inputs[i]);
      if (addresses[i] == first_addresses_[i]) continue;  // a parameter: read in place
      buffers[i] = PyRef::steal(PyObject_CallMethod(inputs[i], "clone", nullptr));
      if (!buffers[i]) return false;
      args[i] = buffers[i].get();
    }
    PyRef entered = PyRef::steal(PyObject_CallMethod(context.get(), "__enter__", nullptr));
    if (!entered) return give_up("entering torch.cuda.graph: " + python_error_text());
    PyRef out = PyRef::steal(inner_->run(args.data()));
    std::string failure;
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    if (!out) {
      PyErr_Fetch(&type, &value, &traceback);
      PyErr_NormalizeException(&type, &value, &traceback);
    }
    PyRef exited = PyRef::steal(PyObject_CallMethod(context.get(), "__exit__", "OOO", type ? type : Py_None,
                                                    value ? value : Py_None, traceback ? traceback : Py_None));
    if (!out) {
      PyErr_Restore(type, value, traceback);
      failure = python_error_text();
    }
    if (!exited) failure += (failure.empty() ? "" : "; ") + python_error_text();
    if (!failure.empty()) return give_up("capture failed: " + failure);
    graph_ = std::move(graph);
    output_ = std::move(out);
    buffers_ = std::move(buffers);
    captured_addresses_ = std::move(addresses);
    ++captures_;
    if (on_capture_) on_capture_();
    KILN_LOG(backend, "CUDA graph of " << name_ << " captured (capture " << captures_ << ")");
    return true;
  }

  bool give_up(const std::string& why) const {
    KILN_LOG(backend, "CUDA graph of " << name_ << " off: " << why);
    off_ = true;
    drop_capture();
    return false;
  }

  std::unique_ptr<GraphExecutor> inner_;
  size_t input_count_;
  std::string name_;
  std::function<void()> on_capture_;
  mutable bool busy_ = false;
  mutable bool off_ = false;
  mutable int captures_ = 0;
  mutable std::vector<uintptr_t> first_addresses_;     // per input, on the first call
  mutable std::vector<uintptr_t> captured_addresses_;  // per input, at capture
  mutable std::vector<PyRef> buffers_;                 // per input: the graph's copy, or null (in place)
  mutable PyRef graph_;                                // torch.cuda.CUDAGraph
  mutable PyRef output_;                               // what the captured run returned
};

}  // namespace

std::string cuda_graph_refusal(const graph::Graph& graph, bool records_gradients) {
  if (records_gradients) return "the graph records gradients";
  for (int id : graph.inputs()) {
    const graph::Node& node = graph.node(id);
    if (node.metas.size() != 1) return "input " + node.input_name + " is no tensor";
    if (node.metas[0].device_type != graph::DeviceType::CUDA) return "input " + node.input_name + " is not on CUDA";
  }
  for (const graph::Node& node : graph.nodes()) {
    for (const auto& dims : node.symbolic_sizes) {
      for (const std::string& size : dims) {
        if (!size.empty()) return "the graph has dynamic sizes";
      }
    }
  }
  return "";
}

std::unique_ptr<GraphExecutor> make_cuda_graph_executor(std::unique_ptr<GraphExecutor> inner,
                                                        const graph::Graph& graph, std::string name,
                                                        std::function<void()> on_capture) {
  return std::make_unique<CudaGraphExecutor>(std::move(inner), graph.inputs().size(), std::move(name),
                                             std::move(on_capture));
}

}  // namespace kiln::runtime
