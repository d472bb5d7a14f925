// TraceState's methods for dynamic sizes (Note [Dynamic shapes] in
// dynamic_shapes.cpp): SymInts read from fakes and computed by graph
// nodes, their expressions over the symbols (Note [Size relations] in
// guards/size_expr.cpp), comparisons kept as guards, slices with SymInt
// bounds, and the symbolic names of a result's dims.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "base/log.h"
#include "base/torch_api.h"
#include "guards/guard_set.h"
#include "guards/size_expr.h"
#include "runtime/aten_bridge.h"
#include "tracer/own_metas.h"
#include "tracer/trace_state.h"

namespace kiln::tracer {

using base::PyRef;
using graph::TensorMeta;

ValuePtr TraceState::make_symint(std::vector<int64_t> per_point, const std::string& name,
                                 PyObject* target, std::vector<ValuePtr> operands, PyObject* index) {
  auto value = std::make_shared<Value>();
  value->kind = ValueKind::SymInt;
  value->sym_points = std::move(per_point);
  value->name = name;
  value->obj = PyRef::borrow(target);
  value->items = std::move(operands);
  if (index) value->sym_index = PyRef::borrow(index);
  return value;
}

ValuePtr TraceState::wrap_dynamic_int(PyObject* obj, int source) {
  if (points_ <= 1) return nullptr;
  const guards::Source& where = sources().at(source);
  const std::string& text = where.text;
  if (!dynamic_.int_is_dynamic(text, where.kind == guards::SourceKind::Local)) return nullptr;
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow || n < 2) return nullptr;  // 0 and 1 stay specialized, as sizes do
  const int symbol = symbols_.new_symbol(n);
  if (symbol < 0) return nullptr;
  int_symbols_.push_back(symbol);
  std::vector<int64_t> per_point;
  for (int p = 0; p < points_; ++p) per_point.push_back(symbols_.at_point(n, p));
  ValuePtr value = make_symint(std::move(per_point), "int", nullptr, {}, nullptr);
  value->source = source;
  value->sym_expr = guards::SizeExpr::of_symbol(symbol);
  guards_->add_int_symbol(source, static_cast<int8_t>(symbol));
  value->node = graph_->add_object_input(source, text);
  graph_->node(value->node).int_symbol = "s" + std::to_string(symbol);
  KILN_LOG(dynamic, text << " = " << n << " is the dynamic int s" << symbol);
  return value;
}

