#include "prims/channels_last.h"

#include <Python.h>

#include <utility>
#include <vector>

#include "prims/extern_writes.h"
#include "prims/layout.h"
#include "prims/prim_builder.h"
#include "prims/prim_error.h"
#include "prims/subgraph.h"
#include "prims/view_meta.h"

namespace kiln::prims {

// Note [Channels-last convolutions]
// cuDNN's tensor-core convolutions work on NHWC tensors: handed NCHW ones,
// each call transposes its input and weight in and its result out (timm
// ResNet-50 inference on the H100: 67 such transposes a step, 0.6 ms of
// 2.7). torch.compile lays the whole net out channels-last instead (its
// layout optimization); so does this pass, on the prim graph before
// autograd and kernels. Each 2-d convolution's input and weight get a
// channels-last clone where they do not suggest channels-last already (the
// weight's clone fuses with its autocast cast, the net's input's with its
// own), the convolution's result is channels-last (Note [Meta layouts]:
// torch's CPU and CUDA convolutions give channels-last operands a
// channels-last result), and every later value's strides are re-derived by
// its prim's meta rule, so the kernels between convolutions read and write
// channels-last and the next convolution's input needs no copy.
// Where the traced layout must hold, a clone restores it: the graph's
// outputs (the caller sees eager's strides) and the tensors other torch
// calls read (their result metas were traced for those layouts). Torch's
// 2-d poolings are the exception: their kernels follow the input's memory
// format (checked on CPU for each; CUDA's do the same), so a channels-last
// map goes in as it is and their 4-d results are channels-last, where a
// ResNet stem's max pool used to cost a copy back and one forth. A clone whose traced result had another layout than
// its input (a decomposition's explicit contiguous copy) keeps making that
// layout, and is dropped where its input has that layout now (ConvNeXt's
// permuted channels-last maps are contiguous rows already).
// Refused, the graph keeping its layouts: a grouped convolution with more
// than one input channel per group (torch.compile's rule: channels-last
// slows those by up to an order of magnitude, where depthwise ones gain),
// float64 convolutions (cuDNN keeps them contiguous), a view the new
// strides cannot express (x.view(n, -1) of a channels-last map) or a
// reshape that viewed and would now copy (a group norm's grouping of
// channels: diffusers' UNet), as_strided
// or index_put of a changed value, and a call writing into one.
// The backward follows: a clone's gradient is its output's, so the
// backward's convolutions see channels-last gradients too, and extern
// gradients come back in their inputs' layouts (Note [Extern gradients]).

namespace {

using graph::TensorMeta;

bool is_conv2d(const PrimNode& node) {
  return node.prim == Prim::Extern && node.attrs.target_name == "F.conv2d";
}

// Torch's 2-d poolings, whose CPU and CUDA kernels follow their input's
// memory format: a channels-last map in, channels-last results out (a max
// pool's indices too), so the plan hands them the map as it is.
bool is_pool2d(const PrimNode& node) {
  if (node.prim != Prim::Extern) return false;
  const std::string& name = node.attrs.target_name;
  return name == "F.max_pool2d" || name == "F.avg_pool2d" || name == "F.adaptive_max_pool2d" ||
         name == "F.adaptive_avg_pool2d";
}

// The value an extern argument names, or -1.
int arg_value(const std::vector<graph::Arg>& args, size_t i) {
  return i < args.size() && args[i].kind == graph::Arg::Kind::Node ? args[i].node : -1;
}

// A convolution's `groups` (its 7th argument or keyword; 1 when absent), or
// -1 when it is not a constant int.
int64_t conv_groups(const PrimAttrs& attrs) {
  const graph::Arg* groups = attrs.extern_args.size() > 6 ? &attrs.extern_args[6] : nullptr;
  for (const auto& [name, arg] : attrs.extern_kwargs) {
    if (name == "groups") groups = &arg;
  }
  if (groups == nullptr) return 1;
  if (groups->kind != graph::Arg::Kind::Constant || !PyLong_Check(groups->constant)) return -1;
  return PyLong_AsLongLong(groups->constant);
}

// `a` has `strides` where they address anything (set_unit_dim_strides sets the rest).
bool same_layout(const TensorMeta& a, const std::vector<int64_t>& strides) {
  return strides_agree(a.sizes, a.strides, strides);
}

bool suggests_channels_last(const TensorMeta& m) {
  return suggest_memory_format(m.sizes, m.strides) == MemoryFormat::ChannelsLast;
}

// The plan's work: the new graph, the old-to-new value map, and the
// refusal that ends it.
class Planner {
 public:
  explicit Planner(const PrimGraph& graph) : old_(graph), b_(plan_.graph) {}

