#include "prims/view_writes.h"

#include <algorithm>
#include <functional>

#include "prims/decompose_call.h"
#include "prims/extern_writes.h"
#include "prims/layout.h"
#include "prims/view_meta.h"

namespace kiln::prims {

// Note [Writes through views]
// Note [In-place ops on intermediates] makes `y.op_(...)` and `y[i] = v`
// functional when y shares its storage with nothing. Library code also
// writes through views of a tensor it made: Longformer builds its banded
// attention scores in a fresh tensor s, then masks the band's corners with
// `t = s.view(...).transpose(2, 1); t[:, :4, :, :5] = ...` and goes on with
// s. As an extern the write sat on the gradient path, so kiln's autograd
// refused the whole encoder and torch's autograd ran it, unfused. Such a
// write is functional too, as torch's functionalization makes it: the
// written view's new value is carried back through the views between it and
// s, each undone (a permute by its inverse, a view, reshape, squeeze or
// unsqueeze by a reshape to its input's sizes, a slice by a cat of the new
// block between the input's slices around it: `v[0] *= 2` reads and writes
// v through a select), giving s a new value; every other view of s that the
// program still names is made again from it by the same view ops. It
// applies only where the views between s and the written one are of those
// kinds (slices of step 1), s is no graph input nor a torch call's result,
// and nothing sharing s's storage is an as_strided view or read by a torch
// call (which may have kept it): there the extern stays.
// A reshape that had to copy is no view (torch's reshape copies where the
// strides cannot be viewed): writes into its result stay there.

namespace {

bool undoable(const PrimNode& node) {
  if (node.prim == Prim::Slice) return node.attrs.step == 1;
  return node.prim == Prim::View || node.prim == Prim::Reshape || node.prim == Prim::Permute ||
         node.prim == Prim::Squeeze || node.prim == Prim::Unsqueeze;
}

// The input a view node reads.
int view_input(const PrimNode& node) {
  for (const PrimArg& arg : node.args) {
    if (arg.is_value()) return arg.value;
  }
  return -1;
}

// True when `value` shares its input's storage: a view prim, but not a
// reshape that had to copy (writes into the copy do not reach the input,
// as in torch).
bool is_view(const PrimGraph& graph, int value) {
  const PrimValue& v = graph.value(value);
  if (v.node < 0) return false;
  const PrimNode& node = graph.node(v.node);
  if (prim_info(node.prim).family != Family::View) return false;
  if (node.prim != Prim::Reshape) return true;
  const int input = view_input(node);
  return input >= 0 && reshape_meta(graph.value(input).meta, node.attrs.sizes).is_view;
}

// `updated`, a new value of view node `view`'s result, as a new value of
// its input `input` (the value before the write: a slice's neighbours).
int undo_view(PrimBuilder& b, const PrimNode& view, int updated, int input) {
  const std::vector<int64_t> sizes = b.meta(input).sizes;
  if (view.prim == Prim::Slice) {
    const int64_t dim = view.attrs.dim, size = sizes[dim];
    auto bound = [&](std::optional<int64_t> given, int64_t missing, int64_t low) {
      int64_t at = given.value_or(missing);
      if (at < 0) at += size;
      return std::min(std::max(at, low), size);
    };
    const int64_t start = bound(view.attrs.start, 0, 0);
    const int64_t end = bound(view.attrs.end, size, start);
    std::vector<int> pieces;
    if (start > 0) pieces.push_back(b.slice(input, dim, 0, start));
    pieces.push_back(updated);
    if (end < size) pieces.push_back(b.slice(input, dim, end, size));
    return pieces.size() == 1 ? b.reshape(updated, sizes) : b.cat(pieces, dim);
  }
  if (view.prim == Prim::Permute) {
    std::vector<int64_t> inverse(view.attrs.dims.size());
    for (size_t k = 0; k < inverse.size(); ++k) inverse[view.attrs.dims[k]] = static_cast<int64_t>(k);
    return b.permute(updated, inverse);
  }
  return b.reshape(updated, sizes);
}

}  // namespace

std::optional<ViewWrite> plan_view_write(const PrimGraph& graph, int written, std::string* why) {
  ViewWrite plan;
  int v = written;
  while (is_view(graph, v)) {
    const PrimNode& node = graph.node(graph.value(v).node);
    if (!undoable(node)) {
      *why = std::string("a write through a view by ") + prim_info(node.prim).name;
      return std::nullopt;
    }
    plan.chain.insert(plan.chain.begin(), v);
    v = view_input(node);
    if (v < 0) {
      *why = "a view of no tensor";
      return std::nullopt;
    }
  }
  plan.base = v;
  const PrimValue& base = graph.value(v);
  if (base.node < 0) {
    *why = "a write into a graph input";
    return std::nullopt;
  }
  if (graph.node(base.node).prim == Prim::Extern) {
    *why = "a write into a torch call's result";
    return std::nullopt;
  }
  // Dense, so the new base can take its layout and the views' strides hold.
  if (!is_non_overlapping_and_dense(base.meta.sizes, base.meta.strides)) {
    *why = "a write into a tensor that is not dense";
    return std::nullopt;
  }
  const std::vector<int> classes = alias_class_of(graph);
  for (size_t m = 0; m < classes.size(); ++m) {
    if (classes[m] != classes[v]) continue;
    const int member = static_cast<int>(m);
    if (member != v && !is_view(graph, member)) {
      *why = "a value sharing the storage that is no view of it";
      return std::nullopt;
    }
    if (member != v && graph.node(graph.value(member).node).prim == Prim::AsStrided) {
      *why = "an as_strided view of the written storage";
      return std::nullopt;
    }
    plan.members.insert(member);
  }
  for (const PrimNode& node : graph.nodes()) {
    if (node.prim != Prim::Extern) continue;
    for (int read : node_reads(node)) {
      if (plan.members.count(read)) {
        *why = "a torch call reading the written storage";
        return std::nullopt;
      }
    }
  }
  return plan;
}

std::map<int, int> carry_view_write(PrimBuilder& b, const ViewWrite& plan, int updated, const std::set<int>& wanted) {
  int current = updated;
  for (size_t k = plan.chain.size(); k-- > 0;) {
    const PrimNode& view = b.graph().node(b.graph().value(plan.chain[k]).node);
    current = undo_view(b, view, current, k == 0 ? plan.base : plan.chain[k - 1]);
  }
  // The new base in the old one's layout, so that the views made again
  // from it have their traced strides.
  const graph::TensorMeta base_meta = b.meta(plan.base);
  int base = in_traced_layout(b, current, base_meta);
  // A base of its own, not a view of the written view's new value: the
  // views made from it are then views of it, as the program's are of its
  // base (an output that views another output stays its view).
  if (is_view(b.graph(), base)) base = b.clone(base, MemoryFormat::Preserve);
  std::map<int, int> made = {{plan.base, base}};
  std::function<int(int)> remake = [&](int value) {
    if (auto it = made.find(value); it != made.end()) return it->second;
    const int input = remake(view_input(b.graph().node(b.graph().value(value).node)));
    // Looked up again: remaking the input added nodes.
    const int again = b.view_like(b.graph().node(b.graph().value(value).node), input);
    made[value] = again;
    return again;
  };
  std::map<int, int> out;
  for (int value : wanted) {
    if (plan.members.count(value)) out[value] = remake(value);
  }
  return out;
}

}  // namespace kiln::prims