ValuePtr TraceState::query_fake(const ValuePtr& tensor, const std::string& name,
                                const std::vector<ValuePtr>& args, bool attribute) {
  const int npoints = tensor->alt_fakes.empty() ? 1 : points_;
  std::vector<PyRef> results;
  for (int p = 0; p < npoints; ++p) {
    PyObject* fake = p == 0 ? tensor->fake.get() : tensor->alt_fakes[p - 1].get();
    PyRef result = PyRef::steal(PyObject_GetAttrString(fake, name.c_str()));
    if (result && !attribute) {
      PyRef call_args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
      for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(call_args.get(), i, PyRef(args[i]->obj).release());
      result = PyRef::steal(PyObject_Call(result.get(), call_args.get(), nullptr));
    }
    if (!result && p == SymbolTable::kOnesPoint) {
      drop_ones_point("Tensor." + name + " fails: " + take_python_error());
      break;
    }
    if (!result) abort_trace(BreakCode::PythonException, "Tensor." + name + ": " + take_python_error());
    results.push_back(std::move(result));
  }
  // A size that varies is a SymInt, its value at 1 one more point.
  check_ones_constant(&results, "Tensor." + name);
  if (all_equal(results)) return wrap_unguarded(results[0].get());
  const base::TorchApi* api = base::torch_api();
  // Sizes and strides differ between points: compute them at run time.
  const bool sizes = name == "size" || name == "shape";
  const char* method = sizes ? "size" : name == "stride" ? "stride" : nullptr;
  if (is_int(results[0].get()) && !attribute) {
    std::vector<int64_t> per_point;
    for (const PyRef& r : results) per_point.push_back(PyLong_AsLongLong(r.get()));
    PyRef target = PyRef::steal(PyObject_GetAttrString(api->tensor_type, name.c_str()));
    std::vector<ValuePtr> operands{tensor};
    operands.insert(operands.end(), args.begin(), args.end());
    ValuePtr size = make_symint(std::move(per_point), "Tensor." + name, target.get(), std::move(operands), nullptr);
    if (name == "size" && args.size() == 1 && args[0]->is(ValueKind::Constant) && is_int(args[0]->obj.get())) {
      size->sym_expr = exact_dim_size(tensor, PyLong_AsLongLong(args[0]->obj.get()));
    }
    return size;
  }
  if (method && PyTuple_Check(results[0].get()) && args.empty()) {
    PyRef target = PyRef::steal(PyObject_GetAttrString(api->tensor_type, method));
    std::vector<ValuePtr> items;
    const Py_ssize_t n = PyTuple_GET_SIZE(results[0].get());
    for (Py_ssize_t i = 0; i < n; ++i) {
      std::vector<int64_t> per_point;
      for (const PyRef& r : results) per_point.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(r.get(), i)));
      if (static_cast<int>(per_point.size()) > SymbolTable::kPoints && per_point[0] == per_point[1] &&
          per_point[1] == per_point[2] && per_point.back() != per_point[0]) {
        drop_ones_point("dim " + std::to_string(i) + " of Tensor." + name + " is " + std::to_string(per_point[0]) +
                        " at the sample points, " + std::to_string(per_point.back()) + " at 1");
        per_point.pop_back();
      }
      if (std::all_of(per_point.begin(), per_point.end(), [&](int64_t v) { return v == per_point[0]; })) {
        items.push_back(wrap_unguarded(PyTuple_GET_ITEM(results[0].get(), i)));
        continue;
      }
      PyRef dim = PyRef::steal(PyLong_FromSsize_t(i));
      items.push_back(make_symint(std::move(per_point), std::string("Tensor.") + method, target.get(),
                                  {tensor, wrap_unguarded(dim.get())}, nullptr));
      if (sizes) items.back()->sym_expr = exact_dim_size(tensor, i);
    }
    ValuePtr sizes_value = make_sequence(ValueKind::Tuple, std::move(items));
    if (!PyTuple_CheckExact(results[0].get())) {
      sizes_value->tuple_type = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(results[0].get())));  // torch.Size
    }
    return sizes_value;
  }
  throw Specialize("Tensor." + name + " depends on a dynamic size");
}

std::vector<int> TraceState::dynamic_dims_of(const ValuePtr& tensor) const {
  std::vector<int> dims;
  if (tensor->alt_fakes.empty()) return dims;
  graph::TensorMeta other;
  runtime::read_tensor_meta(tensor->alt_fakes[0].get(), &other);
  for (size_t d = 0; d < tensor->meta.sizes.size() && d < other.sizes.size(); ++d) {
    if (tensor->meta.sizes[d] != other.sizes[d]) dims.push_back(static_cast<int>(d));
  }
  return dims;
}

ValuePtr TraceState::tensor_size(const ValuePtr& tensor, int dim) {
  PyRef index = PyRef::steal(PyLong_FromLong(dim));
  return query_fake(tensor, "size", {wrap_unguarded(index.get())}, false);
}

ValuePtr TraceState::sym_arithmetic(const std::string& op_name, PyObject* fn,
                                    const std::vector<ValuePtr>& operands) {
  std::vector<int64_t> per_point;
  for (int p = 0; p < points_; ++p) {
    PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(operands.size())));
    for (size_t i = 0; i < operands.size(); ++i) {
      const ValuePtr& operand = operands[i];
      PyObject* item = nullptr;
      if (operand->is(ValueKind::SymInt) && !operand->sym_slice) {
        item = PyLong_FromLongLong(operand->sym_points[p]);
      } else if (operand->is(ValueKind::Constant) && is_int(operand->obj.get())) {
        item = PyRef(operand->obj).release();
      } else {
        throw Specialize(op_name + " of a dynamic size and " + describe_value(*operand));
      }
      PyTuple_SET_ITEM(args.get(), i, item);
    }
    PyRef result = PyRef::steal(PyObject_Call(fn, args.get(), nullptr));
    if (p == SymbolTable::kOnesPoint && (!result || !is_int(result.get()))) {
      drop_ones_point(op_name + (result ? " gives a non-int" : " fails: " + take_python_error()));
      break;
    }
    if (!result) abort_trace(BreakCode::PythonException, op_name + ": " + take_python_error());
    if (!is_int(result.get())) throw Specialize(op_name + " of a dynamic size gives a non-int");
    per_point.push_back(PyLong_AsLongLong(result.get()));
  }
  // Always symbolic, even where the points agree: s // 100 is 0 at every
  // point of a small s, yet not for every s.
  ValuePtr result = make_symint(std::move(per_point), op_name, fn, operands, nullptr);
  result->sym_expr = composed_size(op_name, operands);
  return result;
}