  std::optional<ChannelsLastPlan> run(std::string* why) {
    int changed = 0;
    for (const PrimNode& node : old_.nodes()) {
      if (!is_conv2d(node)) continue;
      const std::string refusal = conv_refusal(node);
      if (!refusal.empty()) {
        *why = refusal;
        return std::nullopt;
      }
      const TensorMeta& x = old_.value(arg_value(node.attrs.extern_args, 0)).meta;
      const TensorMeta& w = old_.value(arg_value(node.attrs.extern_args, 1)).meta;
      if (!suggests_channels_last(x) || !suggests_channels_last(w)) ++changed;
    }
    if (changed == 0) {
      *why = "no 2-d convolution with an operand to make channels-last";
      return std::nullopt;
    }
    escaping_.assign(old_.values().size(), false);
    for (int out : old_.outputs()) escaping_[out] = true;
    for (const PrimNode& node : old_.nodes()) {
      if (node.prim != Prim::Extern) continue;
      for (int read : node_reads(node)) escaping_[read] = true;
    }
    map_ = copy_inputs(plan_.graph, old_);
    try {
      for (const PrimNode& node : old_.nodes()) {
        if (is_conv2d(node)) {
          convolution(node);
        } else if (is_pool2d(node) && pools_channels_last(node)) {
          pool(node);
        } else if (node.prim == Prim::Extern) {
          other_call(node);
        } else if (!reads_changed(node)) {
          copy_node_mapped(plan_.graph, old_, node, map_);
        } else {
          rederive(node);
        }
      }
      std::vector<int> outputs;
      for (int id : old_.outputs()) outputs.push_back(restored(id));
      plan_.graph.set_outputs(std::move(outputs));
    } catch (const PrimError& e) {
      *why = e.what();
      return std::nullopt;
    }
    return std::move(plan_);
  }

 private:
  // Why the plan cannot take this convolution, or "".
  std::string conv_refusal(const PrimNode& node) const {
    const int x = arg_value(node.attrs.extern_args, 0), w = arg_value(node.attrs.extern_args, 1);
    if (x < 0 || w < 0) return "a convolution whose input or weight is not a graph value";
    const TensorMeta &xm = old_.value(x).meta, &wm = old_.value(w).meta;
    if (xm.sizes.size() != 4 || wm.sizes.size() != 4) return "an unbatched convolution";
    if (xm.dtype == graph::DType::Float64) return "a float64 convolution";
    const int64_t groups = conv_groups(node.attrs);
    if (groups < 0) return "a convolution whose groups are not a constant";
    if (groups > 1 && wm.sizes[1] > 1) return "a grouped convolution with several input channels per group";
    return "";
  }

  // True when the new graph's value for `id` has other strides than the traced one.
  bool changed(int id) const { return !same_layout(plan_.graph.value(map_[id]).meta, old_.value(id).meta.strides); }

  bool reads_changed(const PrimNode& node) const {
    for (int id : node_reads(node)) {
      if (changed(id)) return true;
    }
    return false;
  }

  // The new value for `id` in the traced layout: a clone where it changed.
  int restored(int id) {
    const TensorMeta& want = old_.value(id).meta;
    const int now = map_[id];
    if (!changed(id)) {
      if (plan_.graph.value(now).meta.strides != want.strides) plan_.graph.set_unit_dim_strides(now, want.strides);
      return now;
    }
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast, MemoryFormat::Preserve}) {
      if (format == MemoryFormat::ChannelsLast && want.sizes.size() != 4) continue;
      const std::vector<int64_t> strides =
          format == MemoryFormat::Preserve
              ? preserved_strides(want.sizes, plan_.graph.value(now).meta.strides)
              : strides_for(want.sizes, format);
      if (!same_layout(want, strides)) continue;
      const int copy = b_.clone(now, format);
      plan_.graph.set_unit_dim_strides(copy, want.strides);
      if (old_.value(id).grad_stopped) plan_.graph.stop_grad(copy);
      ++plan_.copies;
      return copy;
    }
    throw PrimError("a value of layout " + graph::format_tensor_meta(want) + " no clone can restore");
  }

  // A value's new id as the convolution reads it: channels-last.
  int channels_last(int id) {
    const int now = map_[id];
    if (suggests_channels_last(plan_.graph.value(now).meta)) return now;
    const int copy = b_.clone(now, MemoryFormat::ChannelsLast);
    if (old_.value(id).grad_stopped) plan_.graph.stop_grad(copy);
    ++plan_.copies;
    return copy;
  }

