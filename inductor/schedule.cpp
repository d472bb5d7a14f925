#include "inductor/schedule.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace kiln::inductor {
namespace {

using prims::PrimGraph;
using prims::PrimNode;

// Note [Kernel scheduling]
// Groups grow from consumers to producers, nodes visited last to first: an
// elementwise or reduction node not yet grouped starts a group, and the
// producers of its members' operands join while the group stays
// lowerable (lower_group succeeds: one iteration space, every reduction
// over the same dims of it, each result of the space's or the reductions'
// shape) and acyclic. So a softmax (amax, sub, exp, sum, div) is one kernel
// and a layer_norm after it joins the same one (its var_mean reduces the
// same rows): a persistent-row kernel that keeps each row in cache while
// it makes several passes over it (Note [Reduction kernels]). A cat of few
// pieces or a fill joins as a producer but starts no group (Note [Cat in
// kernels]). A producer
// whose value is also used outside the group still joins; the value becomes
// one more kernel output (forward graphs that save activations for the
// backward need this). Acyclic: a kernel runs once its every input is
// ready, so no path may leave the group and come back (entering another
// group counts as entering all of it; an extern call's orderings with the
// readers of what it may write count as edges, Note [Extern writes]); the
// nodes on such paths join with the producer that closed them (layer_norm's var feeds rsqrt outside the
// group and back into its output) or, when one cannot, the producer stays
// out. A producer refused now is tried again whenever the group has grown
// (a [rows, 1] statistic fits only once a reduction has joined). Views fold only when every use
// is inside the group and they are no graph output (a kernel output would
// be a copy, not the view). Then vertical fusion: a group reading a
// full-size value another group makes joins that group when the union
// lowers and stays acyclic (the value is not written and read back). Last,
// horizontal fusion: two groups that read a common tensor of their
// iteration space's shape merge when the merged group lowers and stays
// acyclic (x.sum(0) and x.amax(0) read x once) and the two would run
// near each other (kSiblingReach); so do groups over the same
// iteration space (sizes and reduced dims) that read nothing in common
// but lie within kNeighbours groups of each other in graph order, so one
// launch does the work of two (attention's q, k and v gradients, each
// transposed back; a layer_norm's weight and bias gradients, each summing
// its partials: Note [Two-step outer reductions]). The window keeps the
// pairs tried, each a lowering and a walk of the graph, linear in the
// groups, and the merged kernel from waiting long for the later group's
// inputs while the earlier group's stay alive.
// Horizontal fusion without a common input: the groups after a group in
// graph order it may merge with.
constexpr size_t kNeighbours = 4;
// Horizontal fusion through a common input merges groups whose last nodes
// (where each would run) lie at most this many nodes apart. Unbounded, it
// chained a backward graph's layers through their saved activations (each
// read by its own layer's gradient kernels and the next one's): hf-bert's
// weight and bias gradients of all 12 layers became one kernel of 50
// outputs and 205 inputs, run only once the last layer's gradient was
// ready, and long to compile.
constexpr int kSiblingReach = 64;

class Scheduler {
 public:
  explicit Scheduler(const PrimGraph& graph)
      : graph_(graph),
        count_(static_cast<int>(graph.nodes().size())),
        users_(graph.values().size()),
        group_of_(count_, -1),
        outputs_(graph.outputs().begin(), graph.outputs().end()),
        after_(count_),
        before_(count_),
        reads_of_(count_) {
    for (int n = 0; n < count_; ++n) {
      reads_of_[n] = node_reads(graph.node(n));
      for (int value : reads_of_[n]) users_[value].push_back(n);
    }
    for (const auto& [first, second] : extern_order_edges(graph)) {
      after_[first].push_back(second);
      before_[second].push_back(first);
    }
    // Graph order is the first topological order of the units; a group
    // never outnumbers the nodes, so 2 * count_ units are enough.
    order_.resize(count_);
    place_.assign(2 * static_cast<size_t>(count_), -1);
    for (int n = 0; n < count_; ++n) order_[n] = place_[n] = n;
    fwd_mark_.assign(place_.size(), 0);
    back_mark_.assign(place_.size(), 0);
    path_mark_.assign(place_.size(), 0);
  }

