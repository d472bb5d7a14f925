// kiln._C: the Python face of the runtime. Compiled-function wrappers that
// switch the thread's compile context around a call, plus reset, stats,
// explain, trace dumps, logging and config.
#include <Python.h>
#include <structmember.h>

#include <memory>
#include <string>
#include <vector>

#include "interpreter/call_report.h"
#include "inductor/cuda/cuda_autotune.h"
#include "inductor/cpu/gemm.h"
#include "inductor/fuse_kernels.h"
#include "inductor/gemm_nodes.h"
#include "interpreter/code_cache.h"
#include "interpreter/compile_config.h"
#include "interpreter/frame_hook.h"
#include "base/log.h"
#include "stdlib/torch_callables.h"

namespace {

using kiln::interpreter::CompileConfig;
using kiln::interpreter::ConfigScope;
using kiln::interpreter::TraceCollector;

// A callable that runs `fn` with a compile context (compiled) or with none
// (disabled). Holds a __dict__ so Python can copy __name__, __doc__, ...
struct ContextCall {
  PyObject_HEAD
  PyObject* fn;
  PyObject* dict;
  vectorcallfunc vectorcall;
  std::shared_ptr<CompileConfig> config;  // null: disabled
  // A graph's own context for its backward (Note [Recomputed forwards]):
  // runs cached graphs only, never sampled eagerly under kiln --report.
  bool replay_only;
};

// A compiled call under kiln --report: timed, and run eagerly when sampled.
PyObject* reported_call(ContextCall* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  kiln::interpreter::ConfigReport& report = *self->config->report;
  const bool eager = kiln::interpreter::begin_reported_call(report);
  const int64_t compile_before = report.compile_ns;
  const int64_t start = kiln::interpreter::report_clock_ns();
  PyObject* result;
  if (eager) {
    ConfigScope scope(nullptr);
    result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
  } else {
    kiln::interpreter::CompiledRegion region;
    ConfigScope scope(self->config.get());
    result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
  }
  const int64_t elapsed = kiln::interpreter::report_clock_ns() - start;
  // Failed calls say nothing about speed.
  if (result) {
    kiln::interpreter::end_reported_call(report, eager, report.compile_ns != compile_before, elapsed);
  }
  return result;
}

PyObject* context_call_vectorcall(PyObject* self_obj, PyObject* const* args, size_t nargsf,
                                  PyObject* kwnames) {
  auto* self = reinterpret_cast<ContextCall*>(self_obj);
  kiln::interpreter::ContextDepthScope depth;
  if (!self->config) {
    ConfigScope scope(nullptr);
    return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
  }
  if (self->config->report && !self->replay_only) return reported_call(self, args, nargsf, kwnames);
  kiln::interpreter::CompiledRegion region;
  ConfigScope scope(self->config.get());
  kiln::interpreter::ReplayOnlyScope replay(self->replay_only);
  return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

void context_call_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<ContextCall*>(self_obj);
  PyObject_GC_UnTrack(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->dict);
  self->config.~shared_ptr<CompileConfig>();
  Py_TYPE(self_obj)->tp_free(self_obj);
}

int context_call_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<ContextCall*>(self_obj);
  Py_VISIT(self->fn);
  Py_VISIT(self->dict);
  return 0;
}

int context_call_clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<ContextCall*>(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->dict);
  return 0;
}

// Binding to an instance makes decorated methods work.
PyObject* context_call_descr_get(PyObject* self, PyObject* obj, PyObject* /*type*/) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* context_call_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<ContextCall*>(self_obj);
  return PyUnicode_FromFormat("<kiln %s %R>", self->config ? "compiled" : "disabled", self->fn);
}