  void convolution(const PrimNode& node) {
    std::vector<int> reading = map_;
    const int x = arg_value(node.attrs.extern_args, 0), w = arg_value(node.attrs.extern_args, 1);
    reading[x] = channels_last(x);
    reading[w] = channels_last(w);
    std::vector<TensorMeta> metas;
    for (int id : node.outputs) {
      TensorMeta meta = old_.value(id).meta;
      meta.strides = strides_for(meta.sizes, MemoryFormat::ChannelsLast);
      metas.push_back(std::move(meta));
    }
    ++plan_.convolutions;
    add_extern(node, reading, metas);
  }

  // Whether a pooling reads a map the plan made channels-last (and writes
  // none of its arguments).
  bool pools_channels_last(const PrimNode& node) const {
    const int x = arg_value(node.attrs.extern_args, 0);
    return x >= 0 && old_.value(x).meta.sizes.size() == 4 && changed(x) &&
           suggests_channels_last(plan_.graph.value(map_[x]).meta) && !extern_writes_arguments(node.attrs);
  }

  // A pooling of a channels-last map: its 4-d results channels-last too;
  // any other changed value it reads gets its traced layout back.
  void pool(const PrimNode& node) {
    std::vector<int> reading = map_;
    const int x = arg_value(node.attrs.extern_args, 0);
    for (int id : node_reads(node)) {
      if (id != x && changed(id)) reading[id] = restored(id);
    }
    std::vector<TensorMeta> metas;
    for (int id : node.outputs) {
      TensorMeta meta = old_.value(id).meta;
      if (meta.sizes.size() == 4) meta.strides = strides_for(meta.sizes, MemoryFormat::ChannelsLast);
      metas.push_back(std::move(meta));
    }
    add_extern(node, reading, metas);
  }

  // Another torch call reads its arguments in their traced layouts, so its
  // traced result metas hold.
  void other_call(const PrimNode& node) {
    std::vector<int> reading = map_;
    for (int id : node_reads(node)) {
      if (!changed(id)) continue;
      if (extern_writes_arguments(node.attrs)) {
        throw PrimError(node.attrs.target_name + " writes into a value whose layout would change");
      }
      reading[id] = restored(id);
    }
    std::vector<TensorMeta> metas;
    for (int id : node.outputs) metas.push_back(old_.value(id).meta);
    add_extern(node, reading, metas);
  }

  void add_extern(const PrimNode& node, const std::vector<int>& reading, const std::vector<TensorMeta>& metas) {
    PrimAttrs attrs = node.attrs;
    auto remap = [&](auto& self, graph::Arg& a) -> void {
      if (a.kind == graph::Arg::Kind::Node) a.node = reading[a.node];
      for (graph::Arg& item : a.items) self(self, item);
    };
    for (graph::Arg& a : attrs.extern_args) remap(remap, a);
    for (auto& kw : attrs.extern_kwargs) remap(remap, kw.second);
    const std::vector<int> made = plan_.graph.add_node(Prim::Extern, {}, std::move(attrs), metas);
    for (size_t i = 0; i < made.size(); ++i) {
      if (old_.value(node.outputs[i]).grad_stopped) plan_.graph.stop_grad(made[i]);
      map_[node.outputs[i]] = made[i];
    }
  }

