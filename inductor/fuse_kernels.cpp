#include "inductor/fuse_kernels.h"

#include <structmember.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>

#include "inductor/batched_casts.h"
#include "inductor/bias_epilogues.h"
#include "inductor/redundant_copies.h"
#include "inductor/conv_bias.h"
#include "inductor/view_copies.h"
#include "inductor/view_pairs.h"
#include "inductor/sink_views.h"
#include "inductor/buffer_plan.h"
#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_cache.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/cuda/cuda_autotune.h"
#include "inductor/cuda/cuda_driver.h"
#include "inductor/cuda/cuda_kernel.h"
#include "inductor/cuda/cuda_kernel_runner.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/gemm_nodes.h"
#include "inductor/kernel_copies.h"
#include "inductor/kernel_ir.h"
#include "inductor/lower_group.h"
#include "inductor/output_reshapes.h"
#include "inductor/recompute_outputs.h"
#include "inductor/schedule.h"
#include "inductor/split_outer_reductions.h"
#include "inductor/state_updates.h"
#include "prims/subgraph.h"
#include "runtime/aten_bridge.h"
#include "base/log.h"
#include "base/parallel_for.h"
#include "base/stopwatch.h"
#include "base/py_ref.h"

namespace kiln::inductor {

// Note [Kernel nodes]
// Each group of schedule_kernels (Note [Kernel scheduling]) becomes an extern node whose callable (a KernelCall object)
// runs the compiled kernel on the group's inputs and returns its output (a
// tuple when the group hands several values to the graph), so
// the prim executor schedules kernels like any other op and releases their
// values as usual. Kernels are compiled with their inputs' strides as
// constants; the prim executor's results have the layouts their metas say
// (the decomposition checks sizes and dtypes; layouts follow torch's rules),
// but should an input arrive with other strides, the call copies it into
// the expected layout first rather than read the wrong elements. Compiled
// kernels come from the kernel cache (inductor/cpu/kernel_cache.h), keyed
// by their text without the name, so the 64 identical layers of a model
// compile once, and a second process loads them from disk. On a graph whose
// tensors are all on one CUDA device (with KernelTargets::cuda), the same
// groups become CUDA kernels instead (inductor/cuda/, Note [CUDA kernels]),
// kept in a memory cache keyed by source and architecture.

struct KernelEntry {
  Kernel kernel;
  cpu::CpuKernel compiled;
  std::shared_ptr<const cuda::CudaKernel> cuda;  // set for a CUDA kernel
  std::vector<int64_t> cuda_words;                // its run-time layout words (Note [CUDA run-time layout])
  int device = -1;                                // its CUDA device
  // mode="max-autotune" (Note [CUDA autotuning]): `tuned` is the kernel
  // of the chosen launch configuration once its first launch chose it
  // (the GIL guards it; kernel calls hold it).
  bool autotune = false;
  std::function<void()> autotuned;
  mutable std::shared_ptr<const cuda::CudaKernel> tuned;
};

namespace {

using base::PyRef;

// A Python callable running one kernel: call(*inputs, *buffers) ->
// output(s), where buffers are dead tensors whose storage outputs reuse
// (Note [Buffer reuse]).
struct KernelCall {
  PyObject_HEAD
  std::shared_ptr<const KernelEntry>* entry;  // owned
  std::vector<graph::TensorMeta>* expected;   // owned: the inputs' metas
  std::vector<int>* reuse;                    // owned: per output, its buffer's index among the buffers, or -1
  size_t buffers;                             // how many buffer arguments follow the inputs
  vectorcallfunc vectorcall;
};

// `tensor` in the layout of `meta`: itself when it has it, else a copy
// (input `input` of kernel `kernel`, for the log line).
PyRef with_layout(PyObject* tensor, const graph::TensorMeta& meta, const std::string& kernel, Py_ssize_t input) {
  // Checked without building a meta: this runs for every input of every launch.
  if (runtime::tensor_has_layout(tensor, meta)) return PyRef::borrow(tensor);
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef sizes = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(meta.sizes.size())));
  PyRef strides = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(meta.strides.size())));
  for (size_t i = 0; i < meta.sizes.size(); ++i) {
    PyTuple_SET_ITEM(sizes.get(), i, PyLong_FromLongLong(meta.sizes[i]));
    PyTuple_SET_ITEM(strides.get(), i, PyLong_FromLongLong(meta.strides[i]));
  }
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(tensor, "dtype"));
  PyRef device = PyRef::steal(PyObject_GetAttrString(tensor, "device"));
  PyRef empty = torch ? PyRef::steal(PyObject_GetAttrString(torch.get(), "empty_strided")) : PyRef();
  PyRef args = PyRef::steal(PyTuple_Pack(2, sizes.get(), strides.get()));
  PyRef kwargs = PyRef::steal(PyDict_New());
  if (!empty || !args || !kwargs || !dtype || !device) return PyRef();
  PyDict_SetItemString(kwargs.get(), "dtype", dtype.get());
  PyDict_SetItemString(kwargs.get(), "device", device.get());
  PyRef out = PyRef::steal(PyObject_Call(empty.get(), args.get(), kwargs.get()));
  if (!out) return PyRef();
  // A broadcast dim of the compiled layout (stride 0) holds one element that
  // every index reads: copy_ refuses to write such an overlapping tensor, so
  // the copy goes through the first index of each (the input is broadcast
  // there too: the stride came from an expand the graph also applies).
  PyRef target = out, source = PyRef::borrow(tensor);
  for (size_t d = 0; d < meta.sizes.size(); ++d) {
    if (meta.strides[d] != 0 || meta.sizes[d] <= 1) continue;
    target = PyRef::steal(PyObject_CallMethod(target.get(), "narrow", "nnn", static_cast<Py_ssize_t>(d),
                                              Py_ssize_t{0}, Py_ssize_t{1}));
    if (!target) return PyRef();
    source = PyRef::steal(PyObject_CallMethod(source.get(), "narrow", "nnn", static_cast<Py_ssize_t>(d),
                                              Py_ssize_t{0}, Py_ssize_t{1}));
    if (!source) return PyRef();
  }
  PyRef copied = PyRef::steal(PyObject_CallMethod(target.get(), "copy_", "O", source.get()));
  if (!copied) return PyRef();
  if (base::log_enabled(base::LogChannel::prims)) {
    // The layouts, to find which pass's metas disagree with what runs.
    graph::TensorMeta actual;
    runtime::read_tensor_meta(tensor, &actual);
    KILN_LOG(prims, "kernel " << kernel << " input " << input << " copied into its compiled layout: "
                              << graph::format_tensor_meta(actual) << " -> " << graph::format_tensor_meta(meta));
  }
  return out;
}