PyMemberDef context_call_members[] = {
    {"_fn", T_OBJECT, offsetof(ContextCall, fn), READONLY, "the wrapped callable"},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject ContextCallType = {
    PyVarObject_HEAD_INIT(nullptr, 0)
};

PyObject* make_context_call(PyObject* fn, std::shared_ptr<CompileConfig> config) {
  auto* self = PyObject_GC_New(ContextCall, &ContextCallType);
  if (!self) return nullptr;
  Py_INCREF(fn);
  self->fn = fn;
  self->dict = nullptr;
  self->vectorcall = context_call_vectorcall;
  new (&self->config) std::shared_ptr<CompileConfig>(std::move(config));
  self->replay_only = false;
  PyObject_GC_Track(self);
  return reinterpret_cast<PyObject*>(self);
}

// A readable name for what a config compiles: "qualname (file:line)".
std::string callable_name(PyObject* fn) {
  PyObject* target = PyObject_GetAttrString(fn, "__func__");  // bound methods
  if (!target) {
    PyErr_Clear();
    Py_INCREF(fn);
    target = fn;
  }
  std::string name;
  if (PyFunction_Check(target)) {
    auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(target));
    const char* qualname = PyUnicode_AsUTF8(code->co_qualname);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    name = std::string(qualname ? qualname : "?") + " (" + (file ? file : "?") + ":" +
           std::to_string(code->co_firstlineno) + ")";
  } else {
    PyObject* repr = PyObject_Repr(target);
    name = repr && PyUnicode_AsUTF8(repr) ? PyUnicode_AsUTF8(repr) : "?";
    Py_XDECREF(repr);
  }
  Py_DECREF(target);
  PyErr_Clear();
  return name;
}

// Reads kiln.compile(options=...)'s kiln.config settings (validated by
// kiln.compile_api) into `out`; false with a Python error on a bad one.
bool read_setting_overrides(PyObject* options, kiln::interpreter::SettingOverrides* out) {
  if (!PyDict_Check(options)) {
    PyErr_SetString(PyExc_TypeError, "options must be a dict");
    return false;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(options, &pos, &key, &value)) {
    const std::string name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : "";
    std::optional<bool>* flag = name == "cpu_kernels"              ? &out->cpu_kernels
                                : name == "cuda_kernels"           ? &out->cuda_kernels
                                : name == "parameter_kernel_cache" ? &out->parameter_kernel_cache
                                : name == "constant_subgraphs"     ? &out->constant_subgraphs
                                : name == "batch_input_casts"      ? &out->batch_input_casts
                                : name == "static_regions"         ? &out->static_regions
                                                                   : nullptr;
    if (flag && PyBool_Check(value)) {
      *flag = value == Py_True;
    } else if (const auto policy = name == "cpu_matmul" && PyUnicode_Check(value)
                                       ? kiln::inductor::matmul_policy_from_name(PyUnicode_AsUTF8(value))
                                       : std::nullopt) {
      out->cpu_matmul = *policy;
    } else if (const auto layout = name == "conv_layout" && PyUnicode_Check(value)
                                       ? kiln::prims::conv_layout_from_name(PyUnicode_AsUTF8(value))
                                       : std::nullopt) {
      out->conv_layout = *layout;
    } else if (const auto placement = name == "conv_bias" && PyUnicode_Check(value)
                                          ? kiln::inductor::conv_bias_from_name(PyUnicode_AsUTF8(value))
                                          : std::nullopt) {
      out->conv_bias = *placement;
    } else {
      PyErr_Format(PyExc_ValueError, "options: bad setting %R: %R", key, value);
      return false;
    }
  }
  return true;
}

