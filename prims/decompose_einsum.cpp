// torch.einsum of one or two operands as sums, permutes, reshapes and one
// batched matmul (Note [Einsum as a matmul]).
#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "prims/decompositions.h"

namespace kiln::prims {
namespace {

// Note [Einsum as a matmul]
// torch.einsum contracts two operands as one bmm: dims labelled in both
// and in the output are the batch, dims in both but not the output are
// summed by the product, dims of one operand only are its rows or columns;
// a dim labelled in one operand and not in the output is summed first. As
// a torch call it was an extern whose gradient ran it again under autograd
// (Longformer's six a layer); as prims the product is kiln's matmul (its
// GEMM kernels on the CPU) and the permutes and sums fuse or fold. Labels
// of size 1 broadcast against the other operand's, an ellipsis stands for
// the dims the labels leave, aligned from the right; the result takes the
// traced layout (torch returns the bmm's result permuted, so some
// equations give a non-contiguous result). Repeated labels in one operand
// (diagonals) and three or more operands stay torch's call; under
// autocast the operands are cast to the traced result's dtype first, as
// autocast casts the bmm's.

constexpr int kEllipsisBase = 1000;  // label ids of an ellipsis' dims

// An operand's labels, one per dim: letters as their character codes,
// ellipsis dims as kEllipsisBase + position within the widest ellipsis.
struct Term {
  std::vector<int> labels;
  bool ellipsis = false;
};

// Parses one term of the equation for an operand of `rank` dims (rank -1:
// the output, whose ellipsis spans `ellipsis_dims`).
Term parse_term(DecomposeCall& c, const std::string& text, int64_t rank, int64_t ellipsis_dims) {
  Term term;
  std::vector<int> letters_before, letters_after;
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 3, "...") == 0) {
      if (term.ellipsis) c.unsupported("two ellipses in one term");
      term.ellipsis = true;
      i += 3;
      continue;
    }
    const char ch = text[i++];
    if (!std::isalpha(static_cast<unsigned char>(ch))) c.unsupported(std::string("the subscript '") + ch + "'");
    (term.ellipsis ? letters_after : letters_before).push_back(ch);
  }
  const int64_t named = static_cast<int64_t>(letters_before.size() + letters_after.size());
  int64_t spread = 0;
  if (rank >= 0) {
    if (term.ellipsis ? named > rank : named != rank) c.unsupported("subscripts that do not match an operand's rank");
    spread = term.ellipsis ? rank - named : 0;
  } else {
    spread = term.ellipsis ? ellipsis_dims : 0;
  }
  term.labels = letters_before;
  for (int64_t k = 0; k < spread; ++k) term.labels.push_back(kEllipsisBase + static_cast<int>(ellipsis_dims - spread + k));
  term.labels.insert(term.labels.end(), letters_after.begin(), letters_after.end());
  return term;
}

// Index of `label` in `labels`, or -1.
int64_t position(const std::vector<int>& labels, int label) {
  const auto it = std::find(labels.begin(), labels.end(), label);
  return it == labels.end() ? -1 : it - labels.begin();
}

// Sums `value` over the dims whose labels `keep` rejects; updates `labels`.
int sum_unkept(PrimBuilder& b, int value, std::vector<int>& labels, const std::vector<int>& keep) {
  std::vector<int64_t> dims;
  std::vector<int> kept;
  for (size_t d = 0; d < labels.size(); ++d) {
    if (position(keep, labels[d]) < 0) {
      dims.push_back(static_cast<int64_t>(d));
    } else {
      kept.push_back(labels[d]);
    }
  }
  if (dims.empty()) return value;
  labels = kept;
  return b.reduce(Prim::Sum, value, dims, false);
}

int64_t product(const std::vector<int64_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
}

// `value` (dims labelled `labels`) permuted into the order of `order`, its
// dims of size 1 where `sizes` has more expanded to them.
int arrange(PrimBuilder& b, int value, const std::vector<int>& labels, const std::vector<int>& order,
            const std::map<int, int64_t>& sizes) {
  std::vector<int64_t> perm;
  for (int label : order) perm.push_back(position(labels, label));
  std::vector<int64_t> identity(perm.size());
  std::iota(identity.begin(), identity.end(), 0);
  int out = perm == identity ? value : b.permute(value, perm);
  std::vector<int64_t> want;
  for (int label : order) want.push_back(sizes.at(label));
  if (b.meta(out).sizes != want) out = b.expand(out, want);
  return out;
}

}  // namespace