std::optional<guards::SizeExpr> TraceState::size_expr_of(const ValuePtr& value) const {
  if (value->is(ValueKind::Constant) && is_int(value->obj.get())) {
    return guards::SizeExpr::of_constant(PyLong_AsLongLong(value->obj.get()));
  }
  if (!value->is(ValueKind::SymInt) || value->sym_slice) return std::nullopt;
  if (value->sym_expr) return value->sym_expr;
  // Fitted from the points, among the symbols it derives from; a SymInt
  // is never a constant, even where its points agree (s // 100).
  std::vector<bool> candidates(symbols_.count(), false);
  note_sym_sources(value, &candidates);
  // The size-one point fits nothing (Note [The size-one point]).
  const std::vector<int64_t> sampled(value->sym_points.begin(),
                                     value->sym_points.begin() + std::min<size_t>(value->sym_points.size(), SymbolTable::kPoints));
  std::optional<guards::SizeExpr> e = guards::fit_size_expr(sampled, symbols_.sizes(), candidates, symbols_.point_offset());
  if (!e || e->is_constant()) return std::nullopt;
  return e;
}

std::optional<guards::SizeExpr> TraceState::composed_size(const std::string& op_name,
                                                          const std::vector<ValuePtr>& operands) const {
  std::vector<guards::SizeExpr> exprs;
  for (const ValuePtr& operand : operands) {
    std::optional<guards::SizeExpr> e = size_expr_of(operand);
    if (!e) return std::nullopt;
    exprs.push_back(*e);
  }
  if (exprs.size() == 1 && op_name == "operator.neg") {
    return guards::multiply_sizes(exprs[0], guards::SizeExpr::of_constant(-1));
  }
  if (exprs.size() == 1 && op_name == "operator.pos") return exprs[0];
  if (exprs.size() != 2) return std::nullopt;
  if (op_name == "operator.add" || op_name == "operator.iadd") return guards::add_sizes(exprs[0], exprs[1]);
  if (op_name == "operator.sub" || op_name == "operator.isub") return guards::subtract_sizes(exprs[0], exprs[1]);
  if (op_name == "operator.mul" || op_name == "operator.imul") return guards::multiply_sizes(exprs[0], exprs[1]);
  return std::nullopt;
}