// _C.compiled(fn, backend, fullgraph, dynamic=None, name=None, mode=None,
// options=None) -> callable running fn under a new config; `name` labels it
// in kiln --report, `options` holds kiln.config settings for its graphs. A
// backend that is not a string is a callable backend (kiln._fx).
PyObject* py_compiled(PyObject*, PyObject* args) {
  PyObject* fn;
  PyObject* backend;
  int fullgraph;
  PyObject* dynamic = Py_None;
  const char* name = nullptr;
  const char* mode = nullptr;
  PyObject* options = Py_None;
  if (!PyArg_ParseTuple(args, "OOp|OzzO", &fn, &backend, &fullgraph, &dynamic, &name, &mode, &options)) {
    return nullptr;
  }
  if (!PyUnicode_Check(backend) && !PyCallable_Check(backend)) {
    PyErr_SetString(PyExc_TypeError, "backend must be a name or a callable");
    return nullptr;
  }
  if (dynamic != Py_None && dynamic != Py_True && dynamic != Py_False) {
    PyErr_SetString(PyExc_TypeError, "dynamic must be None, True or False");
    return nullptr;
  }
  auto config = std::make_shared<CompileConfig>();
  config->id = kiln::interpreter::next_config_id();
  if (PyUnicode_Check(backend)) {
    config->backend = PyUnicode_AsUTF8(backend);
  } else {
    config->backend = "callable";
    config->backend_callable = kiln::base::PyRef::borrow(backend);
  }
  config->fullgraph = fullgraph;
  config->cuda_graphs = mode != nullptr && std::string(mode) == "reduce-overhead";
  // Unlike torch's, kiln's max-autotune adds no CUDA graphs (their replay
  // copies every output): "max-autotune-no-cudagraphs" is the same.
  config->autotune =
      mode != nullptr && (std::string(mode) == "max-autotune" || std::string(mode) == "max-autotune-no-cudagraphs");
  if (options != Py_None && !read_setting_overrides(options, &config->settings)) return nullptr;
  config->dynamic = dynamic == Py_None   ? CompileConfig::Dynamic::Automatic
                    : dynamic == Py_True ? CompileConfig::Dynamic::Always
                                         : CompileConfig::Dynamic::Never;
  if (kiln::interpreter::report_enabled()) {
    config->report = kiln::interpreter::register_report(name ? std::string(name) : callable_name(fn));
  }
  return make_context_call(fn, std::move(config));
}

// _C.disabled(fn) -> callable running fn with tracing off.
PyObject* py_disabled(PyObject*, PyObject* fn) { return make_context_call(fn, nullptr); }

// fn wrapped to run in the compile context of the graph this thread runs
// (Note [Recomputed forwards] in kiln/_autograd.py); None outside graphs.
PyObject* py_in_graph_context(PyObject*, PyObject* fn) {
  const CompileConfig* config = kiln::interpreter::graph_config();
  std::shared_ptr<CompileConfig> owned =
      config ? std::const_pointer_cast<CompileConfig>(config->weak_from_this().lock()) : nullptr;
  if (!owned) Py_RETURN_NONE;
  PyObject* call = make_context_call(fn, std::move(owned));
  if (call) reinterpret_cast<ContextCall*>(call)->replay_only = true;
  return call;
}

// Runs fn(*args, **kwargs) under a fresh config whose collector records
// what tracing produced. Returns (result, collector) or null on error.
PyObject* run_collecting(PyObject* args, bool want_dump, std::shared_ptr<TraceCollector>* out) {
  PyObject* fn;
  PyObject* call_args;
  PyObject* call_kwargs;
  int fullgraph = 0;
  int dynamic = 0;
  if (!PyArg_ParseTuple(args, "OO!O|pp", &fn, &PyTuple_Type, &call_args, &call_kwargs, &fullgraph,
                        &dynamic)) {
    return nullptr;
  }
  auto config = std::make_shared<CompileConfig>();
  config->id = kiln::interpreter::next_config_id();
  config->fullgraph = fullgraph;
  // One call traces once: only dynamic=True can make it symbolic.
  if (dynamic) config->dynamic = CompileConfig::Dynamic::Always;
  config->collector = std::make_shared<TraceCollector>();
  config->collector->want_dump = want_dump;
  PyObject* result;
  {
    kiln::interpreter::ContextDepthScope depth;
    kiln::interpreter::CompiledRegion region;
    ConfigScope scope(config.get());
    result = PyObject_Call(fn, call_args, call_kwargs == Py_None ? nullptr : call_kwargs);
  }
  *out = config->collector;
  return result;
}

PyObject* string_list(const std::vector<std::string>& items) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    PyList_SET_ITEM(list, i, PyUnicode_FromString(items[i].c_str()));
  }
  return list;
}

