// What a kiln.compile() call asked for, the thread's current compile
// context, process-wide counters, and collectors for explain() and dumps.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inductor/conv_bias_placement.h"
#include "inductor/matmul_policy.h"
#include "prims/conv_layout.h"
#include "base/py_ref.h"

namespace kiln::interpreter {

struct ConfigReport;

// Collects what tracing produced, for kiln.explain() and trace dumps.
struct TraceCollector {
  std::vector<std::string> graphs;   // graph text per successful trace
  std::vector<std::string> reasons;  // "file:line: why (hint)" per failure
  std::string dump;                  // bytecode, graph, guards, breaks
  bool want_dump = false;
};

// kiln.config settings one kiln.compile(options={...}) call sets for its own
// graphs; unset ones read the process-wide value when a graph is compiled.
struct SettingOverrides {
  std::optional<bool> cpu_kernels;
  std::optional<bool> cuda_kernels;
  std::optional<bool> parameter_kernel_cache;
  std::optional<bool> constant_subgraphs;
  std::optional<bool> batch_input_casts;
  std::optional<bool> static_regions;
  std::optional<inductor::MatmulPolicy> cpu_matmul;
  std::optional<prims::ConvLayout> conv_layout;
  std::optional<inductor::ConvBiasPlacement> conv_bias;
};

// One kiln.compile() call's settings. Cache entries are tagged with the id,
// so two compiles of one function never share graphs.
struct CompileConfig : std::enable_shared_from_this<CompileConfig> {
  CompileConfig() = default;
  CompileConfig(const CompileConfig&) = delete;
  CompileConfig& operator=(const CompileConfig&) = delete;
  // Marks the id dead, so cache entries made under it can be dropped.
  ~CompileConfig();

  uint64_t id = 0;
  std::string backend = "inductor";
  // kiln.compile(backend=callable): backend is "callable", and this is
  // called with each graph as a torch.fx.GraphModule (kiln._fx).
  base::PyRef backend_callable;
  // kiln.compile(mode="reduce-overhead"): CUDA graphs run as captured
  // torch.cuda.CUDAGraphs (Note [CUDA graphs] in runtime/).
  bool cuda_graphs = false;
  // kiln.compile(mode="max-autotune" or "max-autotune-no-cudagraphs"):
  // CUDA kernels time their launch configurations at their first launch
  // (Note [CUDA autotuning] in inductor/cuda/cuda_autotune.cpp).
  bool autotune = false;
  bool fullgraph = false;
  SettingOverrides settings;  // kiln.compile(options=...)
  // kiln.compile(dynamic=...): None learns dynamic dims from recompiles,
  // True makes every argument dim dynamic, False keeps sizes static.
  enum class Dynamic : uint8_t { Automatic, Always, Never } dynamic = Dynamic::Automatic;
  std::shared_ptr<TraceCollector> collector;  // set for explain/dump runs
  std::shared_ptr<ConfigReport> report;       // set under kiln --report
};

// Returns a fresh config id.
uint64_t next_config_id();

// True when the config with this id no longer exists.
bool is_dead_config(uint64_t id);

// Counts configs that died so far; caches compare it to know when to prune.
uint64_t dead_config_epoch();

// The compile context of the running thread: null when frames on this
// thread must not be traced (outside compiled calls, inside graphs).
const CompileConfig* current_config();

// Sets the running thread's context; returns the previous one.
const CompileConfig* set_current_config(const CompileConfig* config);

// Scoped switch of the thread's compile context.
class ConfigScope {
 public:
  explicit ConfigScope(const CompileConfig* config) : previous_(set_current_config(config)) {}
  ~ConfigScope() { set_current_config(previous_); }
  ConfigScope(const ConfigScope&) = delete;
  ConfigScope& operator=(const ConfigScope&) = delete;

 private:
  const CompileConfig* previous_;
};

// The compile context that was current when the compiled graph this
// thread runs started (the graph itself runs with none): a graph's
// autograd function keeps it for its backward (Note [Recomputed forwards]
// in python/kiln/_autograd.py). Null outside graphs.
const CompileConfig* graph_config();

// Scoped run of a compiled graph: no compile context, so torch's own
// Python code inside the graph is not traced, and graph_config() the
// context that was current.
class GraphRunScope {
 public:
  GraphRunScope();
  ~GraphRunScope();
  GraphRunScope(const GraphRunScope&) = delete;
  GraphRunScope& operator=(const GraphRunScope&) = delete;

 private:
  const CompileConfig* previous_current_;
  const CompileConfig* previous_graph_;
};

// True while the running thread replays a graph's compile context for
// its backward (Note [Recomputed forwards]): frames run the graphs their
// cache holds, and a frame without one runs as plain Python, never traced.
bool replay_only();

// Scoped switch of replay_only().
class ReplayOnlyScope {
 public:
  explicit ReplayOnlyScope(bool on);
  ~ReplayOnlyScope();
  ReplayOnlyScope(const ReplayOnlyScope&) = delete;
  ReplayOnlyScope& operator=(const ReplayOnlyScope&) = delete;