PyObject* kernel_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<KernelCall*>(callable);
  const KernelEntry& entry = **self->entry;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const Py_ssize_t ninputs = static_cast<Py_ssize_t>(self->expected->size());
  if (kwnames || nargs != ninputs + static_cast<Py_ssize_t>(self->buffers)) {
    PyErr_Format(PyExc_TypeError, "kiln kernel %s takes %zu tensors, got %zd", entry.kernel.name.c_str(),
                 self->expected->size() + self->buffers, nargs);
    return nullptr;
  }
  std::vector<PyRef> held;
  std::vector<PyObject*> inputs;
  held.reserve(ninputs);
  inputs.reserve(ninputs);
  for (Py_ssize_t i = 0; i < ninputs; ++i) {
    if (!runtime::is_tensor(args[i])) {
      PyErr_Format(PyExc_TypeError, "kiln kernel %s: input %zd is not a tensor", entry.kernel.name.c_str(), i);
      return nullptr;
    }
    PyRef laid_out = with_layout(args[i], (*self->expected)[i], entry.kernel.name, i);
    if (!laid_out) return nullptr;
    inputs.push_back(laid_out.get());
    held.push_back(std::move(laid_out));
  }
  std::vector<PyObject*> reuse(self->reuse->size(), nullptr);
  for (size_t i = 0; i < reuse.size(); ++i) {
    if ((*self->reuse)[i] >= 0) reuse[i] = args[ninputs + (*self->reuse)[i]];
  }
  std::shared_ptr<const cuda::CudaKernel> cuda_kernel = entry.cuda;
  if (cuda_kernel && entry.autotune) {
    if (!entry.tuned) {
      cuda::TunedKernel tuned = cuda::tune_cuda_kernel(entry.kernel, entry.device, inputs.data());
      if (!tuned.kernel) return nullptr;
      if (tuned.timed && entry.autotuned) entry.autotuned();
      if (tuned.final) entry.tuned = tuned.kernel;  // else: the default for this launch only
      cuda_kernel = std::move(tuned.kernel);
    } else {
      cuda_kernel = entry.tuned;
    }
  }
  // run_cpu_kernel releases the GIL while the kernel runs; a CUDA launch
  // returns at once.
  // A tuned kernel has a constant layout (launch_candidates): no words.
  static const std::vector<int64_t> no_words;
  const std::vector<int64_t>& words =
      cuda_kernel && cuda_kernel->source.layout_sizes > 0 ? entry.cuda_words : no_words;
  PyObject* outputs =
      cuda_kernel ? cuda::run_cuda_kernel(*cuda_kernel, entry.kernel, entry.device, inputs.data(), words)
                  : cpu::run_cpu_kernel(entry.compiled, entry.kernel, inputs.data(), 0, reuse.data());
  if (!outputs || PyTuple_GET_SIZE(outputs) != 1) return outputs;
  PyObject* single = PyTuple_GET_ITEM(outputs, 0);
  Py_INCREF(single);
  Py_DECREF(outputs);
  return single;
}