// _C.explain(fn, args, kwargs) -> (result, graphs, break_reasons)
PyObject* py_explain(PyObject*, PyObject* args) {
  std::shared_ptr<TraceCollector> collector;
  PyObject* result = run_collecting(args, false, &collector);
  if (!result) return nullptr;
  return Py_BuildValue("(NNN)", result, string_list(collector->graphs), string_list(collector->reasons));
}

// _C.trace_dump(fn, args, kwargs) -> (result, dump_text)
PyObject* py_trace_dump(PyObject*, PyObject* args) {
  std::shared_ptr<TraceCollector> collector;
  PyObject* result = run_collecting(args, true, &collector);
  if (!result) return nullptr;
  return Py_BuildValue("(Ns)", result, collector->dump.c_str());
}

PyObject* py_reset(PyObject*, PyObject*) {
  kiln::interpreter::clear_all_code_caches();
  kiln::interpreter::reset_stats();
  kiln::inductor::cpu::reset_gemm_counts();
  Py_RETURN_NONE;
}

PyObject* py_stats(PyObject*, PyObject*) {
  auto& stats = kiln::interpreter::stats();
  PyObject* dict = PyDict_New();
#define KILN_STAT_ITEM(name)                                  \
  {                                                           \
    PyObject* value = PyLong_FromLongLong(stats.name.load()); \
    PyDict_SetItemString(dict, #name, value);                 \
    Py_DECREF(value);                                         \
  }
  KILN_STATS(KILN_STAT_ITEM)
#undef KILN_STAT_ITEM
  // Counted where the GEMM nodes run (inductor/cpu/gemm.h), not at compile time.
  const kiln::inductor::cpu::GemmCounts gemm = kiln::inductor::cpu::gemm_counts();
  const std::pair<const char*, int64_t> gemm_items[] = {
      {"gemm_calls", gemm.kiln_calls}, {"gemm_aten_calls", gemm.aten_calls}, {"gemm_measured", gemm.measured}};
  for (const auto& [name, count] : gemm_items) {
    PyObject* value = PyLong_FromLongLong(count);
    PyDict_SetItemString(dict, name, value);
    Py_DECREF(value);
  }
  return dict;
}

PyObject* py_set_cache_size_limit(PyObject*, PyObject* arg) {
  long limit = PyLong_AsLong(arg);
  if (limit == -1 && PyErr_Occurred()) return nullptr;
  if (limit < 0) {
    PyErr_SetString(PyExc_ValueError, "cache_size_limit must be >= 0");
    return nullptr;
  }
  kiln::interpreter::set_cache_size_limit(static_cast<int>(limit));
  Py_RETURN_NONE;
}

PyObject* py_set_cpu_kernels(PyObject*, PyObject* arg) {
  const int enabled = PyObject_IsTrue(arg);
  if (enabled < 0) return nullptr;
  kiln::interpreter::set_cpu_kernels(enabled == 1);
  Py_RETURN_NONE;
}

PyObject* py_get_cpu_kernels(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::interpreter::cpu_kernels());
}

PyObject* py_set_cpu_matmul(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : nullptr;
  const auto policy = name ? kiln::inductor::matmul_policy_from_name(name) : std::nullopt;
  if (!policy) {
    PyErr_SetString(PyExc_ValueError, "cpu_matmul must be \"auto\", \"kiln\" or \"aten\"");
    return nullptr;
  }
  kiln::interpreter::set_cpu_matmul(*policy);
  Py_RETURN_NONE;
}

PyObject* py_get_cpu_matmul(PyObject*, PyObject*) {
  return PyUnicode_FromString(kiln::inductor::matmul_policy_name(kiln::interpreter::cpu_matmul()));
}

PyObject* py_set_conv_layout(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : nullptr;
  const auto layout = name ? kiln::prims::conv_layout_from_name(name) : std::nullopt;
  if (!layout) {
    PyErr_SetString(PyExc_ValueError, "conv_layout must be \"auto\", \"channels_last\" or \"keep\"");
    return nullptr;
  }
  kiln::interpreter::set_conv_layout(*layout);
  Py_RETURN_NONE;
}

