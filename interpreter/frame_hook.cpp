#include "interpreter/frame_hook.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graph/graph_printer.h"
#include "interpreter/compile_pipeline.h"
#include "cpython/bytecode_decoder.h"
#include "interpreter/call_report.h"
#include "interpreter/code_cache.h"
#include "interpreter/dynamic_profile.h"
#include "interpreter/compile_config.h"
#include "cpython/cpython_frame.h"
#include "base/python_warning.h"
#include "base/log.h"
#include "base/py_text.h"
#include "runtime/aten_bridge.h"
#include "runtime/replace_contents.h"
#include "base/stopwatch.h"
#include "base/small_buffer.h"
#include "tracer/break_codegen.h"
#include "tracer/disabled_code.h"
#include "tracer/dynamic_marks.h"
#include "tracer/tracer.h"

namespace kiln::interpreter {

using cpython::format_bytecode;
namespace {

PyObject* g_unsupported_error = nullptr;
PyObject* g_recompile_error = nullptr;

std::string code_name(PyCodeObject* code) {
  const char* name = PyUnicode_AsUTF8(code->co_qualname);
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  return std::string(name ? name : "?") + " (" + (file ? file : "?") + ":" +
         std::to_string(code->co_firstlineno) + ")";
}

// Directories whose code kiln never traces as frames of their own: torch's
// and kiln's packages and the standard library, which compiled code reaches
// only through calls kiln models; and the site-packages directories, whose
// libraries (transformers, torchvision...) are model code and traced. The
// standard library's directory can hold site-packages (a venv's or pyenv's
// lib/python3.X/site-packages), so the longest matching prefix decides.
// Found once, from the modules themselves: matching path fragments instead
// would skip a user's ".../kiln/" checkout.
struct CodeDirectory {
  std::string path;  // ends with '/'
  bool skipped;
};

const std::vector<CodeDirectory>& code_directories() {
  static const std::vector<CodeDirectory> directories = [] {
    std::vector<CodeDirectory> out;
    // Imports below run Python frames; they must not come back here.
    ConfigScope untraced(nullptr);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    auto add_path = [&out](PyObject* path, bool skipped) {
      if (path && PyUnicode_Check(path)) out.push_back({std::string(PyUnicode_AsUTF8(path)) + "/", skipped});
    };
    auto add_package_of = [&out](const char* module_name) {
      PyObject* module = PyImport_ImportModule(module_name);
      PyObject* file = module ? PyObject_GetAttrString(module, "__file__") : nullptr;
      if (file && PyUnicode_Check(file)) {
        std::string path = PyUnicode_AsUTF8(file);
        out.push_back({path.substr(0, path.rfind('/') + 1), true});
      }
      Py_XDECREF(file);
      Py_XDECREF(module);
      PyErr_Clear();
    };
    add_package_of("kiln");
    add_package_of("torch");
    PyObject* sysconfig = PyImport_ImportModule("sysconfig");
    PyObject* paths = sysconfig ? PyObject_CallMethod(sysconfig, "get_paths", nullptr) : nullptr;
    for (const char* key : {"stdlib", "platstdlib"}) add_path(paths ? PyDict_GetItemString(paths, key) : nullptr, true);
    for (const char* key : {"purelib", "platlib"}) add_path(paths ? PyDict_GetItemString(paths, key) : nullptr, false);
    Py_XDECREF(paths);
    Py_XDECREF(sysconfig);
    PyObject* site = PyImport_ImportModule("site");
    PyObject* site_dirs = site ? PyObject_CallMethod(site, "getsitepackages", nullptr) : nullptr;
    if (site_dirs && PyList_Check(site_dirs)) {
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(site_dirs); ++i) add_path(PyList_GET_ITEM(site_dirs, i), false);
    }
    Py_XDECREF(site_dirs);
    Py_XDECREF(site);
    PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    return out;
  }();
  return directories;
}

bool starts_with(const char* text, const std::string& prefix) {
  return std::strncmp(text, prefix.c_str(), prefix.size()) == 0;
}

// True for code kiln never traces as a frame of its own (see
// code_directories). The methods of torch.nn's modules are the
// exception: they are model code like any user module (module.py, holding
// Module.__call__'s machinery, is not; nor are the autograd Functions
// those files define, whose forward(ctx, ...) autograd's apply runs:
// BackwardHookFunction.forward returns its inputs for apply to give them
// its grad_fn, and compiled it raised "Error while setting up backward
// hooks" for any module with a full backward hook called in a compiled
// model).
bool is_skipped_file(PyCodeObject* code) {
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) {
    PyErr_Clear();
    return true;
  }
  if (std::strncmp(file, "<frozen", 7) == 0) return true;
  const CodeDirectory* closest = nullptr;
  for (const CodeDirectory& directory : code_directories()) {
    if (starts_with(file, directory.path) && (!closest || directory.path.size() > closest->path.size())) {
      closest = &directory;
    }
  }
  if (!closest || !closest->skipped) return false;
  const std::string& directory = closest->path;
  const char* rest = file + directory.size();
  const bool torch_module_forward = std::strncmp(rest, "nn/modules/", 11) == 0 &&
                                    std::strcmp(rest, "nn/modules/module.py") != 0;
  if (!(torch_module_forward && directory.size() >= 7 &&
        directory.compare(directory.size() - 7, 7, "/torch/") == 0)) {
    return true;
  }
  if (code->co_argcount < 1) return true;
  PyObject* first = PyTuple_GET_ITEM(code->co_localsplusnames, 0);
  return PyUnicode_CompareWithASCIIString(first, "self") != 0;
}

