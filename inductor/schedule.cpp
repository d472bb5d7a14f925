#include "inductor/schedule.h"

#include <algorithm>
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
// acyclic (x.sum(0) and x.amax(0) read x once); so do groups over the same
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
    group_of_[root] = g;
    if (!lowerable(g)) {
      members_[g].clear();
      group_of_[root] = -1;
      return;
    }
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
        if (share && try_merge(a, b)) {
          read[a] = reads(a);
          read[b].clear();
          space = -1;
        }
      }
    }
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
    const size_t before = members_[a].size();
    for (int n : members_[b]) {
      group_of_[n] = a;
      members_[a].push_back(n);
    }
    std::vector<int> between;
    if (sandwiched(a, &between) && between.empty() && lowerable(a)) {
      members_[b].clear();
      return true;
    }
    for (size_t i = before; i < members_[a].size(); ++i) group_of_[members_[a][i]] = b;
    members_[a].resize(before);
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
    group_of_[producer] = g;
    members_[g].push_back(producer);
    std::vector<int> between;
    if (!sandwiched(g, &between)) {
      group_of_[producer] = -1;
      members_[g].pop_back();
      return false;
    }
    for (int n : between) {
      group_of_[n] = g;
      members_[g].push_back(n);
    }
    also_joined_ = between;
    if (!lowerable(g)) {
      also_joined_.clear();
      for (size_t i = 0; i <= between.size(); ++i) {
        group_of_[members_[g].back()] = -1;
        members_[g].pop_back();
      }
      return false;
    }
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

  // The index window [lo, hi] holding every node on a path that leaves
  // group g and comes back into it. Edges (data and extern orderings) run
  // from lower node indices to higher ones, so such a path stays between
  // g's first and last member, except where it enters another group,
  // which it enters whole: a group overlapping the window widens it to
  // its own first and last member, until none does. That includes a group
  // with no member inside the window but members on both sides of it: a
  // path can leave past the window into it and come back through its
  // earlier members (hf-mobilebert's backward: a group of nodes 293..412
  // around one of 376..381 made two kernels wait on each other). A node
  // past the window then reaches only nodes and whole groups past it, so
  // never g.
  std::pair<int, int> window(int g) const {
    int lo = *std::min_element(members_[g].begin(), members_[g].end());
    int hi = *std::max_element(members_[g].begin(), members_[g].end());
    // Groups already spanned, marked with this call's stamp (no set:
    // this runs for every join the scheduler tries).
    if (spanned_.size() < members_.size()) spanned_.resize(members_.size(), 0);
    const int stamp = ++stamp_;
    spanned_[g] = stamp;
    for (int scanned_lo = lo, scanned_hi = lo - 1;;) {
      // Scan the part of [lo, hi] not scanned yet (it only grows).
      bool widened = false;
      auto scan = [&](int from, int to) {
        for (int n = from; n <= to; ++n) {
          const int h = group_of_[n];
          if (h < 0 || spanned_[h] == stamp) continue;
          spanned_[h] = stamp;
          for (int m : members_[h]) {
            if (m < lo) lo = m, widened = true;
            if (m > hi) hi = m, widened = true;
          }
        }
      };
      const int old_lo = scanned_lo, old_hi = scanned_hi;
      scanned_lo = lo;
      scanned_hi = hi;
      if (old_hi < old_lo) {
        scan(lo, hi);
      } else {
        scan(lo, old_lo - 1);
        scan(old_hi + 1, hi);
      }
      // A group not spanned yet has no member in the scanned range; it
      // straddles the window when it has members on both sides.
      for (size_t h = 0; h < members_.size(); ++h) {
        if (spanned_[h] == stamp || members_[h].empty()) continue;
        bool below = false, above = false;
        for (int m : members_[h]) {
          below = below || m < lo;
          above = above || m > hi;
        }
        if (!below || !above) continue;
        spanned_[h] = stamp;
        for (int m : members_[h]) {
          lo = std::min(lo, m);
          hi = std::max(hi, m);
        }
        widened = true;
      }
      if (!widened) return {lo, hi};
    }
  }

  // The nodes on paths that leave group g and come back into it (Note
  // [Kernel scheduling]): reachable from g and reaching g, where entering
  // another group enters all of it. False when one of them cannot join
  // (it is in another group, or is no elementwise or reduction node).
  // Searched within window(g) only: a search over the whole graph made
  // scheduling quadratic (timm ResNet-50's backward on the H100 machine:
  // 2.7 s of its first training call).
  bool sandwiched(int g, std::vector<int>* between) const {
    const auto [lo, hi] = window(g);
    const int width = hi - lo + 1;
    auto reach = [&](bool forward) {
      std::vector<bool> seen(width, false);
      std::vector<int> stack;
      auto push = [&](int n) {
        if (n >= lo && n <= hi) stack.push_back(n);
      };
      // Data edges and extern orderings (Note [Extern writes]) alike.
      auto neighbours = [&](int n) {
        if (forward) {
          for (int value : graph_.node(n).outputs) {
            for (int user : users_[value]) push(user);
          }
          for (int m : after_[n]) push(m);
        } else {
          for (int value : reads_of_[n]) {
            if (graph_.value(value).node >= 0) push(graph_.value(value).node);
          }
          for (int m : before_[n]) push(m);
        }
      };
      for (int n : members_[g]) neighbours(n);
      while (!stack.empty()) {
        const int u = stack.back();
        stack.pop_back();
        if (group_of_[u] == g || seen[u - lo]) continue;
        if (group_of_[u] >= 0) {
          for (int w : members_[group_of_[u]]) {
            seen[w - lo] = true;
            neighbours(w);
          }
        } else {
          seen[u - lo] = true;
          neighbours(u);
        }
      }
      return seen;
    };
    const std::vector<bool> from = reach(true), to = reach(false);
    for (int n = lo; n <= hi; ++n) {
      if (!from[n - lo] || !to[n - lo]) continue;
      if (group_of_[n] >= 0 || !(is_compute(graph_.node(n)) || joins_readers(graph_, graph_.node(n)))) return false;
      between->push_back(n);
    }
    return true;
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
  mutable std::vector<int> spanned_;         // window(): per group, the stamp of the call that spanned it
  mutable int stamp_ = 0;
};

}  // namespace


std::vector<KernelGroup> schedule_kernels(const PrimGraph& graph) { return Scheduler(graph).run(); }

}  // namespace kiln::inductor