PyObject* py_get_conv_layout(PyObject*, PyObject*) {
  return PyUnicode_FromString(kiln::prims::conv_layout_name(kiln::interpreter::conv_layout()));
}

PyObject* py_set_conv_bias(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : nullptr;
  const auto placement = name ? kiln::inductor::conv_bias_from_name(name) : std::nullopt;
  if (!placement) {
    PyErr_SetString(PyExc_ValueError, "conv_bias must be \"auto\", \"kernels\" or \"convolution\"");
    return nullptr;
  }
  kiln::interpreter::set_conv_bias(*placement);
  Py_RETURN_NONE;
}

PyObject* py_get_conv_bias(PyObject*, PyObject*) {
  return PyUnicode_FromString(kiln::inductor::conv_bias_name(kiln::interpreter::conv_bias()));
}

PyObject* py_clear_matmul_choices(PyObject*, PyObject*) {
  kiln::inductor::clear_matmul_choices();
  Py_RETURN_NONE;
}

PyObject* py_clear_kernel_memory_cache(PyObject*, PyObject*) {
  kiln::inductor::cpu::clear_kernel_memory_cache();
  Py_RETURN_NONE;
}

PyObject* py_set_cuda_kernels(PyObject*, PyObject* arg) {
  const int enabled = PyObject_IsTrue(arg);
  if (enabled < 0) return nullptr;
  kiln::interpreter::set_cuda_kernels(enabled == 1);
  Py_RETURN_NONE;
}

PyObject* py_get_cuda_kernels(PyObject*, PyObject*) { return PyBool_FromLong(kiln::interpreter::cuda_kernels()); }

PyObject* py_set_parameter_kernel_cache(PyObject*, PyObject* arg) {
  const int enabled = PyObject_IsTrue(arg);
  if (enabled < 0) return nullptr;
  kiln::interpreter::set_parameter_kernel_cache(enabled == 1);
  Py_RETURN_NONE;
}

PyObject* py_get_parameter_kernel_cache(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::interpreter::parameter_kernel_cache());
}

PyObject* py_set_constant_subgraphs(PyObject*, PyObject* arg) {
  const int enabled = PyObject_IsTrue(arg);
  if (enabled < 0) return nullptr;
  kiln::interpreter::set_constant_subgraphs(enabled == 1);
  Py_RETURN_NONE;
}

PyObject* py_get_constant_subgraphs(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::interpreter::constant_subgraphs());
}

PyObject* py_set_batch_input_casts(PyObject*, PyObject* arg) {
  const int enabled = PyObject_IsTrue(arg);
  if (enabled < 0) return nullptr;
  kiln::interpreter::set_batch_input_casts(enabled == 1);
  Py_RETURN_NONE;
}

PyObject* py_get_batch_input_casts(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::interpreter::batch_input_casts());
}

PyObject* py_set_static_regions(PyObject*, PyObject* arg) {
  const int enabled = PyObject_IsTrue(arg);
  if (enabled < 0) return nullptr;
  kiln::interpreter::set_static_regions(enabled == 1);
  Py_RETURN_NONE;
}

PyObject* py_get_static_regions(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::interpreter::static_regions());
}

PyObject* py_cuda_kernels_available(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::inductor::cuda_kernels_available());
}

PyObject* py_cpu_kernels_available(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::inductor::cpu_kernels_available());
}

PyObject* py_get_cache_size_limit(PyObject*, PyObject*) {
  return PyLong_FromLong(kiln::interpreter::cache_size_limit());
}

// _C.set_logs("graph,guards") -> the names it did not recognize
// _C.allow_in_graph(fn): calls of fn become graph nodes (Note [Callables
// allowed in the graph] in stdlib/torch_callables.cpp).
PyObject* py_allow_in_graph(PyObject*, PyObject* fn) {
  if (!PyCallable_Check(fn) || PyType_Check(fn)) {
    PyErr_Format(PyExc_TypeError, "kiln.allow_in_graph expects a function, got %s", Py_TYPE(fn)->tp_name);
    return nullptr;
  }
  kiln::stdlib::allow_in_graph(fn);
  Py_RETURN_NONE;
}