void kernel_call_dealloc(PyObject* callable) {
  auto* self = reinterpret_cast<KernelCall*>(callable);
  delete self->entry;
  delete self->expected;
  delete self->reuse;
  Py_TYPE(callable)->tp_free(callable);
}

PyTypeObject* kernel_call_type() {
  static PyTypeObject* type = [] {
    static PyMemberDef members[] = {
        {"__vectorcalloffset__", T_PYSSIZET, offsetof(KernelCall, vectorcall), READONLY, nullptr},
        {nullptr, 0, 0, 0, nullptr},
    };
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, reinterpret_cast<void*>(kernel_call_dealloc)},
        {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
        {Py_tp_members, members},
        {0, nullptr},
    };
    static PyType_Spec spec = {"kiln.KernelCall", sizeof(KernelCall), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, slots};
    return reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  }();
  return type;
}

PyRef make_kernel_call(std::shared_ptr<const KernelEntry> entry, std::vector<graph::TensorMeta> expected,
                       std::vector<int> reuse) {
  PyTypeObject* type = kernel_call_type();
  if (!type) return PyRef();
  auto* self = PyObject_New(KernelCall, type);
  if (!self) return PyRef();
  self->buffers = static_cast<size_t>(std::count_if(reuse.begin(), reuse.end(), [](int b) { return b >= 0; }));
  self->entry = new std::shared_ptr<const KernelEntry>(std::move(entry));
  self->expected = new std::vector<graph::TensorMeta>(std::move(expected));
  self->reuse = new std::vector<int>(std::move(reuse));
  self->vectorcall = kernel_call;
  return PyRef::steal(reinterpret_cast<PyObject*>(self));
}

// The CPU kernel compiled, or taken from the kernel cache (memory, then
// disk: inductor/cpu/kernel_cache.h).
std::shared_ptr<KernelEntry> cached_cpu_kernel(Kernel kernel, bool* compiled_now) {
  auto entry = std::make_shared<KernelEntry>();
  cpu::KernelSource source = cpu::KernelSource::Compiled;
  entry->compiled = cpu::compile_cached(kernel, &source);
  *compiled_now = source == cpu::KernelSource::Compiled;
  entry->kernel = std::move(kernel);
  return entry;
}

// A kernel compiled for an entry, or why it could not be.
struct CompiledEntry {
  std::shared_ptr<KernelEntry> entry;  // null when compiling threw
  bool compiled_now = false;
  std::string error;
};

// Threads compiling one graph's kernels: KILN_COMPILE_THREADS when set to
// a positive number (1 compiles in turn), else the machine's cores.
size_t compile_threads() {
  static const size_t threads = [] {
    if (const char* text = std::getenv("KILN_COMPILE_THREADS"); text && *text) {
      char* end = nullptr;
      const long n = std::strtol(text, &end, 10);
      if (*end == '\0' && n > 0) return static_cast<size_t>(n);
      KILN_LOG(kernels, "KILN_COMPILE_THREADS=" << text << " is no positive number: ignored");
    }
    return static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return threads;
}

// Compiles each kernel into an entry, in order, on up to compile_threads()
// threads: NVRTC takes 20-70 ms a kernel, LLVM 10-100 ms, and a training
// graph has dozens to hundreds; both kernel caches and both compilers are
// thread-safe (no Python inside; Note [One JIT]). For a CUDA device
// (`device` >= 0) compile_cuda_kernels groups them into NVRTC programs,
// each kernel written with a run-time layout when `cuda_runtime_layout`.
std::vector<CompiledEntry> compile_entries(const std::vector<LoweredKernel>& kernels, int device,
                                           bool cuda_runtime_layout) {
  std::vector<CompiledEntry> out(kernels.size());
  if (device >= 0) {
    // CUDA: a few kernels to an NVRTC program (Note [Kernels compiled
    // together] in inductor/cuda/cuda_program.cpp).
    std::vector<cuda::CudaKernelRequest> requests;
    std::string arch;
    try {
      arch = cuda::device_arch(device);
      for (const LoweredKernel& lowered : kernels) {
        cuda::LaunchConfig config = cuda::launch_config_for(lowered.kernel);
        config.runtime_layout = cuda_runtime_layout;
        requests.push_back({&lowered.kernel, config});
      }
    } catch (const std::exception& e) {
      for (CompiledEntry& entry : out) entry.error = e.what();
      return out;
    }
    std::vector<cuda::CudaKernelResult> results = cuda::compile_cuda_kernels(requests, arch, compile_threads());
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (!results[i].kernel) {
        out[i].error = std::move(results[i].error);
        continue;
      }
      auto entry = std::make_shared<KernelEntry>();
      entry->cuda = std::move(results[i].kernel);
      entry->cuda_words = std::move(results[i].words);
      entry->device = device;
      entry->kernel = kernels[i].kernel;
      out[i].entry = std::move(entry);
      out[i].compiled_now = results[i].compiled_now;
    }
    return out;
  }
  auto compile = [&](size_t i) {
    try {
      out[i].entry = cached_cpu_kernel(kernels[i].kernel, &out[i].compiled_now);
    } catch (const std::exception& e) {
      out[i].error = e.what();
    }
  };
  if (compile_threads() <= 1 || kernels.size() <= 1) {
    for (size_t i = 0; i < kernels.size(); ++i) compile(i);
    return out;
  }
  // A kernel repeating an earlier one of the graph (identical layers) waits
  // for it and then comes from the memory cache, as in turn: two threads
  // would both compile it.
  std::vector<size_t> firsts;
  std::vector<size_t> repeats;
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < kernels.size(); ++i) {
    Kernel nameless = kernels[i].kernel;
    nameless.name.clear();
    (seen.emplace(format_kernel(nameless), i).second ? firsts : repeats).push_back(i);
  }
  base::parallel_for(firsts.size(), compile_threads(), [&](size_t k) { compile(firsts[k]); });
  for (size_t i : repeats) compile(i);
  return out;
}

