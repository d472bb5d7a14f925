#include "interpreter/static_regions.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <set>
#include <utility>
#include <vector>

#include "base/log.h"
#include "runtime/aten_bridge.h"
#include "runtime/eager_executor.h"
#include "runtime/staged_executor.h"

namespace kiln::interpreter {

// Note [Static regions]
// generate()'s decoding step is a graph with symbolic sizes (the KV cache
// grows by one token a step) in which few nodes touch them: the cache's
// cat, attention, the mask's few ops. The projections, layer norms and
// MLPs work on the new token at static sizes. Compiled per size (Note
// [Size instances]), every length costs a backend compile of kernels that
// did not change: a second generate() call compiled one instance per step
// and took longer than eager. Such a graph is cut instead, in node order,
// into stages: runs of calls that read and make only tensors of static
// sizes, compiled once as static graphs by the same pipeline (fused
// kernels, constant sizes), and between them the calls that read or make
// a symbolic size, a Python value or a tuple, or write in place, replayed
// eagerly through torch, which takes any size. A graph runs so when its
// regions hold at least half of its calls (static_regions_pay); the others
// (prefill at a new length, a batch that changed: every node symbolic)
// stay compiled per size. Runs shorter than kMinRegionCalls stay eager: a
// stage costs a call of its own.
//
// A region's sizes were static at the trace's sample points, which does
// not prove them static at every size (min(s, 8) is 8 at 17, 34 and 51).
// Each call compares a region's tensor inputs with their traced layouts
// and replays the region eagerly for that call where one differs, as a
// size instance's meta replay would have found; the log says so once.

namespace {

constexpr int kMinRegionCalls = 4;

bool writes_in_place(const graph::Node& node) {
  static const std::set<std::string> augmented = {
      "operator.iadd", "operator.isub",    "operator.imul",    "operator.itruediv", "operator.ifloordiv",
      "operator.imod", "operator.ipow",    "operator.iand",    "operator.ior",      "operator.ixor",
      "operator.imatmul", "operator.ilshift", "operator.irshift", "operator.setitem"};
  const std::string& name = node.target_name;
  if (augmented.count(name)) return true;
  for (const auto& kw : node.kwargs) {
    if (kw.first == "out") return true;
  }
  return name.rfind("Tensor.", 0) == 0 && name.size() > 8 && name.back() == '_' && name[name.size() - 2] != '_';
}

// A value a static region may make: one tensor of static sizes.
bool static_tensor(const graph::Node& node) {
  return node.metas.size() == 1 && !node.returns_tuple && node.symbolic_sizes.empty();
}

std::string layout_text(const graph::TensorMeta& meta) {
  std::string text = "sizes (";
  for (size_t d = 0; d < meta.sizes.size(); ++d) text += (d ? ", " : "") + std::to_string(meta.sizes[d]);
  text += ") strides (";
  for (size_t d = 0; d < meta.strides.size(); ++d) text += (d ? ", " : "") + std::to_string(meta.strides[d]);
  return text + ") " + graph::dtype_name(meta.dtype) + (meta.requires_grad ? " requiring grad" : "");
}

// Equal sizes, dtype and device, and strides but along dims of size 1
// (never stepped along: torch itself gives them either stride).
bool same_layout(const graph::TensorMeta& a, const graph::TensorMeta& b) {
  if (a.sizes != b.sizes || a.dtype != b.dtype || a.device_type != b.device_type ||
      a.device_index != b.device_index || a.requires_grad != b.requires_grad || a.strides.size() != b.strides.size()) {
    return false;
  }
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    if (a.sizes[d] != 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

bool is_tensor_value(const graph::Node& node) { return node.metas.size() == 1 && !node.returns_tuple; }

void note_reads(const graph::Arg& arg, std::vector<int>* reads) {
  if (arg.kind == graph::Arg::Kind::Node) reads->push_back(arg.node);
  for (const graph::Arg& item : arg.items) note_reads(item, reads);
}

std::vector<int> reads_of(const graph::Node& node) {
  std::vector<int> reads;
  for (const graph::Arg& arg : node.args) note_reads(arg, &reads);
  for (const auto& kw : node.kwargs) note_reads(kw.second, &reads);
  return reads;
}

// A run of calls in node order, compiled as a static region or replayed.
struct Segment {
  bool compiled = false;
  std::vector<int> nodes;
};

// True when a compiled region would hand on a view of a tensor that a call
// writes in place: the compiled graph may return a copy where torch
// returns a view, and the view would miss the write. Per value, the
// tensors whose storage it may share: itself for an input or a fresh
// result, else those of the values it reads.
bool views_written_later(const graph::Graph& graph, const std::vector<Segment>& segments) {
  std::vector<std::set<int>> roots(graph.nodes().size());
  std::set<int> written;
  for (const graph::Node& node : graph.nodes()) {
    if (node.kind == graph::NodeKind::Input || node.fresh_result) {
      roots[node.id] = {node.id};
    } else {
      for (int read : reads_of(node)) roots[node.id].insert(roots[read].begin(), roots[read].end());
    }
    if (!writes_in_place(node)) continue;
    std::vector<int> targets;
    if (!node.args.empty()) note_reads(node.args[0], &targets);
    for (const auto& kw : node.kwargs) {
      if (kw.first == "out") note_reads(kw.second, &targets);
    }
    for (int target : targets) written.insert(roots[target].begin(), roots[target].end());
  }
  if (written.empty()) return false;
  for (const Segment& segment : segments) {
    if (!segment.compiled) continue;
    for (int id : segment.nodes) {
      const graph::Node& node = graph.node(id);
      if (node.fresh_result) continue;
      for (int root : roots[id]) {
        if (written.count(root)) return true;
      }
    }
  }
  return false;
}

std::vector<Segment> segments_of(const graph::Graph& graph) {
  // What a region may read: a static tensor whose strides are static too:
  // an input's, a fresh result's, or a view of such tensors only (a slice
  // of the growing cache has static sizes and strides that grow).
  std::vector<bool> readable(graph.nodes().size(), false);
  std::vector<Segment> segments;
  for (const graph::Node& node : graph.nodes()) {
    const std::vector<int> reads = reads_of(node);
    const bool reads_readable = std::all_of(reads.begin(), reads.end(), [&](int id) { return readable[id]; });
    readable[node.id] = static_tensor(node) && (node.kind == graph::NodeKind::Input || node.fresh_result ||
                                                (!reads.empty() && reads_readable));
    if (node.kind != graph::NodeKind::Call) continue;
    const bool in_region = static_tensor(node) && !writes_in_place(node) && reads_readable;
    if (segments.empty() || segments.back().compiled != in_region) segments.push_back({in_region, {}});
    segments.back().nodes.push_back(node.id);
  }
  // Short regions replay eagerly; neighbouring eager runs merge.
  std::vector<Segment> merged;
  for (Segment& segment : segments) {
    if (segment.compiled && static_cast<int>(segment.nodes.size()) < kMinRegionCalls) segment.compiled = false;
    if (!merged.empty() && !merged.back().compiled && !segment.compiled) {
      merged.back().nodes.insert(merged.back().nodes.end(), segment.nodes.begin(), segment.nodes.end());
    } else {
      merged.push_back(std::move(segment));
    }
  }
  if (views_written_later(graph, merged)) {
    // One eager segment: no region, so the graph compiles per size.
    Segment all{false, {}};
    for (const Segment& segment : merged) all.nodes.insert(all.nodes.end(), segment.nodes.begin(), segment.nodes.end());
    return {all};
  }
  return merged;
}

graph::Arg remapped(const graph::Arg& arg, const std::vector<int>& ids) {
  graph::Arg out = arg;
  if (out.kind == graph::Arg::Kind::Node) out.node = ids[arg.node];
  for (size_t i = 0; i < out.items.size(); ++i) out.items[i] = remapped(arg.items[i], ids);
  return out;
}

// The graph of one segment: an input per value it reads from outside it,
// its calls, and the tuple of the values later nodes or the output read.
std::unique_ptr<graph::Graph> segment_graph(const graph::Graph& graph, const Segment& segment,
                                            const std::vector<int>& last_read, std::vector<int>* inputs,
                                            std::vector<int>* outputs) {
  auto sub = std::make_unique<graph::Graph>();
  std::vector<int> ids(graph.nodes().size(), -1);
  const std::set<int> inside(segment.nodes.begin(), segment.nodes.end());
  for (int id : segment.nodes) {
    for (int read : reads_of(graph.node(id))) {
      if (inside.count(read) || ids[read] >= 0) continue;
      const graph::Node& source = graph.node(read);
      // A graph input keeps its source's name for logs; others are "%<id>".
      const bool input = source.kind == graph::NodeKind::Input;
      const std::string name = input ? source.input_name : "%" + std::to_string(read);
      const int from = input ? source.input_source : -1;
      ids[read] = is_tensor_value(source) ? sub->add_input(from, name, source.metas[0]) : sub->add_object_input(from, name);
      if (is_tensor_value(source) && !source.symbolic_sizes.empty()) {
        sub->node(ids[read]).symbolic_sizes = source.symbolic_sizes;
      }
      inputs->push_back(read);
    }
  }
  for (int id : segment.nodes) {
    const graph::Node& node = graph.node(id);
    std::vector<graph::Arg> args;
    for (const graph::Arg& arg : node.args) args.push_back(remapped(arg, ids));
    std::vector<std::pair<std::string, graph::Arg>> kwargs;
    for (const auto& kw : node.kwargs) kwargs.emplace_back(kw.first, remapped(kw.second, ids));
    ids[id] = sub->add_call(node.target_name, node.target, std::move(args), std::move(kwargs));
    graph::Node& copy = sub->node(ids[id]);
    copy.metas = node.metas;
    copy.symbolic_sizes = node.symbolic_sizes;
    copy.returns_tuple = node.returns_tuple;
    copy.autocast_implicit = node.autocast_implicit;
    copy.fresh_result = node.fresh_result;
    copy.checkpoint = node.checkpoint;
    if (last_read[id] > segment.nodes.back()) outputs->push_back(id);
  }
  graph::Arg output;
  output.kind = graph::Arg::Kind::Tuple;
  for (int id : *outputs) output.items.push_back(graph::Arg::of_node(ids[id]));
  sub->set_output(std::move(output));
  return sub;
}

// A compiled region that checks the layouts of its tensor inputs made by
// earlier stages each call and replays the region eagerly where one
// differs from the traced layout.
class CheckedRegion final : public runtime::GraphExecutor {
 public:
  CheckedRegion(const graph::Graph& graph, std::unique_ptr<runtime::GraphExecutor> compiled, std::string name)
      : graph_(graph), compiled_(std::move(compiled)), eager_(graph), name_(std::move(name)) {}

  PyObject* run(PyObject* const* inputs) const override {
    const std::vector<int>& ids = graph_.inputs();
    graph::TensorMeta meta;
    for (size_t i = 0; i < ids.size(); ++i) {
      const graph::Node& input = graph_.node(ids[i]);
      // The frame's guards checked the graph's own inputs already.
      if (input.metas.empty() || input.input_source >= 0) continue;
      const bool tensor = runtime::is_tensor(inputs[i]);
      if (tensor) {
        runtime::read_tensor_meta(inputs[i], &meta);
        if (same_layout(meta, input.metas[0])) continue;
      }
      if (!warned_.exchange(true)) {
        KILN_LOG(dynamic, name_ << ": input " << input.input_name << " is "
                                << (tensor ? layout_text(meta) : std::string("no tensor")) << ", traced "
                                << layout_text(input.metas[0]) << "; the region replays eagerly at such sizes");
      }
      return eager_.run(inputs);
    }
    return compiled_->run(inputs);
  }
  const char* name() const override { return compiled_->name(); }

 private:
  const graph::Graph& graph_;
  std::unique_ptr<runtime::GraphExecutor> compiled_;
  runtime::EagerExecutor eager_;
  std::string name_;
  mutable std::atomic<bool> warned_{false};
};

// The stages, owning the segment graphs their executors read.
class StaticRegionsExecutor final : public runtime::GraphExecutor {
 public:
  StaticRegionsExecutor(std::vector<std::unique_ptr<graph::Graph>> graphs, std::vector<runtime::ExecutorStage> stages,
                        const graph::Graph& graph)
      : graphs_(std::move(graphs)),
        staged_(std::move(stages), graph.inputs(), graph.output(), static_cast<int>(graph.nodes().size())) {}
  PyObject* run(PyObject* const* inputs) const override { return staged_.run(inputs); }
  const char* name() const override { return "static regions"; }

 private:
  std::vector<std::unique_ptr<graph::Graph>> graphs_;  // declared first: outlives the executors
  runtime::StagedExecutor staged_;
};

}  // namespace

StaticRegionCount count_static_regions(const graph::Graph& graph) {
  StaticRegionCount count;
  for (const Segment& segment : segments_of(graph)) {
    if (segment.compiled) {
      count.static_calls += static_cast<int>(segment.nodes.size());
      count.regions++;
    } else {
      count.eager_calls += static_cast<int>(segment.nodes.size());
    }
  }
  return count;
}

bool static_regions_pay(const StaticRegionCount& count) {
  return count.regions > 0 && count.static_calls >= count.eager_calls;
}

std::unique_ptr<runtime::GraphExecutor> static_regions_executor(const graph::Graph& graph, const std::string& name,
                                                                const InstanceCompiler& compile) {
  // The last node reading each value; the output reads after every node.
  std::vector<int> last_read(graph.nodes().size(), -1);
  for (const graph::Node& node : graph.nodes()) {
    for (int read : reads_of(node)) last_read[read] = std::max(last_read[read], node.id);
  }
  std::vector<int> returned;
  note_reads(graph.output(), &returned);
  for (int id : returned) last_read[id] = INT_MAX;

  std::vector<std::unique_ptr<graph::Graph>> graphs;
  std::vector<runtime::ExecutorStage> stages;
  int region = 0;
  for (const Segment& segment : segments_of(graph)) {
    runtime::ExecutorStage stage;
    graphs.push_back(segment_graph(graph, segment, last_read, &stage.inputs, &stage.outputs));
    const graph::Graph& sub = *graphs.back();
    if (segment.compiled) {
      const std::string what = name + " static region " + std::to_string(region++);
      stage.executor = std::make_unique<CheckedRegion>(sub, compile(sub, what), what);
    } else {
      stage.executor = std::make_unique<runtime::EagerExecutor>(sub);
    }
    stages.push_back(std::move(stage));
  }
  return std::make_unique<StaticRegionsExecutor>(std::move(graphs), std::move(stages), graph);
}

}  // namespace kiln::interpreter