namespace {

// Note [Exact dims through shape rules]
// A comparison of sizes becomes a guard only where both sides have an
// exact expression (Note [Size relations]); a dim fitted from the sample
// points is none under shifted points, which cannot tell s0 from s1 + 1
// when the two differ by one (Note [Shifted sample points]). Library code
// reshapes and converts a tensor before reading its sizes: transformers'
// GPT-2 views the attention mask as (batch, -1), the mask utilities turn
// it to bool, then compare its length with the KV cache's. So the result
// of a call with a shape rule carries exact dim expressions computed from
// its arguments' (Value::dim_exprs), and x.size(d) of it is exact too:
//   - ops that return their first argument's shape whatever the sizes:
//     conversions (to, bool, float, ...), copies (contiguous, clone,
//     detach), elementwise functions of one tensor (logical_not, and
//     Note [Own metas]' unary_float_ops), *_like factories, and
//     elementwise operators whose other operands are Python numbers;
//   - view and reshape: each given size's expression (a constant, or a
//     SymInt's exact one), and a -1 dim the numel's over the others'
//     product where that is a constant dividing it exactly.
// Each rule's expressions are checked against the result's sizes at every
// sample point; a dim that disagrees (a rule applied where it does not
// hold) gets none, as without a rule.
bool keeps_shape(const std::string& op) {
  static const std::set<std::string> ops = {
      "Tensor.to", "Tensor.type", "Tensor.type_as", "Tensor.bool", "Tensor.byte", "Tensor.char",
      "Tensor.short", "Tensor.int", "Tensor.long", "Tensor.half", "Tensor.bfloat16", "Tensor.float",
      "Tensor.double", "Tensor.cpu", "Tensor.cuda", "Tensor.contiguous", "Tensor.clone", "torch.clone",
      "Tensor.detach", "torch.detach", "Tensor.__invert__", "operator.invert", "operator.inv",
      "operator.neg", "Tensor.logical_not", "torch.logical_not", "torch.ones_like", "torch.zeros_like",
      "torch.empty_like", "torch.full_like", "torch.rand_like", "torch.randn_like"};
  return ops.count(op) > 0 || unary_float_ops().count(op) > 0;
}

// Elementwise operators that keep their tensor operand's shape when every
// other operand is a Python number.
bool keeps_shape_with_numbers(const std::string& op) {
  static const std::set<std::string> ops = {
      "operator.add", "operator.sub", "operator.mul", "operator.truediv", "operator.floordiv",
      "operator.mod", "operator.pow", "operator.eq", "operator.ne", "operator.lt", "operator.le",
      "operator.gt", "operator.ge", "operator.and_", "operator.or_", "operator.xor"};
  return ops.count(op) > 0;
}

bool is_view_or_reshape(const std::string& op) {
  return op == "Tensor.view" || op == "Tensor.reshape" || op == "torch.reshape";
}

bool is_number(const ValuePtr& value) {
  return value->is(ValueKind::Constant) && (PyLong_Check(value->obj.get()) || PyFloat_Check(value->obj.get())) &&
         !PyBool_Check(value->obj.get());
}

}  // namespace

std::optional<guards::SizeExpr> TraceState::exact_dim_size(const ValuePtr& tensor, int64_t dim) const {
  if (!tensor->is(ValueKind::Tensor) || tensor->node < 0) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(tensor->meta.sizes.size());
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return std::nullopt;
  if (!tensor->dim_exprs.empty()) return tensor->dim_exprs[dim];
  const graph::Node& node = graph_->node(tensor->node);
  if (node.kind != graph::NodeKind::Input) return std::nullopt;
  if (node.symbolic_sizes.empty() || node.symbolic_sizes[0].size() != tensor->meta.sizes.size() ||
      node.symbolic_sizes[0][dim].empty()) {
    return guards::SizeExpr::of_constant(tensor->meta.sizes[dim]);
  }
  const std::string& name = node.symbolic_sizes[0][dim];
  // An input's symbolic dim is named "s<k>" exactly (wrap_tensor).
  if (name.size() < 2 || name[0] != 's') return std::nullopt;
  for (size_t i = 1; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
  }
  return guards::SizeExpr::of_symbol(std::atoi(name.c_str() + 1));
}