guards::FrameView frame_view(KilnFrame* frame) {
  PyObject* func = kiln_frame_function(frame);
  return {.localsplus = kiln_frame_localsplus(frame),
          .globals = kiln_frame_globals(frame),
          .builtins = kiln_frame_builtins(frame),
          .closure = func ? PyFunction_GET_CLOSURE(func) : nullptr};
}

// Runs a cached graph on the values its guards fetched.
PyObject* run_entry(const CacheEntry& entry, const guards::SourceValues& values) {
  const graph::Graph& graph = *entry.compiled->graph;
  const auto& inputs = graph.inputs();
  base::SmallBuffer<32> buffer(inputs.size());
  PyObject** args = buffer.data();
  for (size_t i = 0; i < inputs.size(); ++i) {
    args[i] = values.get(graph.node(inputs[i]).input_source);
  }
  // Torch's own Python code inside the graph must not be traced.
  GraphRunScope untraced;
  PyObject* out = nullptr;
  try {
    out = entry.compiled->executor->run(args);
  } catch (const std::exception& e) {
    // Executors turn the errors they expect into Python exceptions; any
    // other (a c10::Error from a tensor kiln did not expect) becomes one
    // here, at the last C++ frame before CPython's: never an abort.
    PyErr_Format(PyExc_RuntimeError, "kiln: internal error running a compiled graph: %s", e.what());
    return nullptr;
  }
  if (!out || entry.effects.empty()) return out;
  // Replay the frame's stores in order (Note [Side effects]).
  for (size_t k = 0; k < entry.effects.size(); ++k) {
    const tracer::SideEffect& effect = entry.effects[k];
    PyObject* value = PyTuple_GET_ITEM(out, static_cast<Py_ssize_t>(k + 1));
    int failed = 0;
    switch (effect.kind) {
      case tracer::SideEffect::Kind::Attr:
        failed = PyObject_SetAttr(values.get(effect.target_source), effect.name.get(), value);
        break;
      case tracer::SideEffect::Kind::Global:
        failed = PyDict_SetItem(effect.globals.get(), effect.name.get(), value);
        break;
      case tracer::SideEffect::Kind::ListContents:
      case tracer::SideEffect::Kind::DictContents:
        failed = runtime::replace_contents(values.get(effect.target_source), value);
        break;
      case tracer::SideEffect::Kind::Call: {
        PyObject* done = PyObject_Call(effect.callee.get(), value, nullptr);
        failed = done ? 0 : -1;
        Py_XDECREF(done);
        break;
      }
    }
    if (failed < 0) {
      Py_DECREF(out);
      return nullptr;
    }
  }
  PyObject* result = PyTuple_GET_ITEM(out, 0);
  Py_INCREF(result);
  Py_DECREF(out);
  return result;
}

