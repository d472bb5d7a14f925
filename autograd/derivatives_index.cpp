// Derivative rules of gather, scatter, index_select and index_put: reads
// through an index are undone by summing writes into zeros, and writes are
// undone by masking (the written positions) and reading (the values).
#include <numeric>
#include <optional>

#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"
#include "prims/common_meta.h"

namespace kiln::autograd {

using prims::Prim;

namespace {

prims::PrimArg int_arg(int64_t x) { return prims::PrimArg::of_scalar(prims::Scalar::of_int(x)); }

prims::Placement placement_of(const graph::TensorMeta& m) { return {m.device_type, m.device_index, false}; }

// `g` (the shape of scatter's index) padded with zeros up to `target`'s
// sizes: scatter reads only the index-shaped corner of its src.
int pad_to(prims::PrimBuilder& b, int g, graph::TensorMeta target) {
  for (size_t d = 0; d < target.sizes.size(); ++d) {
    const int64_t have = b.meta(g).sizes[d];
    if (have == target.sizes[d]) continue;
    std::vector<int64_t> sizes = b.meta(g).sizes;
    sizes[d] = target.sizes[d] - have;
    const int zeros = b.full(sizes, prims::Scalar::of_float(0), target.dtype, placement_of(target));
    g = b.cat({g, zeros}, static_cast<int64_t>(d));
  }
  return g;
}

// g[indices] as torch's advanced indexing reads it, with indices[k]
// indexing dim dims[k] of g (negative entries count from the end). The
// indexed dims are flattened into one and read with index_select at the
// row-major linear index; the broadcast index dims go where torch puts them
// (in place of the indexed dims when those are adjacent, else in front).
int index_read(prims::PrimBuilder& b, int g, const std::vector<int64_t>& dims,
               const std::vector<int>& indices) {
  const std::vector<int64_t> sizes = b.meta(g).sizes;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  std::vector<bool> indexed(rank, false);
  for (int64_t d : dims) indexed[d] = true;
  std::vector<int64_t> order(dims.begin(), dims.end());
  std::vector<int64_t> flat_sizes = {1};
  for (int64_t d = 0; d < rank; ++d) {
    if (indexed[d]) {
      flat_sizes[0] *= sizes[d];
    } else {
      order.push_back(d);
      flat_sizes.push_back(sizes[d]);
    }
  }
  const int flat = b.reshape(b.permute(g, order), flat_sizes);
  int linear = -1;
  int64_t stride = 1;
  for (size_t k = dims.size(); k-- > 0;) {
    const int64_t size = sizes[dims[k]];
    int i = cast_to(b, indices[k], graph::DType::Int64);
    i = b.where(b.binary(Prim::Lt, v(i), int_arg(0)), v(b.binary(Prim::Add, v(i), int_arg(size))), v(i));
    const int term = stride == 1 ? i : b.binary(Prim::Mul, v(i), int_arg(stride));
    linear = linear < 0 ? term : b.binary(Prim::Add, v(term), v(linear));
    stride *= size;
  }
  const std::vector<int64_t> index_sizes = b.meta(linear).sizes;
  const int picked = b.index_select(flat, 0, b.reshape(linear, {prims::numel(index_sizes)}));
  std::vector<int64_t> out_sizes = index_sizes;
  out_sizes.insert(out_sizes.end(), flat_sizes.begin() + 1, flat_sizes.end());
  const int read = b.reshape(picked, out_sizes);
  bool adjacent = true;
  for (size_t k = 1; k < dims.size(); ++k) adjacent = adjacent && dims[k] == dims[k - 1] + 1;
  if (!adjacent || dims[0] == 0) return read;
  // Move the index dims from the front to where the indexed dims were.
  const int64_t n_index = static_cast<int64_t>(index_sizes.size());
  const int64_t out_rank = static_cast<int64_t>(out_sizes.size());
  std::vector<int64_t> perm;
  for (int64_t d = n_index; d < n_index + dims[0]; ++d) perm.push_back(d);
  for (int64_t d = 0; d < n_index; ++d) perm.push_back(d);
  for (int64_t d = n_index + dims[0]; d < out_rank; ++d) perm.push_back(d);
  return b.permute(read, perm);
}

// Note [Gradients of few rows]
// index_select's gradient adds each read row's gradient into its row with a
// scatter_add, which adds with atomics on CUDA. Where a table of few rows
// is read many times, those atomics all land on the same few addresses and
// serialize: T5's relative position bias (32 buckets x 8 heads, read at
// 512 x 512 positions) spent 2.2 ms of a 6.4 ms training step on the H100
// in its scatter_add (torch.compile's generated atomics cost about the
// same; eager's sorting embedding_dense_backward 0.19 ms), and BERT's token
// type table (2 rows, read by every token) is the same pattern. There the
// gradient is instead a reduction: row r is the sum over the reads n of
// g[n] where index[n] == r, one compare-and-select per row and read, which
// kiln's reduction kernels run at memory speed (the reads stay in cache
// across the few rows) and which adds in a fixed order. Taken on CUDA for
// tables of at most kFewRows rows read at least kReadsPerRow times per row;
// elsewhere (and on the CPU, where scatter_add has no atomics) the
// scatter_add stays.
constexpr int64_t kFewRows = 32;
constexpr int64_t kReadsPerRow = 1024;

// Whether `index` is an iota counting n - 1 down to 0 (torch.flip's): its
// index_select is a permutation that undoes itself, so the gradient is the
// same index_select of g, not a scatter_add into zeros.
bool is_reversal(prims::PrimGraph& graph, int index, int64_t n) {
  const int node = graph.value(index).node;
  if (node < 0) return false;
  const prims::PrimNode& producer = graph.node(node);
  return producer.prim == Prim::Iota && producer.attrs.sizes == std::vector<int64_t>{n} &&
         producer.attrs.start.value_or(0) == n - 1 && producer.attrs.step == -1;
}

bool few_rows_many_reads(const graph::TensorMeta& x, const graph::TensorMeta& g, int64_t dim) {
  if (x.device_type != graph::DeviceType::CUDA) return false;
  const int64_t rows = x.sizes[dim], reads = g.sizes[dim];
  return rows <= kFewRows && reads >= kReadsPerRow * rows;
}

// The gradient of index_select(x, dim, index) of `rows` rows along `dim`
// from its output's gradient `g`: sum over the reads n of where(index[n] ==
// r, g[..., n, ...], 0) for each row r.
int summed_by_row(prims::PrimBuilder& b, int g, int index, int64_t dim, int64_t rows) {
  const graph::TensorMeta gm = b.meta(g);  // a copy: appending nodes moves the values
  const int64_t rank = static_cast<int64_t>(gm.sizes.size());
  // Shapes of rank + 1, with the rows at `dim` and the reads at dim + 1.
  std::vector<int64_t> row_shape(rank + 1, 1), read_shape(rank + 1, 1);
  row_shape[dim] = rows;
  read_shape[dim + 1] = gm.sizes[dim];
  const int row = b.reshape(b.iota(rows, 0, 1, graph::DType::Int64, placement_of(gm)), row_shape);
  const int read = b.reshape(cast_to(b, index, graph::DType::Int64), read_shape);
  const int hit = b.binary(Prim::Eq, v(row), v(read));
  const int picked = b.where(hit, v(b.unsqueeze(g, dim)), f(0));
  return b.reduce(Prim::Sum, picked, {dim + 1}, false, gm.dtype);
}

}  // namespace

std::vector<int> vjp_index(prims::PrimBuilder& b, const NodeView& view,
                           const std::vector<int>& grads, const std::vector<bool>& needs) {
  const prims::PrimNode& node = view.node;
  const prims::PrimAttrs& attrs = node.attrs;
  const std::vector<int>& in = view.inputs;
  const int g = grads[0];
  std::vector<int> out(in.size(), -1);
  auto want = [&](size_t i) { return i < in.size() && in[i] >= 0 && needs[i]; };
  const graph::TensorMeta xm = b.meta(in[0]);  // a copy: appending nodes moves the values
  switch (node.prim) {
    case Prim::Gather:
      // Each element read from x sends its gradient back, repeats summed.
      if (want(0)) out[0] = b.scatter(zeros_like(b, xm), attrs.dim, in[1], v(g), true);
      return out;
    case Prim::Scatter:
      // scatter: written positions of x are overwritten (no gradient);
      // scatter_add keeps x whole. src's gradient is g where it was written.
      if (want(0)) out[0] = attrs.accumulate ? g : b.scatter(g, attrs.dim, in[1], f(0));
      if (want(2)) out[2] = pad_to(b, b.gather(g, attrs.dim, in[1]), b.meta(in[2]));
      return out;
    case Prim::IndexSelect: {
      if (!want(0)) return out;
      if (xm.sizes.empty()) {
        out[0] = g;  // a 0-dim x has one element, read once
        return out;
      }
      // Each row read sends its gradient back, repeats summed: a scatter_add
      // of g along dim with the index broadcast over g, as torch's
      // index_select backward adds by index. index_select took no negative
      // index, so none reaches it. (An accumulating index_put would sort
      // the indices to add repeats in a fixed order: several launches and
      // 0.2-0.3 ms of host time for the GPT benchmark's embedding; a
      // scatter_add adds with atomics on CUDA, as torch.compile's
      // generated one does.)
      const graph::TensorMeta gm = b.meta(g);
      if (is_reversal(b.graph(), in[1], xm.sizes[attrs.dim])) {
        out[0] = b.index_select(g, attrs.dim, in[1]);
        return out;
      }
      if (few_rows_many_reads(xm, gm, attrs.dim)) {
        out[0] = summed_by_row(b, g, in[1], attrs.dim, xm.sizes[attrs.dim]);
        return out;
      }
      std::vector<int64_t> along(gm.sizes.size(), 1);
      along[attrs.dim] = gm.sizes[attrs.dim];
      const int index = b.expand(b.reshape(cast_to(b, in[1], graph::DType::Int64), along), gm.sizes);
      out[0] = b.scatter(zeros_like(b, xm), attrs.dim, index, v(g), true);
      return out;
    }
    case Prim::IndexPut: {
      // Args (x, values, indices...). Without accumulate the written
      // positions of x get no gradient; values get g where they were written
      // (every repeat, as torch), summed down to their own sizes.
      const std::vector<int> indices(in.begin() + 2, in.end());
      if (want(0)) {
        if (attrs.accumulate) {
          out[0] = g;
        } else {
          std::vector<std::optional<int>> at(xm.sizes.size(), std::nullopt);
          for (size_t k = 0; k < indices.size(); ++k) at[attrs.dims[k]] = indices[k];
          at.resize(attrs.dims.back() + 1);
          const int zero = b.full({}, prims::Scalar::of_float(0), xm.dtype, placement_of(xm));
          out[0] = b.index_put(g, at, zero, false);
        }
      }
      if (want(1)) out[1] = sum_to(b, index_read(b, g, attrs.dims, indices), b.meta(in[1]));
      return out;
    }
    default:
      throw NoDerivative(std::string(prims::prim_name(node.prim)) + " has no derivative rule");
  }
}

}  // namespace kiln::autograd