void TraceState::apply_shape_rule(const std::string& name, const std::vector<ValuePtr>& args, const KwArgs& kwargs,
                                  const ValuePtr& result) const {
  if (args.empty() || !args[0]->is(ValueKind::Tensor) || !result->is(ValueKind::Tensor)) return;
  const ValuePtr& input = args[0];
  const size_t rank = result->meta.sizes.size();
  std::vector<std::optional<guards::SizeExpr>> dims(rank);
  const bool with_numbers = keeps_shape_with_numbers(name) && kwargs.empty() &&
                            std::all_of(args.begin() + 1, args.end(), is_number);
  if (keeps_shape(name) || with_numbers) {
    if (input->meta.sizes != result->meta.sizes) return;
    for (size_t d = 0; d < rank; ++d) dims[d] = exact_dim_size(input, static_cast<int64_t>(d));
  } else if (is_view_or_reshape(name) && kwargs.empty() && args.size() >= 2) {
    std::vector<ValuePtr> shape(args.begin() + 1, args.end());
    if (shape.size() == 1 && (shape[0]->is(ValueKind::Tuple) || shape[0]->is(ValueKind::List))) {
      shape = shape[0]->items;
    }
    if (shape.size() != rank) return;
    // The numel's expression: the product of the input's dims, one of them
    // at most symbolic.
    std::optional<guards::SizeExpr> numel = guards::SizeExpr::of_constant(1);
    for (size_t d = 0; d < input->meta.sizes.size() && numel; ++d) {
      const std::optional<guards::SizeExpr> e = exact_dim_size(input, static_cast<int64_t>(d));
      numel = e ? guards::multiply_sizes(*numel, *e) : std::nullopt;
    }
    int inferred = -1;
    std::optional<guards::SizeExpr> others = guards::SizeExpr::of_constant(1);
    for (size_t d = 0; d < rank; ++d) {
      const ValuePtr& item = shape[d];
      if (item->is(ValueKind::Constant) && is_int(item->obj.get()) && PyLong_AsLongLong(item->obj.get()) == -1) {
        inferred = static_cast<int>(d);
        continue;
      }
      if (item->is(ValueKind::Constant) && is_int(item->obj.get())) {
        dims[d] = guards::SizeExpr::of_constant(PyLong_AsLongLong(item->obj.get()));
      } else if (item->is(ValueKind::SymInt) && !item->sym_slice) {
        dims[d] = item->sym_expr;
      }
      others = dims[d] && others ? guards::multiply_sizes(*others, *dims[d]) : std::nullopt;
    }
    if (inferred >= 0 && numel && others && others->is_constant()) {
      dims[inferred] = guards::divide_sizes_exactly(*numel, others->constant);
    }
  } else {
    return;
  }
  // The expressions must give the result's sizes at every sample point.
  const int npoints = std::min<int>(points_, 1 + static_cast<int>(result->alt_fakes.size()));
  std::vector<int64_t> at(guards::kMaxGuardSymbols, 0);
  for (int p = 0; p < npoints; ++p) {
    TensorMeta meta;
    if (p == 0) {
      meta = result->meta;
    } else {
      runtime::read_tensor_meta(result->alt_fakes[p - 1].get(), &meta);
    }
    for (int k = 0; k < symbols_.count() && k < guards::kMaxGuardSymbols; ++k) {
      at[k] = symbols_.at_point(symbols_.sizes()[k], p);
    }
    for (size_t d = 0; d < rank && d < meta.sizes.size(); ++d) {
      if (!dims[d] || dims[d]->max_symbol() >= guards::kMaxGuardSymbols) {
        dims[d].reset();
        continue;
      }
      if (dims[d]->eval(at.data()) != meta.sizes[d]) {
        KILN_LOG(dynamic, name << "'s dim " << d << " is not " << dims[d]->text() << " at sample point " << p
                               << ": no exact expression");
        dims[d].reset();
      }
    }
  }
  if (std::any_of(dims.begin(), dims.end(), [](const auto& e) { return e.has_value(); })) {
    result->dim_exprs = std::move(dims);
  }
}

void TraceState::note_sym_sources(const ValuePtr& value, std::vector<bool>* symbols) const {
  // The symbols named in a dim's symbolic size ("s0", "2*s1+1"; "?": all).
  auto note_name = [symbols](const std::string& name) {
    if (name.find('?') != std::string::npos) symbols->assign(symbols->size(), true);
    for (size_t i = 0; i < name.size(); ++i) {
      if (name[i] != 's' || i + 1 >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i + 1]))) continue;
      const int k = std::atoi(name.c_str() + i + 1);
      if (k < static_cast<int>(symbols->size())) (*symbols)[k] = true;
    }
  };
  // A dynamic int (Note [Dynamic ints]) is its own symbol.
  if (value->source >= 0 && value->sym_expr) {
    for (const auto& [k, c] : value->sym_expr->terms) {
      if (k < static_cast<int>(symbols->size())) (*symbols)[k] = true;
    }
  }
  for (size_t i = 0; i < value->items.size(); ++i) {
    const ValuePtr& item = value->items[i];
    if (item->is(ValueKind::SymInt)) note_sym_sources(item, symbols);
    if (!item->is(ValueKind::Tensor) || item->node < 0) continue;
    const graph::Node& node = graph_->node(item->node);
    if (node.symbolic_sizes.empty()) continue;
    const std::vector<std::string>& dims = node.symbolic_sizes.back();
    // Tensor.size(t, d): dim d; any other query (numel): every dim.
    const ValuePtr* dim = i + 1 < value->items.size() ? &value->items[i + 1] : nullptr;
    if (dim && (*dim)->is(ValueKind::Constant) && is_int((*dim)->obj.get())) {
      int64_t d = PyLong_AsLongLong((*dim)->obj.get());
      if (d < 0) d += static_cast<int64_t>(dims.size());
      if (d >= 0 && d < static_cast<int64_t>(dims.size())) note_name(dims[d]);
      continue;
    }
    for (const std::string& name : dims) note_name(name);
  }
}