std::vector<int> decompose_Einsum(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  std::string equation;
  for (char ch : c.text("equation")) {
    if (ch != ' ') equation += ch;
  }
  std::vector<int> operands = c.tensors("operands");
  if (operands.empty() || operands.size() > 2) c.unsupported("einsum of other than one or two operands");
  const size_t arrow = equation.find("->");
  const std::string inputs = equation.substr(0, arrow);
  std::vector<std::string> texts;
  for (size_t start = 0;;) {
    const size_t comma = inputs.find(',', start);
    texts.push_back(inputs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (texts.size() != operands.size()) c.unsupported("as many terms as operands");
  // The widest ellipsis: how many dims an output ellipsis spans.
  int64_t ellipsis_dims = 0;
  for (size_t k = 0; k < texts.size(); ++k) {
    if (texts[k].find("...") == std::string::npos) continue;
    const int64_t named = std::count_if(texts[k].begin(), texts[k].end(),
                                        [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); });
    ellipsis_dims = std::max(ellipsis_dims, c.rank(operands[k]) - named);
  }
  std::vector<Term> terms;
  std::map<int, int> uses;
  for (size_t k = 0; k < texts.size(); ++k) {
    terms.push_back(parse_term(c, texts[k], c.rank(operands[k]), ellipsis_dims));
    std::vector<int> sorted = terms.back().labels;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      c.unsupported("a label repeated within an operand (a diagonal)");
    }
    for (int label : terms.back().labels) ++uses[label];
  }
  std::vector<int> output;
  if (arrow != std::string::npos) {
    output = parse_term(c, equation.substr(arrow + 2), -1, ellipsis_dims).labels;
    for (int label : output) {
      if (!uses.count(label)) c.unsupported("an output label no operand has");
    }
  } else {
    for (int64_t k = 0; k < ellipsis_dims; ++k) output.push_back(kEllipsisBase + static_cast<int>(k));
    for (const auto& [label, count] : uses) {
      if (label < kEllipsisBase && count == 1) output.push_back(label);
    }
  }
  // Label sizes, broadcasting size 1.
  std::map<int, int64_t> sizes;
  for (size_t k = 0; k < terms.size(); ++k) {
    const std::vector<int64_t> dims = b.meta(operands[k]).sizes;
    for (size_t d = 0; d < dims.size(); ++d) {
      int64_t& size = sizes.emplace(terms[k].labels[d], dims[d]).first->second;
      if (size == 1) size = dims[d];
      if (dims[d] != 1 && dims[d] != size) c.unsupported("label sizes that do not broadcast");
    }
  }
  const graph::TensorMeta& traced = c.traced(0);
  for (int& operand : operands) {
    if (b.meta(operand).dtype != traced.dtype) {
      if (!is_floating(traced.dtype)) c.unsupported("a result dtype other than its operands'");
      operand = b.convert(operand, traced.dtype);
    }
  }
  int result;
  if (operands.size() == 1) {
    std::vector<int> labels = terms[0].labels;
    const int summed = sum_unkept(b, operands[0], labels, output);
    result = arrange(b, summed, labels, output, sizes);
  } else {
    std::vector<int> la = terms[0].labels, lb = terms[1].labels;
    std::vector<int> keep_a = output, keep_b = output;
    keep_a.insert(keep_a.end(), lb.begin(), lb.end());
    keep_b.insert(keep_b.end(), la.begin(), la.end());
    const int a = sum_unkept(b, operands[0], la, keep_a);
    const int bb = sum_unkept(b, operands[1], lb, keep_b);
    std::vector<int> batch, left, right, contracted;
    for (int label : la) {
      const bool in_b = position(lb, label) >= 0, in_out = position(output, label) >= 0;
      (in_b ? (in_out ? batch : contracted) : left).push_back(label);
    }
    for (int label : lb) {
      if (position(la, label) < 0) right.push_back(label);
    }
    auto sizes_of = [&](const std::vector<int>& labels) {
      std::vector<int64_t> out;
      for (int label : labels) out.push_back(sizes.at(label));
      return out;
    };
    auto joined = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
      x.insert(x.end(), y.begin(), y.end());
      x.insert(x.end(), z.begin(), z.end());
      return x;
    };
    const int64_t nb = product(sizes_of(batch)), nl = product(sizes_of(left)), nr = product(sizes_of(right));
    const int64_t nk = product(sizes_of(contracted));
    const int lhs = b.reshape(arrange(b, a, la, joined(batch, left, contracted), sizes), {nb, nl, nk});
    const int rhs = b.reshape(arrange(b, bb, lb, joined(batch, contracted, right), sizes), {nb, nk, nr});
    const std::vector<int> made = joined(batch, left, right);
    std::vector<int64_t> made_sizes = sizes_of(made);
    const int product_value = b.reshape(b.matmul(lhs, rhs), made_sizes);
    result = arrange(b, product_value, made, output, sizes);
  }
  return {in_traced_layout(b, result, traced)};
}

}  // namespace kiln::prims