// Runs a graph-break entry: its transformed code, as a function over the
// frame's argument slots, under the current config so that the resume
// functions it calls are traced in turn.
PyObject* run_transformed(const CacheEntry& entry, KilnFrame* frame) {
  PyCodeObject* code = kiln_frame_code(frame);
  PyObject* func = kiln_frame_function(frame);
  PyObject* fn = PyFunction_New(entry.transformed_code.get(), kiln_frame_globals(frame));
  if (!fn) return nullptr;
  if (func && PyFunction_GET_CLOSURE(func) &&
      PyFunction_SetClosure(fn, PyFunction_GET_CLOSURE(func)) < 0) {
    Py_DECREF(fn);
    return nullptr;
  }
  const int nargs = code->co_argcount + code->co_kwonlyargcount +
                    ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                    ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  PyObject* result = PyObject_Vectorcall(fn, kiln_frame_localsplus(frame), nargs, nullptr);
  Py_DECREF(fn);
  return result;
}

// Generates the transformed code of a graph-break entry. On failure the
// reason is turned into the entry's failure reason and false is returned.
// Resume functions of a dynamic trace start with its dynamic locals marked,
// rather than learning them again from a recompile (Note [Dynamic shapes]).
void seed_resume_dynamic_dims(PyCodeObject* transformed, const tracer::BreakInfo& info,
                              uint64_t config_id) {
  if (info.dynamic_locals.empty()) return;
  PyObject* consts = transformed->co_consts;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i) {
    PyObject* item = PyTuple_GET_ITEM(consts, i);
    if (!PyCode_Check(item)) continue;
    CodeCache* cache = code_cache(reinterpret_cast<PyCodeObject*>(item), true);
    if (!cache) {
      PyErr_Clear();
      continue;
    }
    CodeCache::DynamicState& state = cache->dynamic_state(config_id);
    for (const auto& [name, dim] : info.dynamic_locals) state.dims.add("L['" + name + "']", dim);
  }
}

bool build_transformed_code(CacheEntry& entry, PyCodeObject* code, const tracer::BreakInfo& info,
                            std::string& reason) {
  base::PyRef callable = base::PyRef::steal(make_graph_callable(entry.compiled));
  std::string error;
  PyObject* transformed =
      callable ? tracer::build_break_code(code, info, entry.guards->sources(), *entry.compiled->graph,
                                          callable.get(), &error)
               : nullptr;
  if (!transformed) {
    if (error.empty()) {
      PyErr_Clear();
      error = "cannot wrap the graph";
    }
    reason += " (and the graph break could not be compiled: " + error + ")";
    return false;
  }
  entry.transformed_code = base::PyRef::steal(transformed);
  seed_resume_dynamic_dims(reinterpret_cast<PyCodeObject*>(transformed), info, entry.config_id);
  // The transformed code is kiln's own: CPython runs it as it is.
  if (CodeCache* cache = code_cache(reinterpret_cast<PyCodeObject*>(transformed), true)) {
    cache->skip = true;
  }
  return true;
}