  std::vector<KernelGroup> run() {
    for (int n = count_ - 1; n >= 0; --n) {
      if (group_of_[n] >= 0 || !is_compute(graph_.node(n))) continue;
      grow(n);
    }
    merge_consumers();
    merge_siblings();
    merge_neighbours();
    std::vector<KernelGroup> result;
    for (size_t g = 0; g < members_.size(); ++g) {
      if (members_[g].empty()) continue;
      result.push_back(group(static_cast<int>(g)));
    }
    std::sort(result.begin(), result.end(),
              [](const KernelGroup& a, const KernelGroup& b) { return a.nodes.back() < b.nodes.back(); });
    return result;
  }

 private:
  bool is_compute(const PrimNode& node) const {
    return is_elementwise(graph_, node) || is_kernel_reduction(graph_, node);
  }

  void grow(int root) {
    const int g = static_cast<int>(members_.size());
    members_.push_back({root});
    version_.push_back(0);
    group_of_[root] = g;
    if (!lowerable(g)) {
      members_[g].clear();
      ++version_[g];
      group_of_[root] = -1;
      return;
    }
    // The root's place is the new group's.
    place_[count_ + g] = place_[root];
    order_[place_[root]] = count_ + g;
    place_[root] = -1;
    std::vector<int> work = {root};
    // Producers refused for now: a value of the reductions' shape cannot be
    // an output until a reduction has joined, so they are tried again
    // whenever the group has grown.
    std::vector<int> refused;
    // Joins `producer` (through the value a member reads) or refuses it.
    auto join = [&](int producer, int read) {
      if (!try_join(g, producer, read)) {
        refused.push_back(producer);
        return;
      }
      work.push_back(producer);
      work.insert(work.end(), also_joined_.begin(), also_joined_.end());
    };
    for (;;) {
      while (!work.empty()) {
        const int m = work.back();
        work.pop_back();
        for (const prims::PrimArg& arg : graph_.node(m).args) {
          if (!arg.is_value()) continue;
          const int producer = graph_.value(arg.value).node;
          if (producer < 0 || group_of_[producer] >= 0) continue;
          join(producer, arg.value);
        }
      }
      std::vector<int> again;
      again.swap(refused);
      for (int producer : again) {
        if (group_of_[producer] >= 0) continue;
        // The value it makes that a member reads.
        int read = -1;
        for (int value : graph_.node(producer).outputs) {
          for (int user : users_[value]) {
            if (group_of_[user] == g) read = value;
          }
        }
        if (read >= 0) {
          join(producer, read);
        } else {
          refused.push_back(producer);
        }
      }
      if (work.empty()) break;
    }
  }