ValuePtr TraceState::sym_slice(const std::vector<ValuePtr>& parts) {
  std::vector<ValuePtr> items = parts;
  while (items.size() < 3) items.push_back(wrap_unguarded(Py_None));
  for (const ValuePtr& part : items) {
    const bool ok = part->is(ValueKind::SymInt) ? !part->sym_slice
                                                : part->is(ValueKind::Constant) &&
                                                      (part->obj.get() == Py_None || is_int(part->obj.get()));
    if (!ok) abort_trace(BreakCode::UnsupportedOperator, "slice bounds must be ints or None");
  }
  auto value = std::make_shared<Value>();
  value->kind = ValueKind::SymInt;
  value->sym_slice = true;
  value->name = "slice";
  value->obj = PyRef::borrow(reinterpret_cast<PyObject*>(&PySlice_Type));
  value->items = std::move(items);
  return value;
}

// Note [Slices past a buffer]
// Models slice fixed buffers by a length: BERT's embeddings read
// `self.position_ids[:, past:past + seq_length]` out of 512 positions. At
// the sample points (the length scaled or shifted) the bound can pass the
// buffer's end where the real one does not; the slice then clamps, its
// size stops following the length, and the trace would specialize. Where
// the bound has a size expression and stays within the buffer at the
// traced sizes, the buffer's fake at such a point is made long enough
// instead (a meta tensor: nothing is allocated), and a SizeRelation guard
// keeps the bound within the real buffer, as the slice's size follows the
// length only there. Dims the tensor has symbolic, negative bounds and
// steps are left as they are.
PyRef TraceState::unclamped_fake(const ValuePtr& tensor, const ValuePtr& index, int point) {
  if (!tensor->is(ValueKind::Tensor)) return PyRef();
  std::vector<ValuePtr> parts;
  if (index->is(ValueKind::SymInt) && index->sym_slice) {
    parts.push_back(index);
  } else if (index->is(ValueKind::Tuple)) {
    parts = index->items;
  } else {
    return PyRef();
  }
  const bool any_dynamic = std::any_of(parts.begin(), parts.end(), [](const ValuePtr& part) {
    return part->is(ValueKind::SymInt) && part->sym_slice;
  });
  if (!any_dynamic) return PyRef();  // every getitem of a dynamic trace asks
  PyRef fake = lower_fake(tensor, point);
  TensorMeta here, traced;
  runtime::read_tensor_meta(fake.get(), &here);
  runtime::read_tensor_meta(tensor->fake.get(), &traced);
  if (parts.size() > here.sizes.size()) return PyRef();
  // The value of a bound at a point, if it is an int there.
  auto at = [](const ValuePtr& v, int p) -> std::optional<int64_t> {
    if (v->is(ValueKind::SymInt) && !v->sym_slice) return v->sym_points[p];
    if (v->is(ValueKind::Constant) && is_int(v->obj.get())) return PyLong_AsLongLong(v->obj.get());
    return std::nullopt;
  };
  std::vector<int64_t> sizes = here.sizes;
  bool widened = false;
  for (size_t d = 0; d < parts.size(); ++d) {
    const ValuePtr& part = parts[d];
    if (!part->is(ValueKind::SymInt) || !part->sym_slice) {
      // Plain slices keep the dim; anything else (an int, None, ...) shifts dims.
      const bool plain_slice = part->is(ValueKind::Constant) && PySlice_Check(part->obj.get());
      if (!plain_slice) return PyRef();
      continue;
    }
    const ValuePtr& start = part->items[0];
    const ValuePtr& stop = part->items[1];
    const ValuePtr& step = part->items[2];
    const bool unit_step = step->is(ValueKind::Constant) && (step->obj.get() == Py_None || at(step, 0) == 1);
    const std::optional<int64_t> stop_here = at(stop, point), stop_traced = at(stop, 0);
    const bool start_ok = (start->is(ValueKind::Constant) && start->obj.get() == Py_None) ||
                          (at(start, 0) >= 0 && at(start, point) >= 0);
    if (!unit_step || !start_ok || !stop_here || !stop_traced || here.sizes[d] != traced.sizes[d]) continue;
    if (*stop_traced < 0 || *stop_traced > traced.sizes[d] || *stop_here <= here.sizes[d]) continue;
    std::optional<guards::SizeExpr> bound = size_expr_of(stop);
    if (!bound) continue;
    guards_->add_size_relation(*bound, Py_LE, guards::SizeExpr::of_constant(traced.sizes[d]), true);
    KILN_LOG(dynamic, "size relation " << bound->text() << " <= " << traced.sizes[d]
                                       << " is True: guarded (a slice bound within a buffer)");
    sizes[d] = *stop_here;
    widened = true;
  }
  if (!widened) return PyRef();
  PyRef shape = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(sizes.size())));
  for (size_t d = 0; d < sizes.size(); ++d) PyTuple_SET_ITEM(shape.get(), d, PyLong_FromLongLong(sizes[d]));
  PyRef wide = PyRef::steal(PyObject_CallMethod(fake.get(), "new_empty", "(O)", shape.get()));
  if (!wide) PyErr_Clear();
  return wide;
}

