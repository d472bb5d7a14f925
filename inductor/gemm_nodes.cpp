#include "inductor/gemm_nodes.h"

#include <structmember.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "inductor/cpu/gemm.h"
#include "inductor/cpu/kernel_runner.h"
#include "runtime/aten_bridge.h"
#include "runtime/aten_calls.h"
#include "base/log.h"

namespace kiln::inductor {

// Note [GEMM nodes]
// With kiln.config.cpu_matmul "kiln" or "auto", emit_kernel_graph
// turns each matmul node of a CPU graph whose operands are float32 or
// float64 into an extern node calling a GemmCall: (a, b) -> a @ b, the
// kernel compiled for the operands' layouts as the graph's metas say (so
// the backward graph's transposed views are read in place). Operands that
// arrive with other strides go to at::matmul (counted with the products
// left to torch). Autocast never reaches them: its casts are graph nodes
// and prim graphs run with it off (Note [Explicit autocast casts]).
// Policy "auto" times the first call of each spec: after one untimed
// call of each (the first at::matmul of a process starts BLAS's threads,
// and took 13-17 ms where its steady call takes 0.05-0.4 ms: timed cold, it
// lost to the generated kernel on every shape of BERT, GPT-2 and Llama,
// which then ran 10-60% slower than at::matmul would), the generated
// kernel and at::matmul once each, then, unless one is over 3x faster,
// three more calls each alternating, keeping the faster minimum;
// the choice is kept for the process (every node of that spec shares it)
// and logged under KILN_LOGS=kernels. Against the reference BLAS of torch
// 1.13 the kernel won everywhere measured (docs/perf.md); torch 2.11's
// OpenBLAS wins most of the transformer zoo's shapes (docs/perf.md,
// session 22), which is what the timing is for. Results do not depend on
// the thread count (Note [GEMM kernels]).

namespace {

using base::PyRef;

// What a GemmCall runs.
struct GemmNode {
  cpu::GemmSpec spec;
  cpu::CpuKernel compiled;
  graph::TensorMeta a, b;
  std::vector<int64_t> out_sizes;
  MatmulPolicy policy = MatmulPolicy::Kiln;
  std::string key;                // format_gemm_spec(spec)
  std::atomic<int> choice{-1};    // "auto": -1 not timed yet, 0 torch, 1 kiln
};

// The "auto" policy's choices by spec, for the process.
struct Choices {
  std::mutex mutex;
  std::unordered_map<std::string, bool> kiln_faster;
};

Choices& choices() {
  static Choices* made = new Choices();  // leaked: callables may outlive static destruction
  return *made;
}

struct GemmCall {
  PyObject_HEAD
  std::shared_ptr<GemmNode>* node;  // owned
  vectorcallfunc vectorcall;
};

// Runs the generated kernel on a and b into a new tensor; `count`: as a
// product of the graph (not a timing run).
PyObject* run_generated(const GemmNode& node, PyObject* a, PyObject* b, bool count = true) {
  PyObject* out = runtime::new_cpu_tensor(node.out_sizes, node.spec.dtype);
  if (out == nullptr) return nullptr;
  const bool threaded = cpu::gemm_flops(node.spec) >= cpu::kGemmParallelMinFlops;
  const int threads = threaded ? cpu::torch_thread_count() : 1;
  const char* left = runtime::tensor_data(a);
  const char* right = runtime::tensor_data(b);
  char* result = runtime::tensor_data(out);
  Py_BEGIN_ALLOW_THREADS
  cpu::call_gemm(node.compiled, node.spec, left, right, result, threads);
  Py_END_ALLOW_THREADS
  if (count) cpu::count_gemm_call(true);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Times `run` once; -1 when it failed (Python error set). The result is
// kept in *result (the previous one released).
double time_once(const std::function<PyObject*()>& run, PyRef* result) {
  const auto start = std::chrono::steady_clock::now();
  PyRef value = PyRef::steal(run());
  const double seconds = seconds_since(start);
  if (!value) return -1;
  *result = std::move(value);
  return seconds;
}

// The "auto" policy's first call of a spec: times both, records the
// choice, returns the product (from whichever ran last).
PyObject* choose_and_run(GemmNode& node, PyObject* a, PyObject* b) {
  auto kiln = [&] { return run_generated(node, a, b, /*count=*/false); };
  auto aten = [&] { return runtime::aten_matmul(a, b); };
  PyRef result;
  if (time_once(kiln, &result) < 0 || time_once(aten, &result) < 0) return nullptr;  // warm-up
  double best_kiln = time_once(kiln, &result);
  if (best_kiln < 0) return nullptr;
  double best_aten = time_once(aten, &result);
  if (best_aten < 0) return nullptr;
  if (best_kiln * 3 > best_aten && best_aten * 3 > best_kiln) {
    for (int rep = 0; rep < 3; ++rep) {
      const double k = time_once(kiln, &result);
      const double t = time_once(aten, &result);
      if (k < 0 || t < 0) return nullptr;
      best_kiln = std::min(best_kiln, k);
      best_aten = std::min(best_aten, t);
    }
  }
  const bool kiln_faster = best_kiln <= best_aten;
  cpu::count_gemm_measured();
  {
    Choices& all = choices();
    std::lock_guard<std::mutex> lock(all.mutex);
    all.kiln_faster[node.key] = kiln_faster;
  }
  node.choice = kiln_faster ? 1 : 0;
  KILN_LOG(kernels, node.key << ": generated " << best_kiln * 1e6 << " us, at::matmul " << best_aten * 1e6
                             << " us: " << (kiln_faster ? "generated" : "at::matmul") << " from now on");
  return result.release();
}

PyObject* gemm_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<GemmCall*>(callable);
  GemmNode& node = **self->node;
  if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || !runtime::is_tensor(args[0]) || !runtime::is_tensor(args[1])) {
    PyErr_SetString(PyExc_TypeError, "kiln gemm takes two tensors");
    return nullptr;
  }
  PyObject* a = args[0];
  PyObject* b = args[1];
  if (!runtime::tensor_has_layout(a, node.a) || !runtime::tensor_has_layout(b, node.b)) {
    KILN_LOG(kernels, node.key << ": operands arrived in another layout; at::matmul");
    cpu::count_gemm_call(false);
    return runtime::aten_matmul(a, b);
  }
  int choice = node.policy == MatmulPolicy::Kiln ? 1 : node.choice.load();
  if (choice < 0) {
    Choices& all = choices();
    std::unique_lock<std::mutex> lock(all.mutex);
    auto found = all.kiln_faster.find(node.key);
    if (found == all.kiln_faster.end()) {
      lock.unlock();
      return choose_and_run(node, a, b);
    }
    choice = found->second ? 1 : 0;
    node.choice = choice;
  }
  if (choice == 0) {
    cpu::count_gemm_call(false);
    return runtime::aten_matmul(a, b);
  }
  return run_generated(node, a, b);
}

void gemm_call_dealloc(PyObject* callable) {
  auto* self = reinterpret_cast<GemmCall*>(callable);
  delete self->node;
  Py_TYPE(callable)->tp_free(callable);
}

PyTypeObject* gemm_call_type() {
  static PyTypeObject* type = [] {
    static PyMemberDef members[] = {
        {"__vectorcalloffset__", T_PYSSIZET, offsetof(GemmCall, vectorcall), READONLY, nullptr},
        {nullptr, 0, 0, 0, nullptr},
    };
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, reinterpret_cast<void*>(gemm_call_dealloc)},
        {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
        {Py_tp_members, members},
        {0, nullptr},
    };
    static PyType_Spec spec = {"kiln.GemmCall", sizeof(GemmCall), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
                               slots};
    return reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  }();
  return type;
}

}  // namespace