// Automatic dynamic shapes (Note [Dynamic shapes] in tracer/): the input
// dims whose size alone failed the last entry's guards become dynamic for
// the next trace.
void mark_dynamic_dims(CodeCache* cache, PyCodeObject* code, const CacheEntry& last,
                       const guards::FrameView& view, const CompileConfig& config) {
  if (!last.guards) return;
  CodeCache::DynamicState& dynamic = cache->dynamic_state(config.id);
  const auto changes = last.guards->size_changes(view);
  if (changes.empty()) return;
  const bool automatic = config.dynamic == CompileConfig::Dynamic::Automatic;
  // The dims an earlier run learned for this code, all at once (Note
  // [Dynamic profiles]).
  const size_t before_profile = dynamic.dims.dims.size();
  bool grew = automatic && seed_from_profile(code, &dynamic.dims) > 0;
  if (grew) {
    dynamic.unseen_profile_dims.assign(dynamic.dims.dims.begin() + static_cast<std::ptrdiff_t>(before_profile),
                                       dynamic.dims.dims.end());
  }
  bool learned = false;
  for (const auto& change : changes) {
    std::erase(dynamic.unseen_profile_dims, std::make_pair(change.source, change.dim));
    if (dynamic.dims.add(change.source, change.dim)) {
      grew = learned = true;
      if (change.dim < 0) {
        KILN_LOG(dynamic, code_name(code) << ": int " << change.source << " changed value (" << change.traced
                                          << " -> " << change.now << "); tracing it as dynamic");
      } else {
        KILN_LOG(dynamic, code_name(code) << ": " << change.source << " dim " << change.dim
                                          << " changed size; tracing it as dynamic");
      }
    }
  }
  if (automatic && learned) save_profile(code, dynamic.dims);
  // The next trace only: tensors new to the code that carry a changed size
  // (Note [Sizes that change together] in tracer/).
  if (automatic && learned) {
    for (const auto& change : changes) {
      for (int64_t size : {change.traced, change.now}) {
        if (size >= 2) dynamic.dims.changed_sizes.push_back(size);
      }
    }
    dynamic.dims.known_sources = last.guards->tensor_sources();
    std::sort(dynamic.dims.known_sources.begin(), dynamic.dims.known_sources.end());
  }
  // A fallback (static sizes, dim 0s only) was learned with fewer dynamic
  // dims: with more, the comparison that failed may hold (a mask one longer
  // than a cache that was static then, Note [Shifted sample points]). The
  // retry is bounded by the dims a code has.
  if (grew && (dynamic.static_only || dynamic.dims.leading_only)) {
    dynamic.static_only = false;
    dynamic.dims.leading_only = false;
    KILN_LOG(dynamic, code_name(code) << ": more dims changed size; trying all of them as dynamic again");
  }
}

// The dims a trace made dynamic as changing together with a changed one
// (Note [Sizes that change together]) are learned like changed dims;
// `asked` lists the others the trace was given (learned and marked).
void learn_dims_that_changed_together(PyCodeObject* code, const guards::GuardSet& guards,
                                      const tracer::DynamicDims& asked, CodeCache::DynamicState* dynamic) {
  bool learned = false;
  for (const auto& [source, dim] : guards.dynamic_dims()) {
    if (asked.contains(source, dim)) continue;
    if (dynamic->dims.add(source, dim)) {
      learned = true;
      KILN_LOG(dynamic, code_name(code) << ": " << source << " dim " << dim
                                        << " is new and has a size that changed; traced it as dynamic");
    }
  }
  if (learned) save_profile(code, dynamic->dims);
}

// Raises kiln.Unsupported for a recorded failure.
void raise_unsupported(const CacheEntry& entry) {
  PyObject* type = g_unsupported_error ? g_unsupported_error : PyExc_RuntimeError;
  std::string message = entry.reason + "\n  hint: " + entry.hint;
  PyErr_SetString(type, message.c_str());
}

// What kiln.explain and the trace dump (kiln.trace_dump, golden trace
// files) record of one trace: its graph or why it failed, and with a dump,
// the frame's bytecode, graph, guards, side effects and break.
void collect_trace(TraceCollector& collector, PyCodeObject* code, const CacheEntry& entry,
                   const tracer::TraceResult& result, const std::string& graph_text) {
  if (!result.ok) {
    collector.reasons.push_back(result.reason + " (" + result.hint + ")");
  } else {
    collector.graphs.push_back(graph_text);
    if (result.partial) collector.reasons.push_back(result.reason + " (" + result.hint + ")");
  }
  if (!collector.want_dump) return;
  collector.dump += "=== frame " + std::string(PyUnicode_AsUTF8(code->co_qualname)) + " ===\n";
  collector.dump += "--- bytecode ---\n" + format_bytecode(code);
  if (!result.ok) {
    collector.dump += "--- breaks ---\n" + result.reason + "\n";
    return;
  }
  collector.dump += "--- graph ---\n" + graph_text;
  collector.dump += "--- guards ---\n" + entry.guards->format();
  if (!entry.effects.empty()) {
    collector.dump += "--- side effects ---\n";
    for (size_t k = 0; k < entry.effects.size(); ++k) {
      const tracer::SideEffect& effect = entry.effects[k];
      std::string target;
      switch (effect.kind) {
        case tracer::SideEffect::Kind::Attr:
          target = entry.guards->sources().at(effect.target_source).text + "." + PyUnicode_AsUTF8(effect.name.get());
          break;
        case tracer::SideEffect::Kind::Global:
          target = "G['" + std::string(PyUnicode_AsUTF8(effect.name.get())) + "']";
          break;
        case tracer::SideEffect::Kind::ListContents:
        case tracer::SideEffect::Kind::DictContents:
          target = entry.guards->sources().at(effect.target_source).text + " contents";
          break;
        case tracer::SideEffect::Kind::Call:
          target = "call " + base::py_repr(effect.callee.get()) + " with";
          break;
      }
      collector.dump += target + (effect.kind == tracer::SideEffect::Kind::Call ? " " : " = ") + "output " +
                        std::to_string(k + 1) + "\n";
    }
  }
  collector.dump += "--- breaks ---\n";
  if (result.partial) {
    collector.dump += result.reason + "\n  resumes after instruction " + std::to_string(result.partial->instruction) +
                      "\n";
  }
}