PyObject* py_set_logs(PyObject*, PyObject* arg) {
  const char* spec = PyUnicode_AsUTF8(arg);
  if (!spec) return nullptr;
  return PyUnicode_FromString(kiln::base::set_log_channels(spec).c_str());
}

// _C.log_channels() -> every channel's name, in order
PyObject* py_log_channels(PyObject*, PyObject*) {
  const int count = static_cast<int>(kiln::base::LogChannel::kCount);
  PyObject* names = PyTuple_New(count);
  if (!names) return nullptr;
  for (int i = 0; i < count; ++i) {
    PyObject* name = PyUnicode_FromString(kiln::base::log_channel_name(static_cast<kiln::base::LogChannel>(i)));
    if (!name) {
      Py_DECREF(names);
      return nullptr;
    }
    PyTuple_SET_ITEM(names, i, name);
  }
  return names;
}

// _C.force_cuda_launch_candidate(i): CUDA kernels compiled from now on run
// candidate i of their launch configurations (-1: their default); for
// benchmarks/inductor_cuda.py --sweep.
PyObject* py_force_cuda_launch_candidate(PyObject*, PyObject* arg) {
  const long index = PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  kiln::inductor::cuda::set_launch_candidate_override(static_cast<int>(index));
  Py_RETURN_NONE;
}

