// Appends prims to a PrimGraph with typed calls, inferring each result's
// metadata with the prim's meta rule and storing dims in canonical form
// (wrapped to [0, ndim)). What decompositions and derivative rules write.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "prims/factory_meta.h"
#include "prims/layout.h"
#include "prims/prim_graph.h"

namespace kiln::prims {

// Every call throws PrimError (naming the prim and the problem) for input
// the prim rejects, before anything is appended.
class PrimBuilder {
 public:
  // `default_float` is torch.get_default_dtype() at trace time (the dtype
  // Python floats and int-to-float results take).
  explicit PrimBuilder(PrimGraph& graph, DType default_float = DType::Float32)
      : graph_(graph), default_float_(default_float) {}

  PrimGraph& graph() { return graph_; }
  // The metadata of a value.
  const graph::TensorMeta& meta(int value) const { return graph_.value(value).meta; }
  DType default_float() const { return default_float_; }

  // Elementwise prims (unary, binary, where) over values and scalars.
  int pointwise(Prim prim, std::vector<PrimArg> args);
  // Shorthands for pointwise.
  int unary(Prim prim, int a) { return pointwise(prim, {PrimArg::of_value(a)}); }
  int binary(Prim prim, PrimArg a, PrimArg b) { return pointwise(prim, {a, b}); }
  int where(int cond, PrimArg a, PrimArg b) { return pointwise(Prim::Where, {PrimArg::of_value(cond), a, b}); }

  // convert_element_type(a, dtype), keeping a's layout.
  int convert(int a, DType dtype);
  // clone(a) in `format`.
  int clone(int a, MemoryFormat format = MemoryFormat::Preserve);

  // sum, prod, amax, amin, argmax, argmin over `dims` (empty: all dims).
  int reduce(Prim prim, int a, std::vector<int64_t> dims, bool keepdim,
             std::optional<DType> dtype = std::nullopt);
  // var_mean(a, dims, correction, keepdim) -> (var, mean).
  std::pair<int, int> var_mean(int a, std::vector<int64_t> dims, double correction, bool keepdim);

  // Views. reshape may copy (then its result is no view, as in torch).
  int view(int a, std::vector<int64_t> sizes);
  int reshape(int a, std::vector<int64_t> sizes);
  int expand(int a, std::vector<int64_t> sizes);
  int permute(int a, std::vector<int64_t> dims);
  int slice(int a, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
            int64_t step = 1);
  int squeeze(int a, std::vector<int64_t> dims = {});
  int unsqueeze(int a, int64_t dim);
  int as_strided(int a, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                 int64_t offset = 0);
  // The view `node` makes (view, reshape, expand, permute, slice, squeeze
  // or unsqueeze, with its sizes, dims or range) of `a` instead of its input;
  // PrimError for another prim or sizes a's strides cannot view.
  int view_like(const PrimNode& node, int a);

  // cat(tensors, dim): joined along `dim`, promoted to their result type.
  int cat(const std::vector<int>& tensors, int64_t dim);
  // matmul(a, b): batched matrix product of operands of rank >= 2.
  int matmul(int a, int b);

  // gather(a, dim, index) with an int64 index.
  int gather(int a, int64_t dim, int index);
  // scatter(a, dim, index, src): a copy of a with src (a tensor of a's dtype
  // or a scalar) written where index points; `add` sums into a instead
  // (scatter_add; src must be a tensor).
  int scatter(int a, int64_t dim, int index, PrimArg src, bool add = false);
  // index_select(a, dim, index) with a 1-dim (or 0-dim) int32/int64 index.
  int index_select(int a, int64_t dim, int index);
  // index_put(a, indices, values, accumulate): indices[i] indexes dim i of a;
  // nullopt entries take the whole dim. Stored as args (a, values, present
  // indices...) with attrs.dims naming the dim of each present index.
  int index_put(int a, const std::vector<std::optional<int>>& indices, int values,
                bool accumulate);

  // full(sizes, value): `dtype`, or the value's default dtype.
  int full(std::vector<int64_t> sizes, Scalar value, std::optional<DType> dtype = std::nullopt,
           Placement where = {});
  // iota(length, start, step): start, start + step, ... as a 1-dim tensor.
  int iota(int64_t length, int64_t start, int64_t step, DType dtype, Placement where = {});
  // uniform(sizes, low, high) and normal(sizes, mean, std): fresh draws from
  // torch's default generator.
  int uniform(std::vector<int64_t> sizes, double low, double high, DType dtype,
              Placement where = {});
  int normal(std::vector<int64_t> sizes, double mean, double std, DType dtype,
             Placement where = {});
  // bernoulli(p): 0/1 draws with probabilities p, p's dtype.
  int bernoulli(int p);

  // extern: `target(*args, **kwargs)` kept as a torch call (takes a new
  // reference to target). Node refs in args are value ids of this graph;
  // `metas` are the outputs' metadata, given by the caller (one output: the
  // call's result; several: the items of the tuple it returns; none: the
  // call is kept for its effect). `pure`: the call writes none of its
  // arguments and returns fresh tensors (PrimAttrs::extern_pure); `fresh`:
  // its result aliases no argument (PrimAttrs::extern_fresh). Returns the
  // output value ids.
  std::vector<int> extern_call(PyObject* target, std::string target_name,
                               std::vector<graph::Arg> args,
                               std::vector<std::pair<std::string, graph::Arg>> kwargs,
                               const std::vector<graph::TensorMeta>& metas, bool pure = false,
                               bool fresh = false);

 private:
  // (start, step) when `index` is an iota (through 1-D reshapes) reading
  // only positions below `extent` (Note [Index ranges]).
  std::optional<std::pair<int64_t, int64_t>> index_range(int index, int64_t extent) const;

  PrimGraph& graph_;
  DType default_float_;
};

}  // namespace kiln::prims