const char* matmul_policy_name(MatmulPolicy policy) {
  switch (policy) {
    case MatmulPolicy::Aten: return "aten";
    case MatmulPolicy::Kiln: return "kiln";
    case MatmulPolicy::Auto: return "auto";
  }
  return "auto";
}

std::optional<MatmulPolicy> matmul_policy_from_name(const std::string& name) {
  for (MatmulPolicy policy : {MatmulPolicy::Aten, MatmulPolicy::Kiln, MatmulPolicy::Auto}) {
    if (name == matmul_policy_name(policy)) return policy;
  }
  return std::nullopt;
}

PyRef make_gemm_call(const graph::TensorMeta& a, const graph::TensorMeta& b, MatmulPolicy policy,
                     bool rows_at_run_time, bool* compiled_now) {
  *compiled_now = false;
  if (policy == MatmulPolicy::Aten) return PyRef();
  std::optional<cpu::GemmSpec> spec = cpu::make_gemm_spec(a, b);
  if (!spec) return PyRef();
  spec->rows_at_run_time = rows_at_run_time;
  auto node = std::make_shared<GemmNode>();
  node->spec = *spec;
  node->key = cpu::format_gemm_spec(*spec);
  cpu::KernelSource source = cpu::KernelSource::Compiled;
  node->compiled = cpu::compile_gemm_cached(*spec, &source);
  *compiled_now = source == cpu::KernelSource::Compiled;
  node->a = a;
  node->b = b;
  const size_t ra = a.sizes.size(), rb = b.sizes.size();
  const size_t rank = std::max(ra, rb);
  for (size_t d = 0; d + 2 < rank; ++d) {
    const size_t from_end = rank - 2 - d;  // 1 = the innermost batch dim
    const int64_t size_a = from_end <= ra - 2 ? a.sizes[ra - 2 - from_end] : 1;
    const int64_t size_b = from_end <= rb - 2 ? b.sizes[rb - 2 - from_end] : 1;
    node->out_sizes.push_back(size_a == 1 ? size_b : size_a);
  }
  node->out_sizes.push_back(a.sizes[ra - 2]);
  node->out_sizes.push_back(b.sizes[rb - 1]);
  node->policy = policy;
  PyTypeObject* type = gemm_call_type();
  if (!type) return PyRef();
  auto* self = PyObject_New(GemmCall, type);
  if (!self) return PyRef();
  self->node = new std::shared_ptr<GemmNode>(std::move(node));
  self->vectorcall = gemm_call;
  return PyRef::steal(reinterpret_cast<PyObject*>(self));
}

void clear_matmul_choices() {
  Choices& all = choices();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.kiln_faster.clear();
}

}  // namespace kiln::inductor
