// The prim-level graph: what decompositions produce from a traced graph and
// what autograd and code generation consume. SSA values (tensors, each with
// its TensorMeta) are made by graph inputs or by nodes applying one prim;
// nodes are kept in execution order. The text form (format_prim_graph) is
// the contract for logs and tests.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor_meta.h"
#include "prims/prim.h"
#include "prims/type_promotion.h"

namespace kiln::prims {

// A Python scalar constant: an operand of an elementwise prim, or the value
// of a factory.
struct Scalar {
  ScalarKind kind = ScalarKind::Float;
  double real = 0;    // Float, Complex (real part)
  double imag = 0;    // Complex
  int64_t integer = 0;  // Int, Bool

  static Scalar of_bool(bool value) { return {ScalarKind::Bool, 0, 0, value ? 1 : 0}; }
  static Scalar of_int(int64_t value) { return {ScalarKind::Int, 0, 0, value}; }
  static Scalar of_float(double value) { return {ScalarKind::Float, value, 0, 0}; }
  // The value as a double (real part for complex).
  double as_double() const;
  bool operator==(const Scalar&) const = default;
};

// A node argument: a value of the graph or a scalar constant.
struct PrimArg {
  int value = -1;  // >= 0: a value id
  Scalar scalar;   // when value < 0

  static PrimArg of_value(int id) { return PrimArg{id, {}}; }
  static PrimArg of_scalar(Scalar s) { return PrimArg{-1, s}; }
  bool is_value() const { return value >= 0; }
};

// The target_name of extern calls of kiln._attention.attention (Note
// [Fused attention kernels] in decompose_nn.cpp), which the prim executor
// runs from C++.
inline constexpr char kAttentionExtern[] = "kiln._attention.attention";

// The non-tensor parameters of a node. Each prim reads the fields its
// builder in prim_builder.h names; the others keep their defaults.
struct PrimAttrs {
  std::vector<int64_t> dims;     // reductions, permute, squeeze; index_put (indexed dims)
  std::vector<int64_t> sizes;    // view, reshape, expand, as_strided, factories
  std::vector<int64_t> strides;  // as_strided
  int64_t dim = 0;               // slice, unsqueeze, cat, gather, scatter, index_select
  std::optional<int64_t> start;  // slice; iota (first value)
  std::optional<int64_t> end;    // slice
  int64_t step = 1;              // slice; iota
  int64_t offset = 0;            // as_strided storage offset
  bool keepdim = false;          // reductions
  double correction = 1;         // var_mean
  std::optional<DType> dtype;    // convert_element_type, factories, sum/prod
  Scalar value;                  // full (fill), uniform (low), normal (mean)
  Scalar value2;                 // uniform (high), normal (std)
  bool accumulate = false;       // index_put; scatter (scatter_add)
  graph::DeviceType device_type = graph::DeviceType::CPU;  // factories
  int8_t device_index = -1;                                // factories
  // Extern: the torch callable (owned), its display name, and its
  // arguments (graph::Arg node ids are value ids of this graph).
  PyObject* target = nullptr;
  std::string target_name;
  std::vector<graph::Arg> extern_args;
  std::vector<std::pair<std::string, graph::Arg>> extern_kwargs;
  // Extern: the call writes none of its arguments and returns fresh
  // tensors (Note [Extern writes] orders nothing around it).
  bool extern_pure = false;
  // Extern: its result shares storage with none of its arguments (it may
  // still write into them); Note [Fresh results] in tracer/trace_state.cpp.
  bool extern_fresh = false;

  PrimAttrs() = default;
  PrimAttrs(const PrimAttrs& other);
  PrimAttrs& operator=(const PrimAttrs& other);
  PrimAttrs(PrimAttrs&& other) noexcept;
  PrimAttrs& operator=(PrimAttrs&& other) noexcept;
  ~PrimAttrs();
};

// A tensor value: a graph input or output `index` of node `node`.
struct PrimValue {
  graph::TensorMeta meta;
  int node = -1;  // -1 for graph inputs
  int index = 0;
  // Computed where torch's grad mode was off (torch.no_grad() inside the
  // traced code): carries no gradient, whatever its inputs carry.
  bool grad_stopped = false;
  // Made inside torch.utils.checkpoint's function (the traced call's id,
  // graph::Node::checkpoint), or -1: Note [Checkpointed regions].
  int checkpoint = -1;
};

// One application of a prim.
struct PrimNode {
  Prim prim = Prim::Extern;
  std::vector<PrimArg> args;
  PrimAttrs attrs;
  std::vector<int> outputs;  // value ids, in order
};

// A prim graph. Inputs come first among the values; nodes only refer to
// values made before them.
class PrimGraph {
 public:
  // Adds an input of this metadata; returns its value id.
  int add_input(const graph::TensorMeta& meta);
  // Appends a node whose outputs have `metas`; returns their value ids.
  std::vector<int> add_node(Prim prim, std::vector<PrimArg> args, PrimAttrs attrs,
                            const std::vector<graph::TensorMeta>& metas);
  // add_node for a prim with one output; returns its value id.
  int add_node1(Prim prim, std::vector<PrimArg> args, PrimAttrs attrs,
                const graph::TensorMeta& meta);

  void set_outputs(std::vector<int> outputs) { outputs_ = std::move(outputs); }

  // Marks value `id` as computed with grad mode off (PrimValue::grad_stopped).
  void stop_grad(int id) {
    values_[id].grad_stopped = true;
    values_[id].meta.requires_grad = false;
  }

  // Marks value `id` as made inside checkpointed region `region`.
  void mark_checkpoint(int id, int region) { values_[id].checkpoint = region; }

  // Sets value `id`'s strides along its size-1 dims, which address nothing,
  // to `strides` (torch's, as Tensor.stride() reports them); the other
  // dims' strides must already agree.
  void set_unit_dim_strides(int id, const std::vector<int64_t>& strides);

  // Drops nodes from `node_count` on and the values they made (a
  // decomposition backing out of a call). Inputs are kept.
  void truncate(size_t node_count);

  const std::vector<PrimValue>& values() const { return values_; }
  const PrimValue& value(int id) const { return values_[id]; }
  const std::vector<PrimNode>& nodes() const { return nodes_; }
  const PrimNode& node(int id) const { return nodes_[id]; }
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }

  // Checks that every argument refers to an earlier value, every output id
  // exists and extern arguments name known values. Returns "" or the first
  // problem found.
  std::string verify() const;

 private:
  std::vector<PrimValue> values_;
  std::vector<PrimNode> nodes_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
};

// The graph's text form, one line per value-making statement:
//   %0 = input : f32[4, 8]
//   %2 = add(%0, 1.0) : f32[4, 8]
//   %3 = sum(%2, dims=[1], keepdim=False) : f32[4]
//   return (%3)
std::string format_prim_graph(const PrimGraph& graph);

// The text of one scalar as Python writes it ("1.0", "3", "True").
std::string format_scalar(const Scalar& scalar);

}  // namespace kiln::prims