  // The values group g reads from outside it, ascending.
  std::vector<int> reads(int g) const {
    std::vector<int> out;
    for (int n : members_[g]) {
      for (int value : reads_of_[n]) {
        const int producer = graph_.value(value).node;
        if (producer < 0 || group_of_[producer] != g) out.push_back(value);
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // Horizontal fusion (Note [Kernel scheduling]): two groups reading a
  // common tensor merge when the merged group lowers (one iteration space)
  // and stays acyclic, so the tensor is read in one pass.
  void merge_siblings() {
    const int groups = static_cast<int>(members_.size());
    // Each group's reads, kept: a merge changes only the merged group's.
    std::vector<std::vector<int>> read(groups);
    for (int g = 0; g < groups; ++g) {
      if (!members_[g].empty()) read[g] = reads(g);
    }
    for (int a = 0; a < groups; ++a) {
      if (members_[a].empty()) continue;
      int64_t space = -1;  // a's iteration space, lowered when first needed
      for (int b = a + 1; b < groups; ++b) {
        if (members_[b].empty()) continue;
        // A common input as large as a's whole iteration space (not a
        // broadcast bias), so merging saves a pass over memory.
        bool share = false;
        for (auto i = read[a].begin(), j = read[b].begin(); !share && i != read[a].end() && j != read[b].end();) {
          if (*i < *j) {
            ++i;
          } else if (*j < *i) {
            ++j;
          } else {
            if (space < 0) space = space_points(a);
            share = space > 1 && numel(graph_.value(*i).meta.sizes) == space;
            ++i, ++j;
          }
        }
        if (share && near(a, b) && try_merge(a, b)) {
          read[a] = reads(a);
          read[b].clear();
          space = -1;
        }
      }
    }
  }

  // Whether groups a and b would run within kSiblingReach nodes of each
  // other (a group runs after its last node; Note [Kernel scheduling]).
  bool near(int a, int b) const {
    const int last_a = *std::max_element(members_[a].begin(), members_[a].end());
    const int last_b = *std::max_element(members_[b].begin(), members_[b].end());
    return std::abs(last_a - last_b) <= kSiblingReach;
  }

  // Horizontal fusion of groups over one iteration space that share no
  // input (Note [Kernel scheduling]), each tried with the kNeighbours
  // groups after it in graph order.
  void merge_neighbours() {
    std::vector<int> order;
    std::vector<int> last(members_.size(), -1);
    for (size_t g = 0; g < members_.size(); ++g) {
      if (members_[g].empty()) continue;
      order.push_back(static_cast<int>(g));
      last[g] = *std::max_element(members_[g].begin(), members_[g].end());
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) { return last[a] < last[b]; });
    // Each group's iteration space: its sizes, then its reduced dims
    // (empty when it does not lower or has one point).
    std::vector<std::vector<int64_t>> space(members_.size());
    auto space_of = [&](int g) {
      std::vector<int64_t> key;
      try {
        const Kernel kernel = lower_group(graph_, group(g)).kernel;
        if (numel(kernel.sizes) <= 1) return key;
        key = kernel.sizes;
        key.push_back(-1);
        key.insert(key.end(), kernel.reduced.begin(), kernel.reduced.end());
      } catch (const LoweringError&) {
      }
      return key;
    };
    for (int g : order) space[g] = space_of(g);
    for (size_t i = 0; i < order.size(); ++i) {
      const int a = order[i];
      if (members_[a].empty() || space[a].empty()) continue;
      for (size_t k = i + 1; k < order.size() && k <= i + kNeighbours; ++k) {
        const int b = order[k];
        if (members_[b].empty() || space[b] != space[a]) continue;
        try_merge(a, b);
      }
    }
  }

  // Vertical fusion of what grow() left apart (Note [Kernel scheduling]):
  // group b joins group a when it reads a value a makes over a's whole
  // iteration space (a full-size result, not a row statistic) and the union
  // lowers and stays acyclic, so the value stays in registers instead of
  // a round trip through memory (GELU's backward feeds a bias gradient's
  // reduction and, in another group, its conversion to bf16).
  void merge_consumers() {
    const int groups = static_cast<int>(members_.size());
    // Lowering is the costly part: each group's iteration space is lowered
    // once per change, and a refused pair is not tried again until one of
    // its groups changes (versions count the changes).
    std::vector<int64_t> space(groups, -1);
    std::vector<int> version(groups, 0);
    std::map<std::pair<int, int>, std::pair<int, int>> refused;
    // Each group's reads, kept until the group changes.
    std::vector<std::vector<int>> read(groups);
    std::vector<int> read_version(groups, -1);
    for (bool merged = true; merged;) {
      merged = false;
      for (int b = 0; b < groups; ++b) {
        if (members_[b].empty()) continue;
        if (read_version[b] != version[b]) {
          read[b] = reads(b);
          read_version[b] = version[b];
        }
        for (int value : read[b]) {
          const int producer = graph_.value(value).node;
          const int a = producer < 0 ? -1 : group_of_[producer];
          if (a < 0 || a == b || members_[a].empty()) continue;
          if (space[a] < 0) space[a] = space_points(a);
          if (space[a] <= 1 || numel(graph_.value(value).meta.sizes) != space[a]) continue;
          const auto key = std::make_pair(a, b);
          const auto seen = refused.find(key);
          if (seen != refused.end() && seen->second == std::make_pair(version[a], version[b])) continue;
          if (!try_merge(a, b)) {
            refused[key] = {version[a], version[b]};
            continue;
          }
          ++version[a];
          space[a] = -1;
          merged = true;
          break;  // b is empty now
        }
      }
    }
  }

  // Moves group b's members into group a when the union lowers and stays
  // acyclic; otherwise leaves both as they were.
  bool try_merge(int a, int b) {
    const int unit_a = count_ + a, unit_b = count_ + b;
    const bool a_first = place_[unit_a] < place_[unit_b];
    const int first = a_first ? unit_a : unit_b, last = a_first ? unit_b : unit_a;
    Region later;
    if (!path_free(first, last, nullptr, &later)) return false;
    const size_t before = members_[a].size();
    for (int n : members_[b]) {
      group_of_[n] = a;
      members_[a].push_back(n);
    }
    ++version_[a];
    if (lowerable(a)) {
      members_[b].clear();
      ++version_[b];
      reorder(first, last, {}, later, unit_a);
      return true;
    }
    for (size_t i = before; i < members_[a].size(); ++i) group_of_[members_[a][i]] = b;
    members_[a].resize(before);
    ++version_[a];
    return false;
  }

  static int64_t numel(const std::vector<int64_t>& sizes) {
    int64_t n = 1;
    for (int64_t size : sizes) n *= size;
    return n;
  }

  // The points of the iteration space group g lowers to (0 when it does not).
  int64_t space_points(int g) const {
    try {
      return numel(lower_group(graph_, group(g)).kernel.sizes);
    } catch (const LoweringError&) {
      return 0;
    }
  }

  // Adds `producer` (making `value`, read by a member) to group g when it
  // may join, with the nodes it sandwiches (left in also_joined_); returns
  // whether it joined.
  bool try_join(int g, int producer, int value) {
    also_joined_.clear();
    const PrimNode& made_by = graph_.node(producer);
    if (is_view_node(made_by)) {
      if (!view_folds(graph_, made_by) || outputs_.count(value)) return false;
      const bool all_inside = std::all_of(users_[value].begin(), users_[value].end(),
                                          [&](int user) { return group_of_[user] == g; });
      if (!all_inside) return false;
    } else if (!is_compute(made_by) && !joins_readers(graph_, made_by)) {
      return false;
    }
    std::vector<int> between;
    Region later;
    if (!path_free(producer, count_ + g, &between, &later)) return false;
    group_of_[producer] = g;
    members_[g].push_back(producer);
    for (int n : between) {
      group_of_[n] = g;
      members_[g].push_back(n);
    }
    ++version_[g];
    also_joined_ = between;
    if (!lowerable(g)) {
      also_joined_.clear();
      for (size_t i = 0; i <= between.size(); ++i) {
        group_of_[members_[g].back()] = -1;
        members_[g].pop_back();
      }
      ++version_[g];
      return false;
    }
    reorder(producer, count_ + g, between, later, count_ + g);
    return true;
  }

  KernelGroup group(int g) const {
    KernelGroup out;
    out.nodes = members_[g];
    std::sort(out.nodes.begin(), out.nodes.end());
    for (int n : out.nodes) {
      for (int value : graph_.node(n).outputs) {
        const bool outside = outputs_.count(value) > 0 ||
                             std::any_of(users_[value].begin(), users_[value].end(),
                                         [&](int user) { return group_of_[user] != g; });
        if (outside) out.outputs.push_back(value);
      }
    }
    return out;
  }

  bool lowerable(int g) const {
    try {
      lower_group(graph_, group(g));
      return true;
    } catch (const LoweringError&) {
      return false;
    }
  }

  // Note [Kernel order kept topological]
  // A join or merge must keep the groups acyclic (Note [Kernel scheduling]).
  // The scheduler keeps a topological order of its units (a group, or a
  // node in none) as it goes: order_[place] is the unit at a place, holes
  // -1; every edge between units (data, extern orderings) runs to a later
  // place. Joining unit x to a later unit y closes a cycle only through
  // units placed between them, reached from x and reaching y: a search
  // forward from x and one back from y run in step, neither leaving the
  // places between, and the first to finish bounds the second (most
  // producers are read only by the group they join: no search at all).
  // After a join those places are ordered anew: what x reaches (or what
  // does not reach y) after the joined unit, the rest before it, each in
  // its old order. Graph order alone could not bound the search: a
  // group's members lie far apart in a backward graph (a layer norm's
  // statistics recomputed from saved values at the top, read near the
  // bottom), so a window over it spanned most of hf-bert's 3,000-node
  // backward for every try (1.6 s of its first training call's
  // scheduling, 0.58 s now, the same groups).

  int unit_of(int n) const { return group_of_[n] >= 0 ? count_ + group_of_[n] : n; }

  // A group's edges to nodes outside it (ascending), kept until the group
  // changes: a large group's members mostly read each other.
  struct Edges {
    int version = -1;
    std::vector<int> nodes;
  };

  // Calls fn(node) for each node that node m has an edge to (`forward`)
  // or from: data edges and extern orderings alike.
  template <typename Fn>
  void node_edges(int m, bool forward, Fn&& fn) const {
    if (forward) {
      for (int value : graph_.node(m).outputs) {
        for (int user : users_[value]) fn(user);
      }
      for (int after : after_[m]) fn(after);
    } else {
      for (int value : reads_of_[m]) {
        if (graph_.value(value).node >= 0) fn(graph_.value(value).node);
      }
      for (int before : before_[m]) fn(before);
    }
  }

  const std::vector<int>& outside(int g, bool forward) const {
    std::vector<Edges>& cache = forward ? successors_ : predecessors_;
    if (cache.size() < members_.size()) cache.resize(members_.size());
    Edges& edges = cache[g];
    if (edges.version == version_[g]) return edges.nodes;
    edges.nodes.clear();
    for (int m : members_[g]) {
      node_edges(m, forward, [&](int n) {
        if (group_of_[n] != g) edges.nodes.push_back(n);
      });
    }
    std::sort(edges.nodes.begin(), edges.nodes.end());
    edges.nodes.erase(std::unique(edges.nodes.begin(), edges.nodes.end()), edges.nodes.end());
    edges.version = version_[g];
    return edges.nodes;
  }

  // Calls fn(unit) for each unit that unit u has an edge to (`forward`)
  // or from (repeats allowed).
  template <typename Fn>
  void unit_edges(int u, bool forward, Fn&& fn) const {
    if (u < count_) {
      node_edges(u, forward, [&](int n) { fn(unit_of(n)); });
    } else {
      for (int n : outside(u - count_, forward)) fn(unit_of(n));
    }
  }

  // The units placed between x and a later unit y that x reaches
  // (`after` true) or that reach y (`after` false): whichever search
  // finished first (Note [Kernel order kept topological]).
  struct Region {
    std::vector<int> units;
    bool after = true;
  };

  // Whether unit x may join the later unit y (Note [Kernel order kept
  // topological]): every unit on a path from x to y through other units
  // is a node in no group that may join a kernel, and `between` (ascending
  // node ids) is given; with no `between`, no such unit may exist.
  // `region` gets what reorder() needs.
  bool path_free(int x, int y, std::vector<int>* between, Region* region) const {
    const int lo = place_[x], hi = place_[y];
    const int stamp = ++stamp_;
    // The two searches run in step; the first to finish bounds the other.
    std::vector<int> fwd, back, fwd_stack, back_stack;
    auto visit_fwd = [&](int v) {
      if (v == x || v == y || place_[v] > hi || fwd_mark_[v] == stamp) return;
      fwd_mark_[v] = stamp;
      fwd.push_back(v);
      fwd_stack.push_back(v);
    };
    auto visit_back = [&](int v) {
      if (v == x || v == y || place_[v] < lo || back_mark_[v] == stamp) return;
      back_mark_[v] = stamp;
      back.push_back(v);
      back_stack.push_back(v);
    };
    // A producer read only by the unit it joins (most are) needs no
    // search back from a large group.
    unit_edges(x, true, visit_fwd);
    if (!fwd.empty()) unit_edges(y, false, visit_back);
    while (!fwd_stack.empty() && !back_stack.empty()) {
      const int u = fwd_stack.back();
      fwd_stack.pop_back();
      unit_edges(u, true, visit_fwd);
      const int w = back_stack.back();
      back_stack.pop_back();
      unit_edges(w, false, visit_back);
    }
    region->after = fwd_stack.empty();
    region->units = region->after ? std::move(fwd) : std::move(back);
    if (region->units.empty()) return true;
    // The units on a path: the other search, within the finished one's.
    const std::vector<int>& within = region->after ? fwd_mark_ : back_mark_;
    std::vector<int> on_path, stack;
    auto visit = [&](int v) {
      if (within[v] != stamp || path_mark_[v] == stamp) return;
      path_mark_[v] = stamp;
      on_path.push_back(v);
      stack.push_back(v);
    };
    // Back from y within what x reaches, or forward from x within what reaches y.
    const bool forward = !region->after;
    unit_edges(forward ? x : y, forward, visit);
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      unit_edges(u, forward, visit);
    }
    if (on_path.empty()) return true;
    if (between == nullptr) return false;
    for (int u : on_path) {
      if (u >= count_ || !(is_compute(graph_.node(u)) || joins_readers(graph_, graph_.node(u)))) return false;
      between->push_back(u);
    }
    std::sort(between->begin(), between->end());
    return true;
  }

  // After x, y and the nodes `joined` became unit `kept`: orders the
  // places from x's to y's anew (Note [Kernel order kept topological]):
  // what x reaches there after the unit, the rest before it; or what
  // reaches y before the unit, the rest after it.
  void reorder(int x, int y, const std::vector<int>& joined, const Region& region, int kept) {
    const int lo = place_[x], hi = place_[y];
    for (int u : {x, y}) place_[u] = -1;
    for (int n : joined) place_[n] = -1;
    const int stamp = ++stamp_;
    for (int u : region.units) path_mark_[u] = stamp;
    std::vector<int> head, tail;
    for (int p = lo; p <= hi; ++p) {
      const int u = order_[p];
      if (u < 0 || place_[u] < 0) continue;
      ((path_mark_[u] == stamp) == region.after ? tail : head).push_back(u);
    }
    int p = lo;
    auto put = [&](int u) {
      order_[p] = u;
      place_[u] = p++;
    };
    for (int u : head) put(u);
    put(kept);
    for (int u : tail) put(u);
    while (p <= hi) order_[p++] = -1;
  }

  const PrimGraph& graph_;
  int count_;
  std::vector<std::vector<int>> users_;
  std::vector<int> group_of_;
  std::set<int> outputs_;
  std::vector<std::vector<int>> members_;
  std::vector<int> also_joined_;
  // Extern orderings: the nodes that must run after / before each node.
  std::vector<std::vector<int>> after_, before_;
  std::vector<std::vector<int>> reads_of_;  // node_reads per node, computed once
  // Note [Kernel order kept topological]: the unit at each place (-1: a
  // hole), each unit's place (-1: merged into another); a node n is unit
  // n, group g unit count_ + g.
  std::vector<int> order_, place_;
  std::vector<int> version_;  // per group, bumped when its members change
  mutable std::vector<Edges> successors_, predecessors_;  // outside(), per group
  // path_free(): the stamp of the call whose searches reached a unit.
  mutable std::vector<int> fwd_mark_, back_mark_, path_mark_;
  mutable int stamp_ = 0;
};

}  // namespace


std::vector<KernelGroup> schedule_kernels(const PrimGraph& graph) { return Scheduler(graph).run(); }

}  // namespace kiln::inductor