// Objects passed through the graph (a KV cache in a model's output) have
// no device: they are no tensors, and no kernel reads them.
bool is_tensor_value(const prims::PrimValue& value) {
  return value.node >= 0 || value.meta.dtype != graph::DType::Other;
}

bool all_on_cpu(const prims::PrimGraph& graph) {
  for (const prims::PrimValue& value : graph.values()) {
    if (is_tensor_value(value) && value.meta.device_type != graph::DeviceType::CPU) return false;
  }
  return true;
}

// The CUDA device every tensor of the graph is on, or -1.
int one_cuda_device(const prims::PrimGraph& graph) {
  int device = -1;
  for (const prims::PrimValue& value : graph.values()) {
    if (!is_tensor_value(value)) continue;
    if (value.meta.device_type != graph::DeviceType::CUDA || value.meta.device_index < 0) return -1;
    if (device >= 0 && value.meta.device_index != device) return -1;
    device = value.meta.device_index;
  }
  return device;
}

}  // namespace

bool cpu_kernels_available() { return cpu::cpu_codegen_available(); }

bool cuda_kernels_available() {
  static const bool available = [] {
    std::string why;
    if (!cuda::nvrtc_available(&why) || !cuda::cuda_driver_available(&why)) {
      KILN_LOG(prims, "CUDA kernels unavailable: " << why);
      return false;
    }
    return true;
  }();
  return available;
}