  // A prim reading a value whose layout changed: its outputs' strides from
  // its meta rule.
  void rederive(const PrimNode& node) {
    std::vector<PrimArg> args = node.args;
    for (PrimArg& arg : args) {
      if (arg.is_value()) arg.value = map_[arg.value];
    }
    auto v = [&](size_t i) { return args.at(i).value; };
    const PrimAttrs& a = node.attrs;
    std::vector<int> made;
    switch (prim_info(node.prim).family) {
      case Family::Unary:
      case Family::Binary:
      case Family::Ternary:
        made = {b_.pointwise(node.prim, args)};
        break;
      case Family::Convert:
        if (node.prim == Prim::ConvertElementType) {
          made = {b_.convert(v(0), *a.dtype)};
        } else {
          made = {clone(node, v(0))};
        }
        break;
      case Family::Reduction:
        if (node.prim == Prim::VarMean) {
          const auto [var, mean] = b_.var_mean(v(0), a.dims, a.correction, a.keepdim);
          made = {var, mean};
        } else {
          made = {b_.reduce(node.prim, v(0), a.dims, a.keepdim, a.dtype)};
        }
        break;
      case Family::View:
        made = {view(node, v(0))};
        break;
      case Family::Cat: {
        std::vector<int> pieces;
        for (const PrimArg& arg : args) pieces.push_back(arg.value);
        made = {b_.cat(pieces, a.dim)};
        break;
      }
      case Family::Matmul:
        made = {b_.matmul(v(0), v(1))};
        break;
      case Family::Index:
        if (node.prim == Prim::Gather) {
          made = {b_.gather(v(0), a.dim, v(1))};
        } else if (node.prim == Prim::IndexSelect) {
          made = {b_.index_select(v(0), a.dim, v(1))};
        } else if (node.prim == Prim::Scatter) {
          made = {b_.scatter(v(0), a.dim, v(1), args.at(2), a.accumulate)};
        } else {
          throw PrimError(std::string(prim_name(node.prim)) + " of a value whose layout would change");
        }
        break;
      case Family::Random:
        if (node.prim != Prim::Bernoulli) throw PrimError("a random draw reading a changed value");
        made = {b_.bernoulli(v(0))};
        break;
      default:
        throw PrimError(std::string(prim_name(node.prim)) + " of a value whose layout would change");
    }
    for (size_t i = 0; i < made.size(); ++i) {
      const TensorMeta& was = old_.value(node.outputs[i]).meta;
      const TensorMeta& now = plan_.graph.value(made[i]).meta;
      if (now.sizes != was.sizes || now.dtype != was.dtype) {
        throw PrimError(std::string(prim_name(node.prim)) + " re-derived as " + graph::format_tensor_meta(now) +
                        ", traced as " + graph::format_tensor_meta(was));
      }
      if (old_.value(node.outputs[i]).grad_stopped) plan_.graph.stop_grad(made[i]);
      map_[node.outputs[i]] = made[i];
    }
  }

  // A clone: in its input's layout where it was traced so (Preserve),
  // otherwise in the layout it was traced with; none where its input has
  // that layout already and nothing could tell the two apart (no graph
  // output, no call that may write).
  int clone(const PrimNode& node, int input) {
    const int x = node.args[0].value;
    const TensorMeta& was = old_.value(node.outputs[0]).meta;
    if (same_layout(was, preserved_strides(old_.value(x).meta.sizes, old_.value(x).meta.strides))) {
      return b_.clone(input, MemoryFormat::Preserve);
    }
    if (same_layout(plan_.graph.value(input).meta, was.strides) && !escaping_[node.outputs[0]] &&
        plan_.graph.value(input).grad_stopped == old_.value(node.outputs[0]).grad_stopped) {
      return input;
    }
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      if (format == MemoryFormat::ChannelsLast && was.sizes.size() != 4) continue;
      if (same_layout(was, strides_for(was.sizes, format))) return b_.clone(input, format);
    }
    throw PrimError("a clone to layout " + graph::format_tensor_meta(was) + " of a value whose layout would change");
  }

  int view(const PrimNode& node, int input) {
    if (prim_info(node.prim).family != Family::View || node.prim == Prim::AsStrided) {
      throw PrimError(std::string(prim_name(node.prim)) + " of a value whose layout would change");
    }
    // A reshape that viewed its traced input but would copy the new one
    // (a group norm's [N, G, C/G * H * W] of a channels-last map): a copy
    // the traced graph never made, in nets no measurement covers.
    if (node.prim == Prim::Reshape && view_strides(old_.value(node.args[0].value).meta, node.attrs.sizes) &&
        !view_strides(plan_.graph.value(input).meta, node.attrs.sizes)) {
      throw PrimError("a reshape to " + format_shape(node.attrs.sizes) + " that viewed its input would copy it");
    }
    return b_.view_like(node, input);
  }

  const PrimGraph& old_;
  ChannelsLastPlan plan_;
  PrimBuilder b_;
  std::vector<int> map_;
  // Per traced value: a graph output, or read by a torch call (which may
  // write into it or keep it), so a copy of it cannot be dropped.
  std::vector<bool> escaping_;
};

}  // namespace

const char* conv_layout_name(ConvLayout layout) {
  switch (layout) {
    case ConvLayout::Auto: return "auto";
    case ConvLayout::ChannelsLast: return "channels_last";
    case ConvLayout::Keep: return "keep";
  }
  return "auto";
}

std::optional<ConvLayout> conv_layout_from_name(const std::string& name) {
  for (ConvLayout layout : {ConvLayout::Auto, ConvLayout::ChannelsLast, ConvLayout::Keep}) {
    if (name == conv_layout_name(layout)) return layout;
  }
  return std::nullopt;
}

std::optional<ChannelsLastPlan> plan_channels_last(const PrimGraph& graph, std::string* why) {
  return Planner(graph).run(why);
}

}  // namespace kiln::prims