 private:
  bool previous_;
};

// How many kiln.compile'd or kiln.disable'd calls the running thread is
// inside. --compile=modules compiles a module call only at depth 0: inside,
// the enclosing compiled call already covers it (or disabled it).
int context_depth();

// Scoped increment of the thread's context depth.
class ContextDepthScope {
 public:
  ContextDepthScope();
  ~ContextDepthScope();
  ContextDepthScope(const ContextDepthScope&) = delete;
  ContextDepthScope& operator=(const ContextDepthScope&) = delete;
};

// Process-wide counters, reported by kiln.stats().
#define KILN_STATS(X)  \
  X(traces)            \
  X(cache_hits)        \
  X(cache_misses)      \
  X(recompiles)        \
  X(graph_breaks)      \
  X(unsupported)       \
  X(eager_runs)        \
  X(cache_limit_hits)  \
  X(prim_graphs)       \
  X(prim_fallbacks)     \
  X(autograd_graphs)    \
  X(kernels)            \
  X(kernels_compiled)   \
  X(kernel_cache_hits_memory) \
  X(kernel_cache_hits_disk)   \
  X(kernel_cache_rejected)    \
  X(kernel_buffers_reused)    \
  X(cuda_kernels_compiled)    \
  X(cuda_kernel_cache_hits_disk) \
  X(cuda_nvrtc_programs)      \
  X(gemm_kernels)             \
  X(cuda_graphs_captured)     \
  X(kernels_autotuned)        \
  X(size_instances)            \
  X(static_regions)            \
  X(constant_nodes_folded)    \
  X(channels_last_convolutions)

struct Stats {
#define KILN_STAT_FIELD(name) std::atomic<int64_t> name{0};
  KILN_STATS(KILN_STAT_FIELD)
#undef KILN_STAT_FIELD
};

// The counters.
Stats& stats();

// Zeroes every counter.
void reset_stats();

// Whether backend "inductor" compiles its CPU graphs' pointwise and
// reduction work to kernels through LLVM (kiln.config.cpu_kernels, on by
// default; off, or in builds without LLVM, inductor replays through torch).
bool cpu_kernels();
// Turns cpu_kernels() on or off for graphs compiled from now on.
void set_cpu_kernels(bool enabled);

// Who computes the matrix products of CPU graphs that backend "inductor"
// compiles (kiln.config.cpu_matmul, default Auto; Note [GEMM nodes]).
inductor::MatmulPolicy cpu_matmul();
// Sets cpu_matmul() for graphs compiled from now on.
void set_cpu_matmul(inductor::MatmulPolicy policy);

// Where backend "inductor" lays 2-d convolutions out channels-last
// (kiln.config.conv_layout, default Auto: CUDA inference graphs; Note [Channels-last
// convolutions] in prims/channels_last.cpp).
prims::ConvLayout conv_layout();
// Sets conv_layout() for graphs compiled from now on.
void set_conv_layout(prims::ConvLayout layout);

// Which graphs add their convolutions' biases in kiln's kernels
// (kiln.config.conv_bias, default Auto: CUDA inference graphs; Note
// [Convolution biases in kernels] in inductor/conv_bias.cpp).
inductor::ConvBiasPlacement conv_bias();
// Sets conv_bias() for graphs compiled from now on.
void set_conv_bias(inductor::ConvBiasPlacement placement);

// Whether backend "inductor" compiles graphs whose tensors are all on one
// CUDA device to CUDA kernels through NVRTC (kiln.config.cuda_kernels, on
// by default).
bool cuda_kernels();
// Sets cuda_kernels() for graphs compiled from now on.
void set_cuda_kernels(bool enabled);
// True when inference graphs on the GPU keep the results of kernels that
// read only parameters between calls (kiln.config.parameter_kernel_cache,
// on by default; Note [Kernels of parameters] in runtime/prim_executor.cpp).
bool parameter_kernel_cache();
// Sets parameter_kernel_cache() for graphs compiled from now on.
void set_parameter_kernel_cache(bool enabled);
// True when compiled graphs run the nodes that read none of their inputs
// once and keep what the rest reads (kiln.config.constant_subgraphs, on by
// default; Note [Constant subgraphs] in prims/constant_subgraphs.cpp).
bool constant_subgraphs();
// Sets constant_subgraphs() for graphs compiled from now on.
void set_constant_subgraphs(bool enabled);
// Whether CUDA graphs cast their input tensors (autocast's weight casts) in
// one foreach copy per dtype pair (kiln.config.batch_input_casts, on by
// default; Note [Batched weight casts] in inductor/batched_casts.cpp).
bool batch_input_casts();
// Sets batch_input_casts() for graphs compiled from now on.
void set_batch_input_casts(bool enabled);
// True when a graph with symbolic sizes whose calls are mostly at static
// sizes compiles its static regions once and replays the rest eagerly
// instead of compiling per size (kiln.config.static_regions, on by
// default; Note [Static regions] in interpreter/static_regions.cpp).
bool static_regions();
// Sets static_regions() for graphs compiled from now on.
void set_static_regions(bool enabled);

// Maximum cache entries per code object and config (kiln.config.cache_size_limit).
int cache_size_limit();
void set_cache_size_limit(int limit);

// How compiled functions behave process-wide (kiln.set_stance, the
// stances of torch.compiler.set_stance).
enum class Stance {
  Default,           // compile, recompile as guards fail
  ForceEager,        // run every compiled function eagerly, compiling nothing
  EagerOnRecompile,  // cached graphs still run; a call needing a recompile runs eagerly
  FailOnRecompile,   // a call needing a recompile raises kiln.RecompileError
};
Stance stance();
void set_stance(Stance stance);

}  // namespace kiln::interpreter