// _C.forced_cuda_launches() -> [(kernel, index, count, config text)] of the
// kernels compiled since force_cuda_launch_candidate was last called.
PyObject* py_forced_cuda_launches(PyObject*, PyObject*) {
  const std::vector<kiln::inductor::cuda::ForcedLaunch> forced = kiln::inductor::cuda::forced_launches();
  PyObject* list = PyList_New(0);
  if (!list) return nullptr;
  for (const auto& f : forced) {
    PyObject* item = Py_BuildValue("(snns)", f.kernel.c_str(), static_cast<Py_ssize_t>(f.index),
                                   static_cast<Py_ssize_t>(f.count),
                                   kiln::inductor::cuda::format_launch_config(f.config).c_str());
    if (!item || PyList_Append(list, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return list;
}

PyObject* py_set_error_types(PyObject*, PyObject* args) {
  PyObject *unsupported, *recompile;
  if (!PyArg_ParseTuple(args, "OO", &unsupported, &recompile)) return nullptr;
  kiln::interpreter::set_error_types(unsupported, recompile);
  Py_RETURN_NONE;
}

// The stances by name, in kiln::interpreter::Stance's order.
constexpr const char* kStanceNames[] = {"default", "force_eager", "eager_on_recompile", "fail_on_recompile"};

PyObject* py_set_stance(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : nullptr;
  for (int i = 0; name && i < 4; ++i) {
    if (std::string(name) == kStanceNames[i]) {
      kiln::interpreter::set_stance(static_cast<kiln::interpreter::Stance>(i));
      Py_RETURN_NONE;
    }
  }
  PyErr_Format(PyExc_ValueError, "unknown stance %R; valid stances: 'default', 'force_eager', "
               "'eager_on_recompile', 'fail_on_recompile'", arg);
  return nullptr;
}

PyObject* py_get_stance(PyObject*, PyObject*) {
  return PyUnicode_FromString(kStanceNames[static_cast<int>(kiln::interpreter::stance())]);
}

// _C.enable_report(sample_every): reporting on for configs made from now.
PyObject* py_enable_report(PyObject*, PyObject* arg) {
  long every = PyLong_AsLong(arg);
  if (every == -1 && PyErr_Occurred()) return nullptr;
  if (every < 0) {
    PyErr_SetString(PyExc_ValueError, "the eager sampling period must be >= 0");
    return nullptr;
  }
  kiln::interpreter::enable_report(static_cast<int>(every));
  Py_RETURN_NONE;
}

PyObject* int64_list(const std::vector<int64_t>& items) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) PyList_SET_ITEM(list, i, PyLong_FromLongLong(items[i]));
  return list;
}

// _C.report_data() -> [dict per reported config], for kiln.report.
PyObject* py_report_data(PyObject*, PyObject*) {
  const auto& reports = kiln::interpreter::all_reports();
  PyObject* list = PyList_New(0);
  for (const auto& report : reports) {
    PyObject* item = Py_BuildValue(
        "{s:s,s:L,s:L,s:L,s:N,s:N,s:N,s:N,s:N}", "name", report->name.c_str(), "calls", report->calls,
        "traces", report->traces, "compile_ns", report->compile_ns, "breaks",
        string_list(report->breaks), "recompiles", string_list(report->recompiles), "eager_frames",
        string_list(report->eager_frames), "eager_ns", int64_list(report->eager_ns), "compiled_ns",
        int64_list(report->compiled_ns));
    if (!item || PyList_Append(list, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return list;
}

// _C.in_context() -> True inside a kiln.compile'd or kiln.disable'd call.
PyObject* py_in_context(PyObject*, PyObject*) {
  return PyBool_FromLong(kiln::interpreter::context_depth() > 0);
}

PyMethodDef module_methods[] = {
    {"enable_report", py_enable_report, METH_O, "Turns on kiln --report's counters and eager sampling."},
    {"report_data", py_report_data, METH_NOARGS, "Returns the report counters of every compiled callable."},
    {"in_context", py_in_context, METH_NOARGS, "True inside a compiled or disabled call."},
    {"compiled", py_compiled, METH_VARARGS, "Wraps fn so its frames are traced under a new config."},
    {"disabled", py_disabled, METH_O, "Wraps fn so nothing it runs is traced."},
    {"in_graph_context", py_in_graph_context, METH_O,
     "Wraps fn to run in the compile context of the running graph; None outside graphs."},
    {"explain", py_explain, METH_VARARGS, "Runs fn, returning (result, graphs, break_reasons)."},
    {"trace_dump", py_trace_dump, METH_VARARGS, "Runs fn, returning (result, trace dump text)."},
    {"reset", py_reset, METH_NOARGS, "Drops all compiled code and zeroes the counters."},
    {"stats", py_stats, METH_NOARGS, "Returns the counters as a dict."},
    {"set_cache_size_limit", py_set_cache_size_limit, METH_O, "Sets entries allowed per code object."},
    {"get_cache_size_limit", py_get_cache_size_limit, METH_NOARGS, "Returns entries allowed per code object."},
    {"set_cpu_kernels", py_set_cpu_kernels, METH_O, "Turns LLVM kernels for inductor on or off."},
    {"cpu_kernels_available", py_cpu_kernels_available, METH_NOARGS, "Whether this build can compile CPU kernels."},
    {"get_cpu_kernels", py_get_cpu_kernels, METH_NOARGS, "Whether inductor compiles LLVM kernels."},
    {"set_cpu_matmul", py_set_cpu_matmul, METH_O, "Sets who computes CPU matmuls: auto, kiln or aten."},
    {"get_cpu_matmul", py_get_cpu_matmul, METH_NOARGS, "Who computes CPU matmuls: auto, kiln or aten."},
    {"set_conv_layout", py_set_conv_layout, METH_O, "Sets where convolutions run channels-last: auto, channels_last or keep."},
    {"get_conv_layout", py_get_conv_layout, METH_NOARGS, "Where convolutions run channels-last: auto, channels_last or keep."},
    {"set_conv_bias", py_set_conv_bias, METH_O, "Sets which graphs add convolution biases in kernels: auto, kernels or convolution."},
    {"get_conv_bias", py_get_conv_bias, METH_NOARGS, "Which graphs add convolution biases in kernels: auto, kernels or convolution."},
    {"clear_matmul_choices", py_clear_matmul_choices, METH_NOARGS, "Forgets the auto policy's GEMM timings."},
    {"clear_kernel_memory_cache", py_clear_kernel_memory_cache, METH_NOARGS,
     "Forgets the CPU kernel cache's memory entries: the next compile of each goes to the disk (tests)."},
    {"set_cuda_kernels", py_set_cuda_kernels, METH_O, "Turns NVRTC kernels for inductor on or off."},
    {"get_cuda_kernels", py_get_cuda_kernels, METH_NOARGS, "Whether inductor compiles CUDA kernels."},
    {"set_parameter_kernel_cache", py_set_parameter_kernel_cache, METH_O,
     "Turns keeping parameter-only kernel results between inference calls on or off."},
    {"get_parameter_kernel_cache", py_get_parameter_kernel_cache, METH_NOARGS,
     "Whether inference graphs keep parameter-only kernel results between calls."},
    {"set_constant_subgraphs", py_set_constant_subgraphs, METH_O,
     "Turns running input-independent nodes once per compiled graph on or off."},
    {"get_constant_subgraphs", py_get_constant_subgraphs, METH_NOARGS,
     "Whether compiled graphs run their input-independent nodes once."},
    {"set_batch_input_casts", py_set_batch_input_casts, METH_O,
     "Turns casting a CUDA graph's input tensors in one foreach copy on or off."},
    {"get_batch_input_casts", py_get_batch_input_casts, METH_NOARGS,
     "Whether CUDA graphs cast their input tensors in one foreach copy."},
    {"set_static_regions", py_set_static_regions, METH_O,
     "Turns compiling the static regions of graphs with symbolic sizes once on or off."},
    {"get_static_regions", py_get_static_regions, METH_NOARGS,
     "Whether graphs with symbolic sizes mostly static compile their static regions once."},
    {"cuda_kernels_available", py_cuda_kernels_available, METH_NOARGS, "Whether NVRTC and the CUDA driver can be loaded."},
    {"set_logs", py_set_logs, METH_O, "Enables log channels; returns unknown names."},
    {"allow_in_graph", py_allow_in_graph, METH_O, "Makes calls of a function graph nodes."},
    {"log_channels", py_log_channels, METH_NOARGS, "The names of every log channel."},
    {"force_cuda_launch_candidate", py_force_cuda_launch_candidate, METH_O,
     "Makes CUDA kernels compiled from now on run launch candidate i (-1: the default)."},
    {"forced_cuda_launches", py_forced_cuda_launches, METH_NOARGS,
     "The (kernel, index, count, config) of kernels compiled under force_cuda_launch_candidate."},
    {"set_error_types", py_set_error_types, METH_VARARGS, "Registers kiln.Unsupported and kiln.RecompileError."},
    {"set_stance", py_set_stance, METH_O, "Sets how compiled functions behave (kiln.set_stance)."},
    {"get_stance", py_get_stance, METH_NOARGS, "The stance set now."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kiln._C", "kiln's native runtime.", -1, module_methods,
    nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__C() {
  ContextCallType.tp_name = "kiln._C.ContextCall";
  ContextCallType.tp_basicsize = sizeof(ContextCall);
  ContextCallType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  ContextCallType.tp_dealloc = context_call_dealloc;
  ContextCallType.tp_traverse = context_call_traverse;
  ContextCallType.tp_clear = context_call_clear;
  ContextCallType.tp_call = PyVectorcall_Call;
  ContextCallType.tp_vectorcall_offset = offsetof(ContextCall, vectorcall);
  ContextCallType.tp_descr_get = context_call_descr_get;
  ContextCallType.tp_repr = context_call_repr;
  ContextCallType.tp_members = context_call_members;
  ContextCallType.tp_dictoffset = offsetof(ContextCall, dict);
  ContextCallType.tp_getattro = PyObject_GenericGetAttr;
  ContextCallType.tp_setattro = PyObject_GenericSetAttr;
  if (PyType_Ready(&ContextCallType) < 0) return nullptr;
  PyObject* module = PyModule_Create(&module_def);
  if (!module) return nullptr;
  Py_INCREF(&ContextCallType);
  PyModule_AddObject(module, "ContextCall", reinterpret_cast<PyObject*>(&ContextCallType));
  return module;
}