ValuePtr TraceState::sym_compare(int cmp, const ValuePtr& a, const ValuePtr& b) {
  const char* op = guards::comparison_text(cmp);
  // Per point, and the expression of each side: a SymInt is a size,
  // never a constant, even where its points agree (s // 100).
  auto side = [&](const ValuePtr& v, std::vector<int64_t>* points) -> std::optional<guards::SizeExpr> {
    if (v->is(ValueKind::Constant) && is_int(v->obj.get())) {
      points->assign(points_, PyLong_AsLongLong(v->obj.get()));
    } else if (v->is(ValueKind::SymInt) && !v->sym_slice) {
      *points = v->sym_points;
    } else {
      throw Specialize(std::string("a dynamic size compared (") + op + ") with " + describe_value(*v));
    }
    return size_expr_of(v);
  };
  std::vector<int64_t> pa, pb;
  const std::optional<guards::SizeExpr> ea = side(a, &pa);
  const std::optional<guards::SizeExpr> eb = side(b, &pb);
  const bool result = guards::compare_sizes(cmp, pa[0], pb[0]);
  bool changes = false;
  for (int p = 1; p < SymbolTable::kPoints; ++p) changes = changes || guards::compare_sizes(cmp, pa[p], pb[p]) != result;
  if (changes) {
    // A threshold on a dynamic int (a sliding window filling up: the
    // sample points of a count near it fall on both sides) is guarded with
    // the traced answer: the graph holds on that side, as a trace at a
    // count past the threshold holds on the other (Note [Dynamic ints]).
    // On tensor sizes alone the trace specializes.
    auto on_int = [this](const std::optional<guards::SizeExpr>& e) {
      if (!e) return false;
      for (const auto& [k, c] : e->terms) {
        if (std::find(int_symbols_.begin(), int_symbols_.end(), k) != int_symbols_.end()) return true;
      }
      return false;
    };
    if (!ea || !eb || !(on_int(ea) || on_int(eb))) {
      throw Specialize(std::string("a comparison of dynamic sizes (") + op + ") decides control flow and changes with the sizes");
    }
    KILN_LOG(dynamic, "size relation " << ea->text() << " " << op << " " << eb->text()
                                       << " differs between the sample points; guarded at the traced sizes");
  }
  if (!ea || !eb) {
    throw Specialize(std::string("a comparison of dynamic sizes (") + op + ") decides control flow and no size expression fits " + (!ea ? "its left side" : "its right side"));
  }
  if (ones_point_holds()) {
    // The guard evaluates its expressions at the call's sizes: at 1 they
    // must give the sizes the fakes have there, and the same answer.
    const int k = SymbolTable::kOnesPoint;
    const std::vector<int64_t> ones(guards::kMaxGuardSymbols, 1);
    const std::string relation = ea->text() + " " + op + " " + eb->text();
    if (guards::compare_sizes(cmp, pa[k], pb[k]) != result) {
      drop_ones_point("size relation " + relation + " is " + (result ? "False" : "True") + " there");
    } else if (ea->eval(ones.data()) != pa[k] || eb->eval(ones.data()) != pb[k]) {
      drop_ones_point("size relation " + relation + ": an expression is not exact at 1");
    }
  }
  guards_->add_size_relation(*ea, cmp, *eb, result);
  KILN_LOG(dynamic, "size relation " << ea->text() << " " << op << " " << eb->text() << " is "
                                     << (result ? "True" : "False") << ": guarded");
  return wrap_unguarded(result ? Py_True : Py_False);
}