namespace {

// Units to emit in an order where each runs after what it reads: kernel
// groups and the nodes in none. Among ready units the one that came first
// in the graph goes first (a group counts at its last node), so nodes keep
// their order unless they wait for a kernel that now makes their input.
// Readers of a tensor an extern may write stay on their side of the call.
// With `externs_in_order`, extern nodes (torch calls, which may mutate,
// e.g. batch_norm's running statistics) also keep their order among
// themselves. Empty when no order exists.
std::optional<std::vector<int>> unit_order(const prims::PrimGraph& graph, const std::vector<int>& unit_of_node,
                                           int units, const std::vector<int>& position, bool externs_in_order,
                                           std::vector<int>* stuck = nullptr) {
  std::vector<std::set<int>> deps(units);
  std::vector<std::vector<int>> dependents(units);
  auto depend = [&](int u, int on) {
    if (u != on && deps[u].insert(on).second) dependents[on].push_back(u);
  };
  // Note [Extern writes] in prims/extern_writes.cpp.
  for (const auto& [before, after] : extern_order_edges(graph)) {
    if (unit_of_node[before] >= 0 && unit_of_node[after] >= 0) depend(unit_of_node[after], unit_of_node[before]);
  }
  int last_extern = -1;
  for (int n = 0; n < static_cast<int>(graph.nodes().size()); ++n) {
    const int u = unit_of_node[n];
    if (u < 0) continue;
    for (int value : node_reads(graph.node(n))) {
      const int producer = graph.value(value).node;
      if (producer >= 0 && unit_of_node[producer] >= 0) depend(u, unit_of_node[producer]);
    }
    if (externs_in_order && graph.node(n).prim == prims::Prim::Extern) {
      if (last_extern >= 0) depend(u, unit_of_node[last_extern]);
      last_extern = n;
    }
  }
  std::vector<int> waiting(units);
  std::set<std::pair<int, int>> ready;  // (position, unit)
  for (int u = 0; u < units; ++u) {
    waiting[u] = static_cast<int>(deps[u].size());
    if (waiting[u] == 0) ready.insert({position[u], u});
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int u = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(u);
    for (int v : dependents[u]) {
      if (--waiting[v] == 0) ready.insert({position[v], v});
    }
  }
  if (static_cast<int>(order.size()) != units) {
    if (stuck) {
      // One cycle among the units left waiting: follow a waiting
      // dependency until a unit repeats.
      std::vector<int> seen_at(units, -1);
      int u = -1;
      for (int v = 0; v < units && u < 0; ++v) {
        if (waiting[v] > 0) u = v;
      }
      std::vector<int> path;
      while (u >= 0 && seen_at[u] < 0) {
        seen_at[u] = static_cast<int>(path.size());
        path.push_back(u);
        int next = -1;
        for (int d : deps[u]) {
          if (waiting[d] > 0) {
            next = d;
            break;
          }
        }
        u = next;
      }
      if (u >= 0) stuck->assign(path.begin() + seen_at[u], path.end());
    }
    return std::nullopt;
  }
  return order;
}

// Adds to `out` a GEMM node computing matmul `node` of `graph` (Note [GEMM
// nodes]) and returns its value, or -1 when the generated kernel does not
// apply or does not compile (logged; the node is then copied as it is).
int gemm_node(prims::PrimGraph& out, const prims::PrimGraph& graph, const prims::PrimNode& node,
              const std::vector<int>& map, const KernelTargets& targets, int* compiled) {
  const int a = node.args.at(0).value, b = node.args.at(1).value;
  PyRef call;
  bool compiled_now = false;
  try {
    call = make_gemm_call(graph.value(a).meta, graph.value(b).meta, targets.cpu_matmul, targets.gemm_rows_at_run_time,
                          &compiled_now);
  } catch (const std::exception& e) {
    KILN_LOG(prims, "matmul left to torch: " << e.what());
    return -1;
  }
  if (!call) {
    if (PyErr_Occurred()) throw std::runtime_error("cannot make a GEMM callable");
    return -1;
  }
  *compiled += compiled_now ? 1 : 0;
  prims::PrimAttrs attrs;
  attrs.target = call.release();
  attrs.target_name = "gemm";
  attrs.extern_args = {graph::Arg::of_node(map[a]), graph::Arg::of_node(map[b])};
  return out.add_node(prims::Prim::Extern, {}, std::move(attrs), {graph.value(node.outputs[0]).meta}).at(0);
}

// One rewrite of `graph` before scheduling, the first that applies, into
// *out (with its log line); false when none does. Each leaves nothing for
// itself to do again, so applying them until none applies ends.
bool rewrite_for_kernels(const prims::PrimGraph& graph, bool on_cuda, const KernelTargets& targets,
                         prims::PrimGraph* out) {
  // Each rewrite writes into a fresh graph: one that declines may have
  // started its output.
  auto take = [&](prims::PrimGraph& made, const char* what) {
    if (what) KILN_LOG(kernels, what << ": " << graph.nodes().size() << " -> " << made.nodes().size() << " nodes");
    *out = std::move(made);
    return true;
  };
  // A rewrite below may leave a node nothing reads any more (Note
  // [Recomputed kernel outputs]: a cone copied into its only reader); it
  // would still run, through torch.
  if (prims::PrimGraph live; prims::drop_dead_nodes(graph, &live)) return take(live, "dead nodes dropped");
  // Note [Copies undone by permutes].
  if (prims::PrimGraph dropped; drop_copies_undone_by_permutes(graph, &dropped)) {
    return take(dropped, "copies undone by permutes dropped");
  }
  // Note [View pairs].
  if (prims::PrimGraph folded; fold_view_pairs(graph, &folded)) return take(folded, "views of views folded");
  // Note [Batched state updates].
  if (prims::PrimGraph batched; batch_state_updates(graph, &batched)) {
    return take(batched, "in-place updates of inputs batched into foreach calls");
  }
  // Note [Casts above reshapes].
  if (prims::PrimGraph sunk; (on_cuda || targets.cpu) && sink_reshapes_below_casts(graph, &sunk)) {
    return take(sunk, "casts moved above reshapes");
  }
  // Note [Bias epilogues].
  if (prims::PrimGraph folded; on_cuda && fold_bias_into_matmuls(graph, &folded)) {
    return take(folded, "bias adds folded into linear calls");
  }
  // Note [Linear without a bias].
  if (prims::PrimGraph folded; on_cuda && fold_transposes_into_linear_calls(graph, &folded)) {
    return take(folded, "transposed weights folded into linear calls");
  }
  // Note [Batched weight casts].
  if (prims::PrimGraph batched; on_cuda && targets.batch_input_casts && batch_input_casts(graph, &batched)) {
    return take(batched, "casts of inputs batched into foreach copies");
  }
  // Note [Convolution biases in kernels].
  if (prims::PrimGraph moved; (on_cuda || targets.cpu) && targets.conv_bias_in_kernels &&
                                 move_conv_biases_into_kernels(graph, &moved)) {
    return take(moved, "convolution biases moved into kernels");
  }
  // Note [A view per kernel reader].
  if (prims::PrimGraph copied; (on_cuda || targets.cpu) && copy_views_per_kernel_reader(graph, &copied)) {
    return take(copied, "views read by several kernels copied per reader");
  }
  // Note [Two-step outer reductions].
  if (prims::PrimGraph split; on_cuda && split_outer_reductions(graph, &split)) return take(split, nullptr);
  // Note [Kernel copies].
  if (prims::PrimGraph copied; (on_cuda || targets.cpu) && make_copies_explicit(graph, on_cuda, &copied)) {
    return take(copied, nullptr);
  }
  return false;
}

}  // namespace

