#include "inductor/kernel_ir_parse.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace kiln::inductor {
namespace {

// Operator names, from the lists kernel_ir.h writes once.
template <typename Op>
struct OpName {
  const char* name;
  Op op;
};

constexpr OpName<UnaryOp> kUnaryNames[] = {
#define KILN_KERNEL_ENTRY(name, text, floating) {text, UnaryOp::name},
    KILN_KERNEL_UNARY_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

constexpr OpName<BinaryOp> kBinaryNames[] = {
#define KILN_KERNEL_ENTRY(name, text, floating) {text, BinaryOp::name},
    KILN_KERNEL_BINARY_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

constexpr OpName<CompareOp> kCompareNames[] = {
#define KILN_KERNEL_ENTRY(name, text) {text, CompareOp::name},
    KILN_KERNEL_COMPARE_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

constexpr OpName<ReduceOp> kReduceNames[] = {
#define KILN_KERNEL_ENTRY(name, text) {text, ReduceOp::name},
    KILN_KERNEL_REDUCE_OPS(KILN_KERNEL_ENTRY)
#undef KILN_KERNEL_ENTRY
};

// The op named `name` in `table`, as Expr::op stores it; -1 if none.
template <typename Op, size_t N>
int find_op(const OpName<Op> (&table)[N], std::string_view name) {
  for (const OpName<Op>& entry : table) {
    if (name == entry.name) return static_cast<int>(entry.op);
  }
  return -1;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Reads one line of the text form left to right; every failure names the
// line, the text and what was expected where.
class LineReader {
 public:
  LineReader(std::string_view line, int number) : line_(line), number_(number) {}

  [[noreturn]] void fail(const std::string& what) const {
    std::string message = "kernel text line " + std::to_string(number_) + ": " + what;
    const std::string_view rest = line_.substr(at_);
    message += rest.empty() ? " at the end of the line" : " at \"" + std::string(rest) + "\"";
    message += " (line: \"" + std::string(line_) + "\")";
    throw std::invalid_argument(message);
  }

  void skip_spaces() {
    while (at_ < line_.size() && (line_[at_] == ' ' || line_[at_] == '\t')) ++at_;
  }

  // Consumes `literal` (after spaces) if it comes next.
  bool accept(std::string_view literal) {
    skip_spaces();
    if (line_.substr(at_, literal.size()) != literal) return false;
    at_ += literal.size();
    return true;
  }

  void expect(std::string_view literal) {
    if (!accept(literal)) fail("expected \"" + std::string(literal) + "\"");
  }

  // A run of letters, digits and underscores; fails on none.
  std::string_view word(const char* what) {
    skip_spaces();
    const size_t begin = at_;
    while (at_ < line_.size() && is_word_char(line_[at_])) ++at_;
    if (at_ == begin) fail(std::string("expected ") + what);
    return line_.substr(begin, at_ - begin);
  }

  // Everything up to the next space (or the end), e.g. a constant.
  std::string_view token(const char* what) {
    skip_spaces();
    const size_t begin = at_;
    while (at_ < line_.size() && line_[at_] != ' ' && line_[at_] != '\t') ++at_;
    if (at_ == begin) fail(std::string("expected ") + what);
    return line_.substr(begin, at_ - begin);
  }

  int64_t integer(const char* what) {
    skip_spaces();
    int64_t value = 0;
    const char* begin = line_.data() + at_;
    const auto [end, error] = std::from_chars(begin, line_.data() + line_.size(), value);
    if (error != std::errc()) fail(std::string("expected ") + what);
    at_ += static_cast<size_t>(end - begin);
    return value;
  }

  // A count or id that indexes a vector: a non-negative int.
  int id(const char* what) {
    const size_t begin = at_;
    const int64_t value = integer(what);
    if (value < 0 || value > 1'000'000'000) {
      at_ = begin;
      fail(std::string("expected ") + what);
    }
    return static_cast<int>(value);
  }

  // "(a, b, ...)", "()" for none.
  std::vector<int64_t> list(const char* what) {
    expect("(");
    std::vector<int64_t> values;
    if (accept(")")) return values;
    do {
      values.push_back(integer(what));
    } while (accept(","));
    expect(")");
    return values;
  }

  DType dtype() {
    skip_spaces();
    const size_t begin = at_;
    const std::string_view name = word("a dtype (f32, bf16, i64, b8, ...)");
    for (int i = 0; i < static_cast<int>(DType::Other); ++i) {
      if (name == dtype_short_name(static_cast<DType>(i))) return static_cast<DType>(i);
    }
    at_ = begin;
    fail("unknown dtype \"" + std::string(name) + "\"");
  }

  // Checks that nothing but spaces is left.
  void end() {
    skip_spaces();
    if (at_ != line_.size()) fail("unexpected text");
  }

  size_t position() const { return at_; }
  void rewind(size_t at) { at_ = at; }

 private:
  std::string_view line_;
  int number_;
  size_t at_ = 0;
};

// Reads "%N" (an expression id).
int read_ref(LineReader& in) {
  in.expect("%");
  return in.id("an expression id after %");
}

// Sets a Constant's value from its text, which its dtype decides how to read.
void read_constant(LineReader& in, size_t at, std::string_view text, Expr& e) {
  auto fail = [&](const std::string& what) {
    in.rewind(at);
    in.fail(what);
  };
  if (e.dtype == DType::Bool) {
    if (text != "True" && text != "False") fail("expected True or False for a b8 constant");
    e.integer = text == "True";
    return;
  }
  if (e.dtype == DType::Float32 || e.dtype == DType::Float64) {
    const std::string copy(text);  // strtod needs a terminated string
    char* end = nullptr;
    e.constant = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size() || copy.empty()) fail("expected a floating constant");
    return;
  }
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), e.integer);
  if (error != std::errc() || end != text.data() + text.size()) {
    fail(std::string("expected an integer constant for ") + dtype_short_name(e.dtype));
  }
}

// "kernel NAME(sizes)[ reduce=(dims)]".
void read_header(LineReader& in, Kernel& k) {
  in.expect("kernel ");
  // Any name format_kernel can write back: up to the sizes' "(".
  in.skip_spaces();
  const size_t begin = in.position();
  const std::string_view name = in.token("a kernel name");
  const size_t paren = name.find('(');
  if (paren == 0 || paren == std::string_view::npos) {
    in.rewind(begin);
    in.fail("expected a kernel name, then its sizes");
  }
  k.name = std::string(name.substr(0, paren));
  in.rewind(begin + paren);
  k.sizes = in.list("a size");
  if (in.accept("reduce=")) {
    for (int64_t d : in.list("a reduced dim")) k.reduced.push_back(static_cast<int>(d));
  }
  in.end();
}

// "inN: DT strides=(...) offset=N".
void read_input(LineReader& in, Kernel& k) {
  in.expect("in");
  const size_t at = in.position();
  if (in.id("an input number") != static_cast<int>(k.inputs.size())) {
    in.rewind(at);
    in.fail("expected in" + std::to_string(k.inputs.size()) + " (inputs are numbered in order)");
  }
  in.expect(":");
  KernelInput input;
  input.dtype = in.dtype();
  in.expect("strides=");
  input.strides = in.list("a stride");
  in.expect("offset=");
  input.offset = in.integer("an offset");
  in.end();
  k.inputs.push_back(std::move(input));
}

// "outN: DT strides=(...) = %V[ tensor=(sizes)/(strides)]".
void read_output(LineReader& in, Kernel& k) {
  in.expect("out");
  const size_t at = in.position();
  if (in.id("an output number") != static_cast<int>(k.outputs.size())) {
    in.rewind(at);
    in.fail("expected out" + std::to_string(k.outputs.size()) + " (outputs are numbered in order)");
  }
  in.expect(":");
  KernelOutput output;
  output.dtype = in.dtype();
  in.expect("strides=");
  output.strides = in.list("a stride");
  in.expect("=");
  output.value = read_ref(in);
  if (in.accept("tensor=")) {
    output.has_tensor_shape = true;
    output.tensor_sizes = in.list("a size");
    in.expect("/");
    output.tensor_strides = in.list("a stride");
  }
  in.end();
  k.outputs.push_back(std::move(output));
}

// "%N = BODY : DT", BODY one of: load inN, load_at inN[%A * S + ...], const C, cast %A, index
// strides=(...), reduce_OP(%A), OP(%A[, %B[, %C]]).
void read_expr(LineReader& in, Kernel& k) {
  const size_t at_id = in.position();
  if (read_ref(in) != static_cast<int>(k.exprs.size())) {
    in.rewind(at_id);
    in.fail("expected %" + std::to_string(k.exprs.size()) + " (expressions are numbered in order)");
  }
  in.expect("=");
  Expr e;
  in.skip_spaces();
  const size_t at_name = in.position();
  const std::string_view name = in.word("an expression (load, load_at, const, cast, index, reduce_OP or an op)");
  std::string_view constant_text;
  size_t at_constant = 0;
  if (name == "load") {
    e.kind = ExprKind::Load;
    in.expect("in");
    e.input = in.id("an input number after in");
  } else if (name == "load_at") {
    e.kind = ExprKind::LoadAt;
    in.expect("in");
    e.input = in.id("an input number after in");
    in.expect("[");
    do {
      e.operands.push_back(read_ref(in));
      in.expect("*");
      e.strides.push_back(in.integer("a stride"));
    } while (in.accept("+"));
    in.expect("]");
  } else if (name == "const") {
    e.kind = ExprKind::Constant;
    in.skip_spaces();
    at_constant = in.position();
    constant_text = in.token("a constant");
  } else if (name == "cast") {
    e.kind = ExprKind::Cast;
    e.operands = {read_ref(in)};
  } else if (name == "index") {
    e.kind = ExprKind::Index;
    in.expect("strides=");
    e.strides = in.list("a stride");
  } else if (name.substr(0, 7) == "reduce_") {
    e.kind = ExprKind::Reduce;
    e.op = static_cast<int8_t>(find_op(kReduceNames, name.substr(7)));
    if (e.op < 0) {
      in.rewind(at_name);
      in.fail("unknown reduction \"" + std::string(name) + "\" (reduce_sum, reduce_prod, reduce_max, reduce_min)");
    }
    in.expect("(");
    e.operands = {read_ref(in)};
    in.expect(")");
  } else {
    int op = -1;
    size_t arity = 0;
    if ((op = find_op(kUnaryNames, name)) >= 0) {
      e.kind = ExprKind::Unary;
      arity = 1;
    } else if ((op = find_op(kBinaryNames, name)) >= 0) {
      e.kind = ExprKind::Binary;
      arity = 2;
    } else if ((op = find_op(kCompareNames, name)) >= 0) {
      e.kind = ExprKind::Compare;
      arity = 2;
    } else if (name == "select") {
      e.kind = ExprKind::Select;
      op = 0;
      arity = 3;
    } else {
      in.rewind(at_name);
      in.fail("unknown operator \"" + std::string(name) + "\"");
    }
    e.op = static_cast<int8_t>(op);
    in.expect("(");
    do {
      e.operands.push_back(read_ref(in));
    } while (in.accept(","));
    in.expect(")");
    if (e.operands.size() != arity) {
      in.rewind(at_name);
      in.fail(std::string(name) + " takes " + std::to_string(arity) + " operand" + (arity == 1 ? "" : "s") +
              ", has " + std::to_string(e.operands.size()));
    }
  }
  in.expect(":");
  e.dtype = in.dtype();
  in.end();
  if (e.kind == ExprKind::Constant) read_constant(in, at_constant, constant_text, e);
  k.exprs.push_back(std::move(e));
}

}  // namespace

Kernel parse_kernel(const std::string& text) {
  Kernel k;
  bool has_header = false;
  int number = 0;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    ++number;
    LineReader in(line, number);
    in.skip_spaces();
    if (in.position() == line.size()) continue;
    const std::string_view rest = line.substr(in.position());
    if (!has_header) {
      if (rest.substr(0, 7) != "kernel ") in.fail("expected \"kernel NAME(sizes)\" first");
      read_header(in, k);
      has_header = true;
    } else if (rest.substr(0, 7) == "kernel ") {
      in.fail("a second kernel line (one kernel per text)");
    } else if (rest.substr(0, 1) == "%") {
      read_expr(in, k);
    } else if (rest.substr(0, 3) == "out") {
      read_output(in, k);
    } else if (rest.substr(0, 2) == "in") {
      read_input(in, k);
    } else {
      in.fail("expected an input (inN:), an expression (%N =) or an output (outN:)");
    }
  }
  if (!has_header) throw std::invalid_argument("kernel text: no \"kernel NAME(sizes)\" line");
  return k;
}

}  // namespace kiln::inductor