std::shared_ptr<CacheEntry> trace_into_cache(CodeCache* cache, PyCodeObject* code, KilnFrame* frame,
                             const CompileConfig& config) {
  tracer::TraceResult result;
  CodeCache::DynamicState& dynamic = cache->dynamic_state(config.id);
  tracer::DynamicDims dims;
  if (!dynamic.static_only && config.dynamic != CompileConfig::Dynamic::Never) {
    dims = dynamic.dims;
    dims.all_arguments = config.dynamic == CompileConfig::Dynamic::Always;
  }
  dynamic.dims.changed_sizes.clear();  // they speak of this trace only
  dynamic.dims.known_sources.clear();
  // Dims the user marked (torch._dynamo.mark_dynamic) are dynamic whatever
  // the config says: the mark is the more specific request.
  const std::string marked = tracer::add_marked_dims(code, frame_view(frame), &dims);
  {
    ConfigScope untraced(nullptr);
    const base::Stopwatch clock;
    try {
      result = tracer::trace_frame(code, kiln_frame_function(frame), frame_view(frame), dims);
    } catch (const std::exception& e) {
      // A kiln bug (base::InternalError, an out-of-range index): the frame
      // runs as plain Python, said out loud, and the host process lives.
      PyErr_Clear();
      result = tracer::TraceResult();
      result.reason = code_name(code) + ": kiln internal error while tracing: " + e.what();
      result.hint = "this is a bug in kiln; please report it with KILN_LOGS=bytecode,graph output";
      const std::string warning = "kiln: " + result.reason + " (the frame runs eagerly)";
      base::warn(PyExc_RuntimeWarning, warning);
    }
    KILN_LOG(perf, "trace of " << code_name(code) << ": " << clock.ms() << " ms");
  }
  if (!marked.empty() && !result.specialized.empty()) {
    // A mark asked for a dynamic dim the code needs static: say so, as
    // torch.compile does (it raises), but keep the working static trace.
    const std::string warning = "kiln: " + code_name(code) + ": dims marked dynamic (" + marked +
                                ") were traced with static sizes: " + result.specialized;
    base::warn(PyExc_UserWarning, warning);
  }
  if (tracer::DynamicDims& dims = cache->dynamic_state(config.id).dims; result.shifted_points && !dims.shifted_points) {
    dims.shifted_points = true;
    KILN_LOG(dynamic, code_name(code) << ": dynamic sizes traced at shifted sample points; kept for later traces");
  }
  if (result.ints_static) {
    // Note [Dynamic ints]: the tensor dims held without the ints.
    tracer::DynamicDims& state_dims = cache->dynamic_state(config.id).dims;
    state_dims = state_dims.without_ints();
    KILN_LOG(dynamic, code_name(code) << ": dynamic ints could not stay symbolic; traced them as constants from now on");
    if (config.dynamic == CompileConfig::Dynamic::Automatic) save_profile(code, state_dims);
  }
  if (!result.specialized.empty() && !cache->dynamic_state(config.id).unseen_profile_dims.empty()) {
    // The dims an earlier run's profile added and this process never saw
    // change may be what the trace could not keep (a profile from another
    // use of the code, or older library code): they are dropped, not the
    // dims that did change, which the next size change traces dynamic.
    CodeCache::DynamicState& state = cache->dynamic_state(config.id);
    for (const auto& dim : state.unseen_profile_dims) std::erase(state.dims.dims, dim);
    state.unseen_profile_dims.clear();
    KILN_LOG(dynamic, code_name(code) << ": the trace fell back (" << result.specialized
                                      << "); dropping the profile's dims this run has not seen change");
    if (config.dynamic == CompileConfig::Dynamic::Automatic) save_profile(code, state.dims);
  } else if (result.ok && result.specialized.empty()) {
    // The profile's dims held in a dynamic trace: kept from now on, like
    // dims seen changing (they cannot fail a guard by changing size).
    cache->dynamic_state(config.id).unseen_profile_dims.clear();
  } else if (!result.specialized.empty()) {
    // Later traces of this code keep what worked rather than fail the same way.
    CodeCache::DynamicState& state = cache->dynamic_state(config.id);
    if (result.leading_only) {
      state.dims.leading_only = true;
      KILN_LOG(dynamic, code_name(code) << ": only dim 0s traced as dynamic: " << result.specialized);
    } else {
      state.static_only = true;
      KILN_LOG(dynamic, code_name(code) << ": traced with static sizes: " << result.specialized);
    }
  }
  if (result.ok && !dims.changed_sizes.empty()) {
    learn_dims_that_changed_together(code, *result.guards, dims, &dynamic);
  }
  auto entry = std::make_shared<CacheEntry>();
  entry->config_id = config.id;
  if (result.ok) {
    entry->guards = std::move(result.guards);
    entry->effects = std::move(result.effects);
    entry->compiled = std::make_shared<CompiledGraph>();
    entry->compiled->graph = std::move(result.graph);
    {
      ConfigScope untraced(nullptr);  // decomposing may call into Python
      entry->compiled->executor = compile_graph(*entry->compiled->graph, config, code_name(code));
    }
    if (result.partial && config.fullgraph) {
      result.ok = false;  // fullgraph=True: a graph break is an error
    } else if (result.partial &&
               !build_transformed_code(*entry, code, *result.partial, result.reason)) {
      result.ok = false;
    }
  }
  if (result.ok) {
    stats().traces++;
    const std::string graph_text = graph::format_graph(*entry->compiled->graph);
    KILN_LOG(graph, "graph for " << code_name(code) << "\n" << graph_text);
    KILN_LOG(guards, "guards for " << code_name(code) << "\n" << entry->guards->format());
    if (config.report) config.report->traces++;
    if (result.partial) {
      if (config.report) {
        config.report->breaks.push_back(code_name(code) + ": " + result.reason);
      }
      stats().graph_breaks++;
      KILN_LOG(breaks, "graph break in " << code_name(code) << ": " << result.reason
                                         << "\n  hint: " << result.hint);
    }
    if (config.collector) collect_trace(*config.collector, code, *entry, result, graph_text);
  } else {
    entry->failed = true;
    entry->reason = result.reason;
    entry->hint = result.hint;
    stats().unsupported++;
    if (config.report) config.report->eager_frames.push_back(code_name(code) + ": " + result.reason);
    KILN_LOG(breaks, "cannot trace " << code_name(code) << ": " << result.reason
                                     << "\n  hint: " << result.hint);
    if (config.collector) collect_trace(*config.collector, code, *entry, result, "");
  }
  cache->entries.push_back(entry);
  return entry;
}