// How many times Note [Recomputed kernel outputs] may rewrite one graph:
// a bound on compile time (each round schedules the graph again).
constexpr int kMaxRecomputeRounds = 8;

KernelPlan plan_kernels(const prims::PrimGraph& input, KernelTargets targets) {
  KernelPlan plan;
  plan.targets = std::move(targets);
  const KernelTargets& t = plan.targets;
  const prims::PrimGraph* current = &input;
  prims::PrimGraph owned;
  // The rewrites to their fixed point, then scheduling; Note [Recomputed
  // kernel outputs] rewrites the scheduled graph, which is then rewritten
  // and scheduled again, until no output is left to recompute, a round's
  // schedule stores no fewer bytes, or kMaxRecomputeRounds rewrites were
  // made. One round is not enough: a
  // rescheduled graph groups the copies' producers anew, and a conv net's
  // backward left a new group storing float32 recomputed values for later
  // readers after each of the first three rounds (timm ResNet-50, 2 images
  // on the CPU: the backward's live kernel outputs peaked at 184.5 MiB
  // after two rounds, 125.9 MiB at the fixed point, reached after four).
  // A round is kept only when its schedule stores fewer bytes; otherwise
  // the graph and groups before it are restored (Note [Recomputed kernel
  // outputs]). `kept` holds that earlier graph unless it is `input`.
  prims::PrimGraph kept;
  const prims::PrimGraph* kept_graph = nullptr;
  std::vector<KernelGroup> kept_groups;
  int64_t kept_bytes = 0;
  // Where planning's time goes, for KILN_LOGS=perf.
  int rewrites = 0, schedules = 0;
  double rewrite_ms = 0, schedule_ms = 0, recompute_ms = 0;
  for (int recomputes = kMaxRecomputeRounds;;) {
    // The target switch: CUDA kernels for a graph on one CUDA device.
    plan.device = t.cuda ? one_cuda_device(*current) : -1;
    plan.on_cuda = plan.device >= 0 && cuda_kernels_available();
    plan.on_cpu = t.cpu && cpu_kernels_available() && all_on_cpu(*current);
    prims::PrimGraph next;
    const base::Stopwatch rewrite_clock;
    const bool rewritten = rewrite_for_kernels(*current, plan.on_cuda, t, &next);
    rewrite_ms += rewrite_clock.ms();
    ++rewrites;
    if (rewritten) {
      owned = std::move(next);
      current = &owned;
      continue;
    }
    plan.groups.clear();
    const base::Stopwatch schedule_clock;
    if (plan.on_cpu || plan.on_cuda) plan.groups = schedule_kernels(*current);
    schedule_ms += schedule_clock.ms();
    ++schedules;
    const base::Stopwatch recompute_clock;
    const int64_t stored = stored_bytes(*current, plan.groups);
    if (kept_graph != nullptr && stored >= kept_bytes) {
      KILN_LOG(kernels, "kernel outputs: a recompute round stored " << stored << " bytes, not fewer than "
                                                                     << kept_bytes << "; the round is undone");
      plan.groups = std::move(kept_groups);
      if (kept_graph == &input) {
        current = &input;
      } else {
        owned = std::move(kept);
        current = &owned;
      }
      recompute_ms += recompute_clock.ms();
      break;
    }
    const bool recomputed = (plan.on_cpu || plan.on_cuda) && recomputes > 0 &&
                            recompute_kernel_outputs(*current, plan.groups, &next);
    recompute_ms += recompute_clock.ms();
    if (recomputed) {
      KILN_LOG(kernels, "kernel outputs recomputed by their readers: " << current->nodes().size() << " -> "
                                                                        << next.nodes().size() << " nodes");
      kept_bytes = stored;
      kept_groups = std::move(plan.groups);
      if (current == &input) {
        kept_graph = &input;
      } else {
        kept = std::move(owned);
        kept_graph = &kept;
      }
      owned = std::move(next);
      current = &owned;
      if (--recomputes == 0) {
        KILN_LOG(kernels, "kernel outputs: stopped recomputing after " << kMaxRecomputeRounds << " rounds");
      }
      continue;
    }
    break;
  }
  KILN_LOG(perf, "plan_kernels: " << rewrites << " rewrite rounds " << rewrite_ms << " ms, " << schedules
                                  << " schedules " << schedule_ms << " ms, recomputes " << recompute_ms << " ms");
  plan.schedules = schedules;
  plan.graph = current == &input ? input : std::move(owned);
  return plan;
}