void TraceState::attach_points(const ValuePtr& value, const std::vector<PyRef>& per_point, int node) {
  size_t npoints = std::min<size_t>(per_point.size(), points_);
  std::vector<TensorMeta> metas(npoints);
  for (size_t p = 0; p < npoints; ++p) {
    const bool ones = static_cast<int>(p) == SymbolTable::kOnesPoint;
    const bool tensor = runtime::is_tensor(per_point[p].get());
    if (tensor) runtime::read_tensor_meta(per_point[p].get(), &metas[p]);
    if (ones && (!tensor || metas[p].sizes.size() != metas[0].sizes.size())) {
      drop_ones_point(tensor ? "an op's result has another rank" : "an op returns a non-tensor");
      npoints = p;
      break;
    }
    if (!tensor) throw Specialize("an op returns a non-tensor when the dynamic sizes change");
    if (metas[p].sizes.size() != metas[0].sizes.size()) {
      throw Specialize("an op's result rank changes with the dynamic sizes");
    }
  }
  for (size_t p = 1; p < npoints; ++p) value->alt_fakes.push_back(per_point[p]);
  std::vector<std::string> names(metas[0].sizes.size());
  bool any = false;
  for (size_t d = 0; d < names.size(); ++d) {
    int64_t sizes[SymbolTable::kPoints];
    bool differs = false;
    for (int p = 0; p < SymbolTable::kPoints; ++p) {
      sizes[p] = metas[p].sizes[d];
      differs = differs || sizes[p] != sizes[0];
    }
    if (differs) {
      names[d] = symbols_.name_dim(sizes);
      any = true;
    }
  }
  if (!any) return;
  graph::Node& n = graph_->node(node);
  n.symbolic_sizes.resize(n.metas.size());
  n.symbolic_sizes.back() = std::move(names);
}

void TraceState::drop_ones_point(const std::string& why) {
  if (!ones_point_holds()) return;
  points_ = SymbolTable::kPoints;
  KILN_LOG(dynamic, "size 1 stays specialized: at the size-one point " << why);
}

void TraceState::check_ones_constant(std::vector<PyRef>* results, const std::string& what) {
  if (static_cast<int>(results->size()) <= SymbolTable::kPoints) return;
  const std::vector<PyRef> sampled(results->begin(), results->begin() + SymbolTable::kPoints);
  if (!all_equal(sampled) || all_equal({(*results)[0], results->back()})) return;
  drop_ones_point(what + " is " + py_repr((*results)[0].get()) + " at the sample points, " +
                  py_repr(results->back().get()) + " at 1");
  results->pop_back();
}

std::unique_ptr<guards::GuardSet> TraceState::take_guards() {
  if (ones_point_holds() && symbols_.count() > 0) {
    guards_->admit_size_one();
    KILN_LOG(dynamic, "the trace holds with every dynamic size 1: guards admit it");
  }
  return std::move(guards_);
}

}  // namespace kiln::tracer