// Note [Imports run untraced]
// A compiled call can import a module for the first time (a library's lazy
// import inside a function; torch importing torch._dynamo, and with it
// sympy, on a checkpoint's first call). The module bodies are never traced
// (not functions), but every function they run was: dataclass-made
// methods, typing helpers, import hooks, thousands of frames whose traces
// failed or broke, seconds of a first call, none of it model code. Import
// machinery's frames therefore run with no compile context, and so does
// everything below them; the module's functions called later from model
// code are traced as usual.
bool is_import_machinery(PyCodeObject* code) {
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) {
    PyErr_Clear();
    return false;
  }
  return std::strncmp(file, "<frozen importlib._bootstrap", 28) == 0;
}

PyObject* eval_frame(PyThreadState* tstate, KilnFrame* frame, int throwflag) {
  const CompileConfig* config = current_config();
  // Note [Untraced callbacks]
  // Audit hooks (filelock installs one on 3.12, and every audited event of
  // a compiled call, an eager call at a break included, ran it through
  // here: traced, guarded on its event string) and sys.settrace or
  // setprofile callbacks run with CPython's tracing flag up: never model
  // code, they run untraced.
  if (!config || throwflag || !kiln_frame_is_fresh_call(frame) || stance() == Stance::ForceEager ||
      kiln_thread_is_tracing(tstate)) {
    return kiln_eval_frame_default(tstate, frame, throwflag);
  }
  PyCodeObject* code = kiln_frame_code(frame);
  CodeCache* cache = code_cache(code, false);
  if (!cache) {
    if (replay_only()) return kiln_eval_frame_default(tstate, frame, throwflag);
    cache = code_cache(code, true);
    if (!cache) return kiln_eval_frame_default(tstate, frame, throwflag);
    cache->skip = is_skipped_file(code);
    cache->untraced_below = is_import_machinery(code);
  }
  // torch.compiler.disable holds for everything the marked function runs:
  // its frame, and those it calls, run with no compile context.
  if (cache->untraced_below || tracer::is_disabled_code(code)) {
    ConfigScope disabled(nullptr);
    return kiln_eval_frame_default(tstate, frame, throwflag);
  }
  if (cache->skip || !kiln_frame_can_skip(tstate, frame)) {
    return kiln_eval_frame_default(tstate, frame, throwflag);
  }
  // Note [Frames under torch.func transforms]
  // Inside vmap, grad or jvp the tensors a frame sees are the transform's
  // wrappers (a BatchedTensor has its per-sample sizes and no storage):
  // kiln's guards cannot tell them from plain tensors and its kernels
  // cannot read them (a CPU kernel handed one aborted the process). Such
  // frames run as plain Python under the transform, said once per code on
  // the breaks log; the frame that calls the transform compiles as usual,
  // the call itself a break.
  if (runtime::functorch_transform_active()) {
    if (!cache->transform_logged) {
      cache->transform_logged = true;
      KILN_LOG(breaks, code_name(code) << " runs eagerly: called under a torch.func transform (vmap, grad, jvp)");
    }
    stats().eager_runs++;
    return kiln_eval_frame_default(tstate, frame, throwflag);
  }
  const guards::FrameView view = frame_view(frame);
  guards::SourceValues values;
  // Note [Re-entrant reset]: guard checks and graph runs can run user code
  // (finalizers of released values) that calls kiln.reset() and empties
  // cache->entries under us. Hence index-based iteration and shared_ptr
  // copies of the entries in use.
  std::shared_ptr<CacheEntry> hit;
  std::shared_ptr<CacheEntry> last;
  int entries_for_config = 0;
  // Guards may run Python code (a class's own __getattribute__, Note
  // [Custom getattr]); its frames are not traced, or a guard of theirs
  // would run it again without end.
  auto guards_hold = [&](const CacheEntry& entry) {
    ConfigScope untraced(nullptr);
    return entry.guards->check(view, values);
  };
  auto explain_miss = [&](const CacheEntry& entry) {
    ConfigScope untraced(nullptr);
    return entry.guards->check_verbose(view);
  };
  // Every entry's failed guard, newest first: the newest entry's failure
  // alone hides why older ones (often the specialized ones) missed.
  auto explain_misses = [&]() {
    std::string out;
    int shown = 0;
    for (size_t i = cache->entries.size(); i-- > 0;) {
      const std::shared_ptr<CacheEntry> entry = cache->entries[i];
      if (entry->config_id != config->id || entry->failed) continue;
      if (shown++) out += "\n    ";
      out += "entry " + std::to_string(i) + ": " + explain_miss(*entry);
    }
    return out;
  };
  for (size_t i = 0; i < cache->entries.size(); ++i) {
    std::shared_ptr<CacheEntry> entry = cache->entries[i];
    if (entry->config_id != config->id) continue;
    ++entries_for_config;
    if (entry->failed) {
      hit = std::move(entry);
      break;
    }
    if (guards_hold(*entry)) {
      hit = std::move(entry);
      break;
    }
    last = std::move(entry);
  }
  if (!hit && replay_only()) {
    // Replaying a graph's context (Note [Recomputed forwards]): code the
    // forward did not compile here runs as it is, untraced.
    return kiln_eval_frame_default(tstate, frame, throwflag);
  }
  if (hit && !hit->failed) {
    stats().cache_hits++;
  } else if (!hit) {
    stats().cache_misses++;
    prune_dead_entries(cache);
    if (entries_for_config >= cache_size_limit()) {
      stats().cache_limit_hits++;
      stats().eager_runs++;
      if (!cache->limit_logged) {
        cache->limit_logged = true;
        KILN_LOG(recompiles, "cache limit (" << cache_size_limit() << ") reached for "
                                             << code_name(code) << "; running it eagerly from now on."
                                             << " Last guard failure: "
                                             << (last ? explain_miss(*last) : ""));
      }
      return kiln_eval_frame_default(tstate, frame, throwflag);
    }
    if (last && stance() == Stance::EagerOnRecompile) {
      stats().eager_runs++;
      KILN_LOG(recompiles, "running " << code_name(code) << " eagerly (stance eager_on_recompile): "
                                      << explain_miss(*last));
      return kiln_eval_frame_default(tstate, frame, throwflag);
    }
    if (last && stance() == Stance::FailOnRecompile) {
      const std::string message = code_name(code) + " would recompile under stance 'fail_on_recompile': " +
                                  explain_miss(*last);
      PyErr_SetString(g_recompile_error ? g_recompile_error : PyExc_RuntimeError, message.c_str());
      kiln_frame_finish_skipped(tstate, frame);
      return nullptr;
    }
    if (last) {
      stats().recompiles++;
      if (config->report) {
        config->report->recompiles.push_back(code_name(code) + ": " + explain_miss(*last));
      }
      KILN_LOG(recompiles, "recompiling " << code_name(code) << ":\n    " << explain_misses());
      if (config->dynamic == CompileConfig::Dynamic::Automatic) {
        ConfigScope untraced(nullptr);  // it re-reads the guards' sources
        mark_dynamic_dims(cache, code, *last, view, *config);
      }
    }
    const int64_t trace_start = config->report ? report_clock_ns() : 0;
    hit = trace_into_cache(cache, code, frame, *config);
    if (config->report) config->report->compile_ns += report_clock_ns() - trace_start;
    if (!hit->failed && !guards_hold(*hit)) {
      // The guards must hold on the frame they were traced from.
      hit->failed = true;
      hit->reason = code_name(code) + ": guards do not hold on the traced frame: " + explain_miss(*hit);
      hit->hint = "please report this as a kiln bug";
    }
  }
  if (hit->failed) {
    if (config->fullgraph) {
      raise_unsupported(*hit);
      kiln_frame_finish_skipped(tstate, frame);
      return nullptr;
    }
    stats().eager_runs++;
    return kiln_eval_frame_default(tstate, frame, throwflag);
  }
  PyObject* result = hit->transformed_code ? run_transformed(*hit, frame) : run_entry(*hit, values);
  values.reset(0);
  kiln_frame_finish_skipped(tstate, frame);
  return result;
}

}  // namespace

// Note [Hook lifetime]
// While kiln's evaluator is installed, every Python frame of the process
// goes through it, and CPython 3.11+ stops inlining Python-to-Python calls:
// plain Python ran ~45% slower on a module-heavy model. So the hook is
// installed only while some thread is inside a compiled call (counted under
// the GIL) and removed when the last one returns. Threads running plain
// Python meanwhile see the hook but no compile context, and run untouched.
namespace {
int g_active_regions = 0;
}  // namespace

CompiledRegion::CompiledRegion() {
  if (g_active_regions++ == 0 && !kiln_eval_frame_is(&eval_frame)) kiln_set_eval_frame(&eval_frame);
}

CompiledRegion::~CompiledRegion() {
  if (--g_active_regions == 0) kiln_set_eval_frame(nullptr);
}

void set_error_types(PyObject* unsupported, PyObject* recompile) {
  Py_XINCREF(unsupported);
  Py_XSETREF(g_unsupported_error, unsupported);
  Py_XINCREF(recompile);
  Py_XSETREF(g_recompile_error, recompile);
}

}  // namespace kiln::interpreter