std::vector<LoweredKernel> lower_kernels(KernelPlan* plan) {
  std::vector<LoweredKernel> lowered;
  std::vector<KernelGroup> kept;
  for (KernelGroup& group : plan->groups) {
    try {
      lowered.push_back(lower_group(plan->graph, group));
      kept.push_back(std::move(group));
      KILN_LOG(kernels, format_kernel(lowered.back().kernel));
    } catch (const std::exception& e) {
      KILN_LOG(prims, "kernel group left to the prim executor: " << e.what());
    }
  }
  plan->groups = std::move(kept);
  // Note [Kernel outputs in their readers' shape].
  const int absorbed = absorb_output_reshapes(plan->graph, plan->groups, lowered);
  if (absorbed > 0) KILN_LOG(kernels, "kernel outputs in their reshapes' shape: " << absorbed);
  return lowered;
}

CompiledKernels compile_kernels(const KernelPlan& plan, const std::vector<LoweredKernel>& lowered) {
  CompiledKernels out;
  std::vector<CompiledEntry> compiled =
      compile_entries(lowered, plan.on_cuda ? plan.device : -1, plan.targets.cuda_runtime_layout);
  for (CompiledEntry& made : compiled) {
    if (!made.entry) {
      KILN_LOG(prims, "kernel group left to the prim executor: " << made.error);
    } else if (plan.on_cuda) {
      made.entry->autotune = plan.targets.autotune;
      made.entry->autotuned = plan.targets.autotuned;
    }
    out.compiled += made.entry && made.compiled_now ? 1 : 0;
    out.entries.push_back(std::move(made.entry));
  }
  return out;
}

FusedGraph emit_kernel_graph(const KernelPlan& plan, const std::vector<LoweredKernel>& all_lowered,
                             const CompiledKernels& kernels) {
  FusedGraph out;
  out.graph = std::make_shared<prims::PrimGraph>();
  out.compiled = kernels.compiled;
  const prims::PrimGraph& graph = plan.graph;
  const bool on_cuda = plan.on_cuda;
  const bool on_cpu = plan.on_cpu;
  const KernelTargets& targets = plan.targets;
  const int node_count = static_cast<int>(graph.nodes().size());
  // The groups whose kernels compiled; the others stay prim nodes.
  std::vector<const LoweredKernel*> lowered_ptrs;
  std::vector<std::shared_ptr<const KernelEntry>> entries;
  std::vector<const KernelGroup*> kept;
  for (size_t i = 0; i < all_lowered.size(); ++i) {
    if (!kernels.entries[i]) continue;
    entries.push_back(kernels.entries[i]);
    lowered_ptrs.push_back(&all_lowered[i]);
    kept.push_back(&plan.groups[i]);
  }
  // Units: kernel groups 0..kept, then one per node in no group.
  std::vector<int> unit_of_node(node_count, -1);
  std::vector<int> position;
  for (size_t g = 0; g < kept.size(); ++g) {
    for (int n : kept[g]->nodes) unit_of_node[n] = static_cast<int>(g);
    position.push_back(kept[g]->nodes.back());
  }
  std::vector<int> node_of_unit(kept.size(), -1);
  for (int n = 0; n < node_count; ++n) {
    if (unit_of_node[n] >= 0) continue;
    unit_of_node[n] = static_cast<int>(position.size());
    position.push_back(n);
    node_of_unit.push_back(n);
  }
  const int units = static_cast<int>(position.size());
  // (A graph with no nodes, such as a backward with nothing to compute, has
  // the empty order.)
  std::optional<std::vector<int>> ordered = unit_order(graph, unit_of_node, units, position, /*externs_in_order=*/true);
  if (!ordered) {
    // A kernel would have to run both before and after some extern: keep
    // the data order only (the scheduler guarantees that one exists).
    KILN_LOG(prims, "kernel nodes reorder extern calls");
    std::vector<int> stuck;
    ordered = unit_order(graph, unit_of_node, units, position, /*externs_in_order=*/false, &stuck);
    if (!ordered) {
      // Which units wait on each other, for the report: kernel groups by
      // their nodes, other units by their node and prim.
      std::string units_text;
      for (size_t i = 0; i < stuck.size() && i < 8; ++i) {
        const int u = stuck[i];
        if (u < static_cast<int>(kept.size())) {
          units_text += " [group of nodes %" + std::to_string(kept[u]->nodes.front()) + "..%" +
                        std::to_string(kept[u]->nodes.back()) + "]";
        } else {
          const int n = node_of_unit[u];
          units_text += " [%" + std::to_string(n) + " " + prims::prim_name(graph.node(n).prim) + "]";
        }
      }
      // And why each waits on the next: a node of it reading a value the
      // next makes (else an extern ordering edge).
      std::string why_text;
      for (size_t i = 0; i < stuck.size(); ++i) {
        const int u = stuck[i], next = stuck[(i + 1) % stuck.size()];
        std::string edge = " (extern order)";
        for (int n = 0; n < node_count && edge == " (extern order)"; ++n) {
          if (unit_of_node[n] != u) continue;
          for (int value : node_reads(graph.node(n))) {
            const int producer = graph.value(value).node;
            if (producer >= 0 && unit_of_node[producer] == next) {
              edge = " (%" + std::to_string(n) + " " + prims::prim_name(graph.node(n).prim) + " reads %" +
                     std::to_string(producer) + " " + prims::prim_name(graph.node(producer).prim) + ")";
              break;
            }
          }
        }
        why_text += edge;
      }
      throw std::runtime_error("kernel groups form a cycle of " + std::to_string(stuck.size()) +
                               " units, each waiting on the next:" + units_text + ";" + why_text);
    }
  }
  const std::vector<int>& order = *ordered;

  // Note [Buffer reuse] in buffer_plan.cpp.
  std::vector<PlanUnit> plan_units;
  for (int unit : order) {
    PlanUnit plan_unit;
    if (unit < static_cast<int>(kept.size())) {
      plan_unit.reads = lowered_ptrs[unit]->inputs;
      plan_unit.outputs = lowered_ptrs[unit]->outputs;
      // CUDA kernels allocate through torch's caching allocator, which
      // reuses memory already.
      plan_unit.kernel = !on_cuda;
    } else {
      const prims::PrimNode& node = graph.node(node_of_unit[unit]);
      plan_unit.reads = node_reads(node);
      plan_unit.outputs = node.outputs;
      const prims::Family family = prims::prim_info(node.prim).family;
      plan_unit.may_alias_reads =
          family == prims::Family::View || family == prims::Family::Extern || family == prims::Family::Convert;
    }
    plan_units.push_back(std::move(plan_unit));
  }
  const std::vector<std::vector<int>> buffers = plan_buffer_reuse(graph, plan_units);

  std::vector<int> map(graph.values().size(), -1);
  for (int id : graph.inputs()) map[id] = out.graph->add_input(graph.value(id).meta);
  for (size_t step = 0; step < order.size(); ++step) {
    const int unit = order[step];
    if (unit < static_cast<int>(kept.size())) {
      const LoweredKernel& kernel = *lowered_ptrs[unit];
      std::vector<graph::TensorMeta> expected;
      std::vector<graph::Arg> args;
      for (int id : kernel.inputs) {
        expected.push_back(graph.value(id).meta);
        args.push_back(graph::Arg::of_node(map[id]));
      }
      // Dead buffers the outputs reuse follow the inputs.
      std::vector<int> reuse(kernel.outputs.size(), -1);
      int buffer_args = 0;
      for (size_t i = 0; i < kernel.outputs.size(); ++i) {
        const int donor = buffers[step][i];
        if (donor < 0) continue;
        reuse[i] = buffer_args++;
        args.push_back(graph::Arg::of_node(map[donor]));
        KILN_LOG(kernels, "kernel " << entries[unit]->kernel.name << " output " << i << " reuses the buffer of %"
                                    << map[donor] << " (" << tensor_span_bytes(graph.value(kernel.outputs[i]).meta)
                                    << " bytes)");
      }
      out.reused_buffers += buffer_args;
      std::vector<graph::TensorMeta> metas;
      for (int id : kernel.outputs) metas.push_back(graph.value(id).meta);
      PyRef call = make_kernel_call(entries[unit], std::move(expected), std::move(reuse));
      if (!call) {
        PyErr_Clear();
        throw std::runtime_error("cannot make a kernel callable");
      }
      prims::PrimAttrs attrs;
      attrs.target = call.release();
      attrs.target_name = "kernel " + entries[unit]->kernel.name;
      attrs.extern_args = std::move(args);
      std::vector<int> made = out.graph->add_node(prims::Prim::Extern, {}, std::move(attrs), metas);
      for (size_t i = 0; i < made.size(); ++i) map[kernel.outputs[i]] = made[i];
      ++out.kernels;
      out.fused_prims += static_cast<int>(kept[unit]->nodes.size());
      continue;
    }
    const prims::PrimNode& node = graph.node(node_of_unit[unit]);
    if (on_cpu && node.prim == prims::Prim::Matmul && targets.cpu_matmul != MatmulPolicy::Aten) {
      const int made = gemm_node(*out.graph, graph, node, map, targets, &out.compiled);
      if (made >= 0) {
        map[node.outputs[0]] = made;
        ++out.gemms;
        continue;
      }
    }
    const std::vector<int> made = prims::copy_node(*out.graph, graph, node, map);
    for (size_t i = 0; i < made.size(); ++i) map[node.outputs[i]] = made[i];
  }
  std::vector<int> outputs;
  for (int id : graph.outputs()) outputs.push_back(map[id]);
  out.graph->set_outputs(std::move(outputs));
  if (std::string problem = out.graph->verify(); !problem.empty()) {
    throw std::runtime_error("fused graph is invalid: " + problem);
  }
  return out;
}

}  // namespace kiln::inductor
