// Kernel IR -> LLVM IR through IRBuilder, then jit_compile. The function
// follows Note [CPU kernel ABI]. Kept dims are the outer loops (the
// parallel dim over [begin, end)); a pointwise kernel evaluates its
// outputs at each point, the last dim innermost, so contiguous outputs are
// written sequentially and the loop vectorizer sees unit-stride accesses.
// A reducing kernel runs, per kept point, its phases over the reduced dims
// in row mode or per block of tile lanes in tile mode (Note [Reduction
// kernels], Note [Vectorized reductions], Note [Row stash]). Note [Kernel
// math functions] says how transcendental ops are called.

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/llvm_module.h"
#include "inductor/reduction_split.h"
#include "prims/type_promotion.h"

namespace kiln::inductor::cpu {
namespace {

using llvm::Value;

// Note [Kernel math functions]
// exp, exp2, expm1, log, log2, log1p, sin, cos, tan, tanh, erf and pow are
// calls of the C library's functions (expf/exp, ...), which the JIT
// resolves in the process (libm). Each call carries a
// "vector-function-abi-variant" naming glibc's libmvec AVX2 variant
// (_ZGVdN8v_expf: 8 floats; _ZGVdN4v_exp: 4 doubles), which the JIT loads,
// so the loop vectorizer can widen the call; without AVX2 or libmvec the
// calls stay scalar. With libmvec, a call the vectorizer leaves scalar (a
// loop's remainder, a strided loop, a reduction's epilogue) computes lane 0
// of the vector function, not libm's scalar function: the two differ in the
// last bit, and an element's value must not depend on where a loop puts it.
// Backward graphs compare recomputed values for equality (amax's gradient
// goes to the elements equal to the maximum, recomputed in another kernel
// than the one that found it), and one bit off loses the gradient. The callees are declared memory(none): kernels do not
// promise errno. sqrt, floor, ceil, trunc, round (half to even) and fabs
// are LLVM intrinsics (single instructions on x86); sigmoid is
// 1 / (1 + exp(-x)) and rsqrt 1 / sqrt(x), as torch computes them.
struct MathFunction {
  const char* name;  // the double version; the float one appends 'f'
  int arity;
};

// True when glibc's AVX2 vector variants can be called.
bool vector_math_available() {
  static const bool available =
      host_cpu().avx2 && jit_resolve_host_symbol("_ZGVdN8v_expf") != nullptr;
  return available;
}

bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64; }
bool is_unsigned(DType d) { return d == DType::Bool || d == DType::UInt8; }

class Codegen {
 public:
  Codegen(const Kernel& kernel, llvm::LLVMContext& context, llvm::Module& module)
      : kernel_(kernel), context_(context), module_(module), builder_(context) {}

  // Emits the kernel as function `name`.
  void emit(const std::string& name);

 private:
  llvm::Type* storage_type(DType d);
  llvm::Type* value_type(DType d);
  Value* cast(Value* v, DType from, DType to);
  Value* round_to_bfloat16(Value* f32);
  Value* math_call(const char* name, DType dtype, std::vector<Value*> args);
  Value* intrinsic(llvm::Intrinsic::ID id, Value* a, Value* b = nullptr);
  Value* emit_unary(UnaryOp op, Value* v, DType dtype);
  Value* emit_binary(BinaryOp op, Value* a, Value* b, DType dtype);
  Value* emit_compare(CompareOp op, Value* a, Value* b, DType dtype);
  // One point's evaluation: operand element pointers (inputs, then
  // outputs), the phase (Note [Reduction kernels]; 0 in pointwise kernels
  // and for the once-per-kept-point outputs, phases + 1 for the last pass),
  // the point's index along the reduced dims (row mode, for the stash) or
  // its lane (tile mode), and the values computed so far.
  struct Point {
    std::vector<Value*> pointers;
    int phase = 0;
    Value* row_index = nullptr;
    Value* lane = nullptr;
    std::vector<Value*> values;
  };
  Value* eval(int id, Point& point);
  Value* compute(int id, Point& point);
  void store_output(size_t i, Value* value, Value* pointer);
  // Element pointers of every operand at the given element offsets.
  std::vector<Value*> pointers_at(const std::vector<Value*>& offsets);
  std::vector<Value*> advance(const std::vector<Value*>& offsets, size_t d, Value* i);
  // `for (i = lo; i < hi; ++i)` threading `accs` through the iterations:
  // body(i, accs) returns the next iteration's; returns the values after
  // the loop (init when it runs no iteration). Leaves the builder after it.
  std::vector<Value*> emit_for(Value* lo, Value* hi, std::vector<Value*> accs,
                               const std::function<std::vector<Value*>(Value*, const std::vector<Value*>&)>& body);
  void emit_for(Value* lo, Value* hi, const std::function<void(Value*)>& body);
  // The loops over kept dims d.. before the reduced ones; `kept` is the
  // kept point's index so far (row-major over the kept dims).
  void emit_kept(size_t d, const std::vector<Value*>& offsets, Value* kept);
  // Per kept point: the phases over the reduced dims, then the outputs.
  void emit_row(const std::vector<Value*>& offsets);
  // One phase's reductions over the reduced dims into reduced_.
  void reduce_phase(int phase, const std::vector<Value*>& offsets);
  // Stores the outputs constant along the reduced dims (`once`) and those
  // varying along them (`full`, in a last pass) at a kept point.
  void store_row_outputs(const std::vector<Value*>& offsets, bool once, bool full);
  // Split kernels (Note [Split reductions]): the function body, one step
  // of a kept point in the current chunk, and a combine step.
  void emit_split();
  void emit_split_row(const std::vector<Value*>& offsets);
  void emit_combine(int phase);
  Value* slot_pointer(Value* word);
  void store_slot(Value* word, Value* value, DType dtype);
  Value* load_slot(Value* word, DType dtype);
  Value* final_word(Value* kept, int64_t slot);
  Value* partial_word(Value* kept, int64_t slot);  // of the current chunk
  void emit_tile(const std::vector<Value*>& offsets);
  // Nested loops over the reduced dims from `level` with accumulators;
  // body(offsets, row index, accs) -> accs.
  using NestBody = std::function<std::vector<Value*>(const std::vector<Value*>&, Value*, const std::vector<Value*>&)>;
  std::vector<Value*> emit_reduced_nest(size_t level, const std::vector<Value*>& offsets, Value* row,
                                        std::vector<Value*> accs, const NestBody& body);
  Value* reduce_init(ReduceOp op, DType dtype);
  Value* combine(ReduceOp op, DType dtype, Value* acc, Value* x, bool in_register);
  // Zero offsets for every operand (inputs, outputs, Index expressions).
  std::vector<Value*> origin();
  void plan_stash();
  std::pair<Value*, Value*> dim_range(size_t d);

  // Operands are the inputs, the outputs, then each Index expression
  // (whose "offset" is its value; it has no pointer).
  int64_t operand_stride(size_t operand, size_t d) const {
    const size_t inputs = kernel_.inputs.size(), outputs = kernel_.outputs.size();
    if (operand < inputs) return kernel_.inputs[operand].strides[d];
    if (operand < inputs + outputs) return kernel_.outputs[operand - inputs].strides[d];
    return kernel_.exprs[index_exprs_[operand - inputs - outputs]].strides[d];
  }
  DType operand_dtype(size_t operand) const {
    return operand < kernel_.inputs.size() ? kernel_.inputs[operand].dtype
                                           : kernel_.outputs[operand - kernel_.inputs.size()].dtype;
  }

  const Kernel& kernel_;
  llvm::LLVMContext& context_;
  llvm::Module& module_;
  llvm::IRBuilder<> builder_;
  std::vector<Value*> bases_;  // per operand: its first element
  std::vector<Value*> sizes_;  // per dim
  RuntimeOuterDims outer_;     // dims read at run time (Note [Run-time outer layout])
  std::vector<std::vector<Value*>> outer_strides_;  // per pointer operand, per outer dim: null for stride 0
  llvm::MDNode* loads_noalias_ = nullptr;
  std::vector<llvm::MDNode*> store_scope_, store_noalias_;  // per output
  Value* begin_ = nullptr;
  Value* end_ = nullptr;
  std::vector<int> stage_;              // per expression
  std::vector<bool> varies_;            // per expression
  int phases_ = 0;                      // the highest stage
  std::vector<Value*> reduced_;         // per expression: a Reduce's value (row mode)
  std::vector<Value*> stash_;           // per expression: its row buffer, or null
  std::vector<int> stash_phase_;        // per expression: the phase that wrote it, or 0
  std::vector<Value*> lanes_;           // per expression: a Reduce's tile accumulators
  std::vector<int> index_exprs_;        // the Index expressions, as operands after the outputs
  std::vector<int> index_operand_;      // per expression: its operand, or -1
  ReductionSplit split_;                // chunks == 0 unless split
  Value* workspace_ = nullptr;          // split: the workspace's words
  Value* chunk_ = nullptr;              // split: the chunk being computed
  Value* chunk_begin_ = nullptr;        // split: its range of split_.dim
  Value* chunk_end_ = nullptr;
  Value* kept_point_ = nullptr;         // the kept point's index (emit_kept)
  int split_phase_ = 0;                 // split: the partial step's phase, or 0 for the store step
};

// The lanes a tile-mode kernel accumulates at once (Note [Reduction kernels]).
constexpr int64_t kTileLanes = 512;
// The most row-buffer bytes a kernel keeps on its stack (Note [Row stash]).
constexpr int64_t kStashBytes = 512 * 1024;

llvm::Type* Codegen::storage_type(DType d) {
  switch (d) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return builder_.getInt8Ty();
    case DType::Int16: return builder_.getInt16Ty();
    case DType::Int32: return builder_.getInt32Ty();
    case DType::Int64: return builder_.getInt64Ty();
    case DType::Float16: return builder_.getHalfTy();
    case DType::BFloat16: return builder_.getInt16Ty();  // raw bits (Note above)
    case DType::Float32: return builder_.getFloatTy();
    case DType::Float64: return builder_.getDoubleTy();
    default: throw CodegenError(std::string("no CPU kernels for ") + graph::dtype_name(d));
  }
}

llvm::Type* Codegen::value_type(DType d) {
  return d == DType::Bool ? builder_.getInt1Ty() : storage_type(d);
}

// bfloat16 is kept as its 16 bits: LLVM 16's x86 backend does not convert
// `bfloat` values. Rounding is to nearest even, NaN stays a quiet NaN, as c10.
Value* Codegen::round_to_bfloat16(Value* f32) {
  Value* bits = builder_.CreateBitCast(f32, builder_.getInt32Ty());
  Value* lsb = builder_.CreateAnd(builder_.CreateLShr(bits, 16), 1);
  Value* rounded = builder_.CreateAdd(builder_.CreateAdd(bits, builder_.getInt32(0x7FFF)), lsb);
  Value* high = builder_.CreateTrunc(builder_.CreateLShr(rounded, 16), builder_.getInt16Ty());
  Value* nan = builder_.CreateFCmpUNO(f32, f32);
  return builder_.CreateSelect(nan, builder_.getInt16(0x7FC0), high);
}

Value* Codegen::cast(Value* v, DType from, DType to) {
  if (from == to) return v;
  if (from == DType::Float16) {
    v = builder_.CreateFPExt(v, builder_.getFloatTy());
    from = DType::Float32;
  } else if (from == DType::BFloat16) {
    Value* wide = builder_.CreateShl(builder_.CreateZExt(v, builder_.getInt32Ty()), 16);
    v = builder_.CreateBitCast(wide, builder_.getFloatTy());
    from = DType::Float32;
  }
  // To a low-precision float: through float32 (a float64 value rounds twice).
  if (to == DType::Float16) return builder_.CreateFPTrunc(cast(v, from, DType::Float32), builder_.getHalfTy());
  if (to == DType::BFloat16) return round_to_bfloat16(cast(v, from, DType::Float32));
  if (from == to) return v;
  llvm::Type* target = value_type(to);
  if (to == DType::Bool) {
    // Nonzero is true; NaN is nonzero.
    return is_float(from) ? builder_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0))
                          : builder_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  if (is_float(from) && is_float(to)) return builder_.CreateFPCast(v, target);
  if (is_float(to)) return is_unsigned(from) ? builder_.CreateUIToFP(v, target) : builder_.CreateSIToFP(v, target);
  if (is_float(from)) return is_unsigned(to) ? builder_.CreateFPToUI(v, target) : builder_.CreateFPToSI(v, target);
  return builder_.CreateIntCast(v, target, /*isSigned=*/!is_unsigned(from));
}

Value* Codegen::intrinsic(llvm::Intrinsic::ID id, Value* a, Value* b) {
  if (b == nullptr) return builder_.CreateUnaryIntrinsic(id, a);
  return builder_.CreateBinaryIntrinsic(id, a, b);
}

Value* Codegen::math_call(const char* name, DType dtype, std::vector<Value*> args) {
  const bool single = dtype == DType::Float32;
  const std::string scalar_name = std::string(name) + (single ? "f" : "");
  llvm::Type* type = value_type(dtype);
  std::vector<llvm::Type*> params(args.size(), type);
  llvm::FunctionType* signature = llvm::FunctionType::get(type, params, false);
  if (!vector_math_available()) {
    llvm::Function* callee = module_.getFunction(scalar_name);
    if (callee == nullptr) {
      callee = llvm::Function::Create(signature, llvm::Function::ExternalLinkage, scalar_name, module_);
      callee->setDoesNotAccessMemory();
      callee->setDoesNotThrow();
      callee->addFnAttr(llvm::Attribute::WillReturn);
    }
    llvm::CallInst* call = builder_.CreateCall(callee, args);
    call->setDoesNotAccessMemory();
    return call;
  }
  const int lanes = single ? 8 : 4;
  const std::string params_code(args.size(), 'v');
  const std::string vector_name = "_ZGVdN" + std::to_string(lanes) + params_code + "_" + scalar_name;
  llvm::Type* vector = llvm::FixedVectorType::get(type, lanes);
  llvm::Function* variant = module_.getFunction(vector_name);
  if (variant == nullptr) {
    std::vector<llvm::Type*> vector_params(args.size(), vector);
    variant = llvm::Function::Create(llvm::FunctionType::get(vector, vector_params, false),
                                     llvm::Function::ExternalLinkage, vector_name, module_);
    variant->setDoesNotAccessMemory();
    variant->setDoesNotThrow();
    // Kept until the vectorizer has looked for it (as InjectTLIMappings does).
    llvm::appendToCompilerUsed(module_, {variant});
  }
  // The scalar form computes lane 0 of the vector function (Note [Kernel
  // math functions]): not inlined, so the vectorizer still sees one call
  // it can widen to `variant`.
  const std::string lane_name = "kiln.lane." + scalar_name;
  llvm::Function* lane = module_.getFunction(lane_name);
  if (lane == nullptr) {
    lane = llvm::Function::Create(signature, llvm::Function::InternalLinkage, lane_name, module_);
    lane->setDoesNotAccessMemory();
    lane->setDoesNotThrow();
    lane->addFnAttr(llvm::Attribute::WillReturn);
    lane->addFnAttr(llvm::Attribute::NoInline);
    llvm::IRBuilder<> body(llvm::BasicBlock::Create(context_, "entry", lane));
    std::vector<Value*> vector_args;
    for (llvm::Argument& arg : lane->args()) {
      vector_args.push_back(body.CreateInsertElement(llvm::Constant::getNullValue(vector), &arg, uint64_t{0}));
    }
    body.CreateRet(body.CreateExtractElement(body.CreateCall(variant, vector_args), uint64_t{0}));
  }
  llvm::CallInst* call = builder_.CreateCall(lane, args);
  call->setDoesNotAccessMemory();
  const std::string abi =
      "_ZGV_LLVM_N" + std::to_string(lanes) + params_code + "_" + lane_name + "(" + vector_name + ")";
  call->addFnAttr(llvm::Attribute::get(context_, "vector-function-abi-variant", abi));
  return call;
}

Value* Codegen::emit_unary(UnaryOp op, Value* v, DType dtype) {
  const bool fp = is_float(dtype);
  llvm::Type* type = v->getType();
  auto one = [&] { return llvm::ConstantFP::get(type, 1.0); };
  switch (op) {
    case UnaryOp::Neg: return fp ? builder_.CreateFNeg(v) : builder_.CreateNeg(v);
    case UnaryOp::Abs:
      if (fp) return intrinsic(llvm::Intrinsic::fabs, v);
      if (is_unsigned(dtype)) return v;
      return intrinsic(llvm::Intrinsic::abs, v, builder_.getFalse());
    case UnaryOp::Exp: return math_call("exp", dtype, {v});
    case UnaryOp::Exp2: return math_call("exp2", dtype, {v});
    case UnaryOp::Expm1: return math_call("expm1", dtype, {v});
    case UnaryOp::Log: return math_call("log", dtype, {v});
    case UnaryOp::Log2: return math_call("log2", dtype, {v});
    case UnaryOp::Log1p: return math_call("log1p", dtype, {v});
    case UnaryOp::Sin: return math_call("sin", dtype, {v});
    case UnaryOp::Cos: return math_call("cos", dtype, {v});
    case UnaryOp::Tan: return math_call("tan", dtype, {v});
    case UnaryOp::Tanh: return math_call("tanh", dtype, {v});
    case UnaryOp::Erf: return math_call("erf", dtype, {v});
    case UnaryOp::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, v);
    case UnaryOp::Rsqrt: return builder_.CreateFDiv(one(), intrinsic(llvm::Intrinsic::sqrt, v));
    case UnaryOp::Sigmoid:
      return builder_.CreateFDiv(one(), builder_.CreateFAdd(one(), math_call("exp", dtype, {builder_.CreateFNeg(v)})));
    case UnaryOp::Floor: return intrinsic(llvm::Intrinsic::floor, v);
    case UnaryOp::Ceil: return intrinsic(llvm::Intrinsic::ceil, v);
    case UnaryOp::Round: return intrinsic(llvm::Intrinsic::roundeven, v);
    case UnaryOp::Trunc: return intrinsic(llvm::Intrinsic::trunc, v);
    case UnaryOp::Reciprocal: return builder_.CreateFDiv(one(), v);
    case UnaryOp::IsNan: return builder_.CreateFCmpUNO(v, v);
    case UnaryOp::LogicalNot: return builder_.CreateNot(v);
  }
  throw CodegenError("unknown unary op");
}

Value* Codegen::emit_binary(BinaryOp op, Value* a, Value* b, DType dtype) {
  const bool fp = is_float(dtype);
  const bool boolean = dtype == DType::Bool;
  switch (op) {
    case BinaryOp::Add:
      return fp ? builder_.CreateFAdd(a, b) : boolean ? builder_.CreateOr(a, b) : builder_.CreateAdd(a, b);
    case BinaryOp::Sub:
      return fp ? builder_.CreateFSub(a, b) : boolean ? builder_.CreateXor(a, b) : builder_.CreateSub(a, b);
    case BinaryOp::Mul:
      return fp ? builder_.CreateFMul(a, b) : boolean ? builder_.CreateAnd(a, b) : builder_.CreateMul(a, b);
    case BinaryOp::Div: return builder_.CreateFDiv(a, b);
    case BinaryOp::Maximum:
    case BinaryOp::Minimum: {
      const bool max = op == BinaryOp::Maximum;
      if (fp) {
        // NaN in either operand wins, as torch.maximum/minimum.
        Value* pick_a = builder_.CreateOr(builder_.CreateFCmpUNO(a, a),
                                          max ? builder_.CreateFCmpOGT(a, b) : builder_.CreateFCmpOLT(a, b));
        return builder_.CreateSelect(pick_a, a, b);
      }
      if (boolean) return max ? builder_.CreateOr(a, b) : builder_.CreateAnd(a, b);
      const bool u = is_unsigned(dtype);
      return intrinsic(max ? (u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax)
                           : (u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin),
                       a, b);
    }
    case BinaryOp::Pow: return math_call("pow", dtype, {a, b});
    case BinaryOp::LogicalAnd:
    case BinaryOp::BitwiseAnd: return builder_.CreateAnd(a, b);
    case BinaryOp::LogicalOr:
    case BinaryOp::BitwiseOr: return builder_.CreateOr(a, b);
    case BinaryOp::LogicalXor:
    case BinaryOp::BitwiseXor: return builder_.CreateXor(a, b);
    // Indices are never negative: unsigned division is exact and cheaper.
    case BinaryOp::IndexDiv: return builder_.CreateUDiv(a, b);
    case BinaryOp::IndexMod: return builder_.CreateURem(a, b);
  }
  throw CodegenError("unknown binary op");
}

Value* Codegen::emit_compare(CompareOp op, Value* a, Value* b, DType dtype) {
  using P = llvm::CmpInst::Predicate;
  const bool u = is_unsigned(dtype);
  P predicate = P::ICMP_EQ;
  if (is_float(dtype)) {
    // Ordered, except ne: NaN compares unequal to everything.
    switch (op) {
      case CompareOp::Eq: predicate = P::FCMP_OEQ; break;
      case CompareOp::Ne: predicate = P::FCMP_UNE; break;
      case CompareOp::Lt: predicate = P::FCMP_OLT; break;
      case CompareOp::Le: predicate = P::FCMP_OLE; break;
      case CompareOp::Gt: predicate = P::FCMP_OGT; break;
      case CompareOp::Ge: predicate = P::FCMP_OGE; break;
    }
    return builder_.CreateFCmp(predicate, a, b);
  }
  switch (op) {
    case CompareOp::Eq: predicate = P::ICMP_EQ; break;
    case CompareOp::Ne: predicate = P::ICMP_NE; break;
    case CompareOp::Lt: predicate = u ? P::ICMP_ULT : P::ICMP_SLT; break;
    case CompareOp::Le: predicate = u ? P::ICMP_ULE : P::ICMP_SLE; break;
    case CompareOp::Gt: predicate = u ? P::ICMP_UGT : P::ICMP_SGT; break;
    case CompareOp::Ge: predicate = u ? P::ICMP_UGE : P::ICMP_SGE; break;
  }
  return builder_.CreateICmp(predicate, a, b);
}

Value* Codegen::compute(int id, Point& point) {
  const Expr& e = kernel_.exprs[id];
  auto operand = [&](int i) { return eval(e.operands[i], point); };
  auto operand_dtype = [&](int i) { return kernel_.exprs[e.operands[i]].dtype; };
  switch (e.kind) {
    case ExprKind::Load:
    case ExprKind::LoadAt: {
      Value* at = point.pointers[e.input];
      for (size_t j = 0; j < e.operands.size(); ++j) {  // LoadAt: Note [Loads at computed indices]
        at = builder_.CreateInBoundsGEP(storage_type(e.dtype), at,
                                        builder_.CreateMul(operand(static_cast<int>(j)), builder_.getInt64(e.strides[j])));
      }
      llvm::LoadInst* load = builder_.CreateLoad(storage_type(e.dtype), at);
      if (loads_noalias_ != nullptr) load->setMetadata(llvm::LLVMContext::MD_noalias, loads_noalias_);
      return e.dtype == DType::Bool ? builder_.CreateICmpNE(load, builder_.getInt8(0)) : static_cast<Value*>(load);
    }
    case ExprKind::Constant:
      return is_float(e.dtype) ? static_cast<Value*>(llvm::ConstantFP::get(value_type(e.dtype), e.constant))
                               : llvm::ConstantInt::get(value_type(e.dtype), e.integer, /*signed=*/true);
    case ExprKind::Cast: return cast(operand(0), operand_dtype(0), e.dtype);
    case ExprKind::Unary: return emit_unary(static_cast<UnaryOp>(e.op), operand(0), operand_dtype(0));
    case ExprKind::Binary: {
      Value* a = operand(0);
      return emit_binary(static_cast<BinaryOp>(e.op), a, operand(1), e.dtype);
    }
    case ExprKind::Compare: {
      Value* a = operand(0);
      return emit_compare(static_cast<CompareOp>(e.op), a, operand(1), operand_dtype(0));
    }
    case ExprKind::Select: {
      Value* c = operand(0);
      Value* a = operand(1);
      return builder_.CreateSelect(c, a, operand(2));
    }
    case ExprKind::Index: return point.pointers[index_operand_[id]];
    case ExprKind::Reduce: break;
  }
  throw CodegenError("a reduction evaluated before its phase");
}

// Note [Row stash]
// In a row-mode kernel (reduced dims innermost) each phase walks the row
// again. A value that varies along the row, is needed in two or more
// phases and costs more than a load (softmax's exp(x - max), needed by the
// sum and by the output) is computed once, in the first phase that needs
// it, and kept in a row buffer on the stack that later phases read: the
// row stays in L1/L2 and transcendental work is not redone. Buffers are
// allocated once per call; rows whose buffers would pass kStashBytes are
// recomputed instead.
void Codegen::plan_stash() {
  const size_t count = kernel_.exprs.size();
  stash_.assign(count, nullptr);
  stash_phase_.assign(count, 0);
  if (kernel_.reduced.empty() || tile_dim(kernel_) >= 0 || split_.chunks > 0) return;
  // Which phases need each expression without any stash (phase p: the
  // operands of stage-p reductions; phases_ + 1: outputs varying along rows).
  std::vector<std::vector<bool>> needed(count, std::vector<bool>(phases_ + 2, false));
  std::function<void(int, int)> need = [&](int id, int phase) {
    if (needed[id][phase]) return;
    needed[id][phase] = true;
    if (kernel_.exprs[id].kind == ExprKind::Reduce) return;
    for (int operand : kernel_.exprs[id].operands) need(operand, phase);
  };
  for (size_t id = 0; id < count; ++id) {
    if (kernel_.exprs[id].kind != ExprKind::Reduce) continue;
    for (int operand : kernel_.exprs[id].operands) need(operand, stage_[id]);
  }
  for (const KernelOutput& out : kernel_.outputs) {
    if (varies_[out.value]) need(out.value, phases_ + 1);
  }
  int64_t row = 1;
  for (int d : kernel_.reduced) row *= kernel_.sizes[d];
  int64_t bytes = 0;
  llvm::IRBuilder<> entry(&builder_.GetInsertBlock()->getParent()->getEntryBlock(),
                          builder_.GetInsertBlock()->getParent()->getEntryBlock().begin());
  for (size_t id = 0; id < count; ++id) {
    const Expr& e = kernel_.exprs[id];
    if (!varies_[id] || e.kind == ExprKind::Load || e.kind == ExprKind::LoadAt || e.kind == ExprKind::Constant || e.kind == ExprKind::Index ||
        e.dtype == DType::Bool)
      continue;
    if (e.kind == ExprKind::Cast && kernel_.exprs[e.operands[0]].kind == ExprKind::Load) continue;
    int phases = 0;
    for (bool n : needed[id]) phases += n ? 1 : 0;
    if (phases < 2) continue;
    const int64_t size = row * static_cast<int64_t>(item_size(e.dtype));
    if (bytes + size > kStashBytes) continue;
    bytes += size;
    stash_[id] = entry.CreateAlloca(value_type(e.dtype), entry.getInt64(row), "stash");
  }
}

Value* Codegen::eval(int id, Point& point) {
  if (point.values[id] != nullptr) return point.values[id];
  const Expr& e = kernel_.exprs[id];
  Value* v = nullptr;
  if (e.kind == ExprKind::Reduce) {
    if (point.lane != nullptr) {
      Value* slot = builder_.CreateInBoundsGEP(value_type(e.dtype), lanes_[id], point.lane);
      v = builder_.CreateLoad(value_type(e.dtype), slot);
    } else {
      v = reduced_[id];
    }
    if (v == nullptr) throw CodegenError("a reduction read before its phase");
  } else if (stash_[id] != nullptr && point.row_index != nullptr) {
    Value* slot = builder_.CreateInBoundsGEP(value_type(e.dtype), stash_[id], point.row_index);
    if (stash_phase_[id] != 0 && stash_phase_[id] < point.phase) {
      v = builder_.CreateLoad(value_type(e.dtype), slot);
    } else {
      v = compute(id, point);
      builder_.CreateStore(v, slot);
      stash_phase_[id] = point.phase;
    }
  } else {
    v = compute(id, point);
  }
  point.values[id] = v;
  return v;
}

void Codegen::store_output(size_t i, Value* value, Value* pointer) {
  const KernelOutput& out = kernel_.outputs[i];
  Value* v = cast(value, kernel_.exprs[out.value].dtype, out.dtype);
  if (out.dtype == DType::Bool) v = builder_.CreateZExt(v, builder_.getInt8Ty());
  llvm::StoreInst* store = builder_.CreateStore(v, pointer);
  store->setMetadata(llvm::LLVMContext::MD_alias_scope, store_scope_[i]);
  if (store_noalias_[i] != nullptr) store->setMetadata(llvm::LLVMContext::MD_noalias, store_noalias_[i]);
}

std::vector<Value*> Codegen::pointers_at(const std::vector<Value*>& offsets) {
  std::vector<Value*> pointers(offsets.size());
  for (size_t k = 0; k < offsets.size(); ++k) {
    pointers[k] = k < bases_.size()
                      ? builder_.CreateInBoundsGEP(storage_type(operand_dtype(k)), bases_[k], offsets[k])
                      : offsets[k];  // an Index expression's value
  }
  return pointers;
}

std::vector<Value*> Codegen::origin() {
  return std::vector<Value*>(bases_.size() + index_exprs_.size(), builder_.getInt64(0));
}

std::vector<Value*> Codegen::advance(const std::vector<Value*>& offsets, size_t d, Value* i) {
  std::vector<Value*> inner(offsets.size());
  for (size_t k = 0; k < offsets.size(); ++k) {
    const int64_t stride = operand_stride(k, d);
    if (stride == 0) {
      inner[k] = offsets[k];
      continue;
    }
    Value* step = k < outer_strides_.size() && static_cast<int>(d) < outer_.strides ? outer_strides_[k][d]
                                                                                   : builder_.getInt64(stride);
    inner[k] = builder_.CreateAdd(offsets[k], builder_.CreateMul(i, step, "", false, true), "", false, true);
  }
  return inner;
}

std::vector<Value*> Codegen::emit_for(
    Value* lo, Value* hi, std::vector<Value*> accs,
    const std::function<std::vector<Value*>(Value*, const std::vector<Value*>&)>& body) {
  llvm::Function* function = builder_.GetInsertBlock()->getParent();
  llvm::BasicBlock* before = builder_.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(context_, "loop", function);
  llvm::BasicBlock* after = llvm::BasicBlock::Create(context_, "after", function);
  builder_.CreateCondBr(builder_.CreateICmpSLT(lo, hi), loop, after);
  builder_.SetInsertPoint(loop);
  llvm::PHINode* i = builder_.CreatePHI(builder_.getInt64Ty(), 2, "i");
  i->addIncoming(lo, before);
  std::vector<llvm::PHINode*> phis;
  std::vector<Value*> current;
  for (Value* init : accs) {
    llvm::PHINode* phi = builder_.CreatePHI(init->getType(), 2, "acc");
    phi->addIncoming(init, before);
    phis.push_back(phi);
    current.push_back(phi);
  }
  std::vector<Value*> next_accs = body(i, current);
  Value* next = builder_.CreateAdd(i, builder_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  llvm::BasicBlock* latch = builder_.GetInsertBlock();
  i->addIncoming(next, latch);
  for (size_t k = 0; k < phis.size(); ++k) phis[k]->addIncoming(next_accs[k], latch);
  builder_.CreateCondBr(builder_.CreateICmpSLT(next, hi), loop, after);
  builder_.SetInsertPoint(after);
  std::vector<Value*> result;
  for (size_t k = 0; k < phis.size(); ++k) {
    llvm::PHINode* out = builder_.CreatePHI(accs[k]->getType(), 2);
    out->addIncoming(accs[k], before);
    out->addIncoming(next_accs[k], latch);
    result.push_back(out);
  }
  return result;
}

void Codegen::emit_for(Value* lo, Value* hi, const std::function<void(Value*)>& body) {
  emit_for(lo, hi, {}, [&](Value* i, const std::vector<Value*>&) {
    body(i);
    return std::vector<Value*>{};
  });
}

std::pair<Value*, Value*> Codegen::dim_range(size_t d) {
  if (split_.chunks > 0) {
    if (static_cast<int>(d) == split_.dim) return {chunk_begin_, chunk_end_};
    return {builder_.getInt64(0), sizes_[d]};
  }
  if (static_cast<int>(d) == parallel_dim(kernel_)) return {begin_, end_};
  return {builder_.getInt64(0), sizes_[d]};
}

Value* Codegen::reduce_init(ReduceOp op, DType dtype) {
  llvm::Type* type = value_type(dtype);
  if (is_float(dtype)) {
    const double inf = std::numeric_limits<double>::infinity();
    switch (op) {
      case ReduceOp::Sum: return llvm::ConstantFP::get(type, 0.0);
      case ReduceOp::Prod: return llvm::ConstantFP::get(type, 1.0);
      case ReduceOp::Max: return llvm::ConstantFP::get(type, -inf);
      case ReduceOp::Min: return llvm::ConstantFP::get(type, inf);
    }
  }
  const unsigned bits = type->getIntegerBitWidth();
  const bool u = is_unsigned(dtype);
  switch (op) {
    case ReduceOp::Sum: return llvm::ConstantInt::get(type, 0);
    case ReduceOp::Prod: return llvm::ConstantInt::get(type, 1);
    case ReduceOp::Max:
      return llvm::ConstantInt::get(context_, u ? llvm::APInt::getMinValue(bits) : llvm::APInt::getSignedMinValue(bits));
    case ReduceOp::Min:
      return llvm::ConstantInt::get(context_, u ? llvm::APInt::getMaxValue(bits) : llvm::APInt::getSignedMaxValue(bits));
  }
  throw CodegenError("unknown reduction");
}

// Note [Vectorized reductions]
// In row mode a reduction is a loop-carried register the loop vectorizer
// widens: float sums and products carry `reassoc` (the vector lanes sum
// separately and combine at the end, as torch's vectorized reductions do;
// results differ from a sequential sum in rounding only), float max/min are
// `maxnum`/`minnum` with nnan/nsz (which the vectorizer needs) and NaN is
// tracked beside them as an or-reduction of isnan, since torch's amax/amin
// propagate NaN. In tile mode accumulators live in memory, one per lane,
// and each combines in order with a NaN-propagating select.
Value* Codegen::combine(ReduceOp op, DType dtype, Value* acc, Value* x, bool in_register) {
  if (is_float(dtype)) {
    llvm::FastMathFlags flags;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Prod: {
        Value* r = op == ReduceOp::Sum ? builder_.CreateFAdd(acc, x) : builder_.CreateFMul(acc, x);
        if (in_register) {
          flags.setAllowReassoc();
          llvm::cast<llvm::Instruction>(r)->setFastMathFlags(flags);
        }
        return r;
      }
      case ReduceOp::Max:
      case ReduceOp::Min: {
        const bool max = op == ReduceOp::Max;
        if (in_register) {
          flags.setNoNaNs();
          flags.setNoSignedZeros();
          llvm::CallInst* r = llvm::cast<llvm::CallInst>(
              intrinsic(max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, acc, x));
          r->setFastMathFlags(flags);
          return r;
        }
        Value* keep = builder_.CreateOr(builder_.CreateFCmpUNO(acc, acc),
                                        max ? builder_.CreateFCmpOGE(acc, x) : builder_.CreateFCmpOLE(acc, x));
        return builder_.CreateSelect(keep, acc, x);
      }
    }
  }
  const bool boolean = dtype == DType::Bool;
  const bool u = is_unsigned(dtype);
  switch (op) {
    case ReduceOp::Sum: return boolean ? builder_.CreateOr(acc, x) : builder_.CreateAdd(acc, x);
    case ReduceOp::Prod: return boolean ? builder_.CreateAnd(acc, x) : builder_.CreateMul(acc, x);
    case ReduceOp::Max:
      if (boolean) return builder_.CreateOr(acc, x);
      return intrinsic(u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, acc, x);
    case ReduceOp::Min:
      if (boolean) return builder_.CreateAnd(acc, x);
      return intrinsic(u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, acc, x);
  }
  throw CodegenError("unknown reduction");
}

std::vector<Value*> Codegen::emit_reduced_nest(size_t level, const std::vector<Value*>& offsets, Value* row,
                                               std::vector<Value*> accs, const NestBody& body) {
  if (level == kernel_.reduced.size()) return body(offsets, row, accs);
  const size_t d = static_cast<size_t>(kernel_.reduced[level]);
  auto [lo, hi] = dim_range(d);
  return emit_for(lo, hi, std::move(accs),
                  [&](Value* i, const std::vector<Value*>& current) {
                    Value* inner_row = builder_.CreateAdd(
                        builder_.CreateMul(row, builder_.getInt64(kernel_.sizes[d]), "", true, true), i, "", true, true);
                    return emit_reduced_nest(level + 1, advance(offsets, d, i), inner_row, current, body);
                  });
}

void Codegen::reduce_phase(int phase, const std::vector<Value*>& offsets) {
  const size_t count = kernel_.exprs.size();
  std::vector<int> reductions;
  std::vector<Value*> init;
  for (size_t id = 0; id < count; ++id) {
    const Expr& e = kernel_.exprs[id];
    if (e.kind != ExprKind::Reduce || stage_[id] != phase) continue;
    reductions.push_back(static_cast<int>(id));
    init.push_back(reduce_init(static_cast<ReduceOp>(e.op), e.dtype));
    const bool float_extreme = is_float(e.dtype) && (static_cast<ReduceOp>(e.op) == ReduceOp::Max ||
                                                      static_cast<ReduceOp>(e.op) == ReduceOp::Min);
    init.push_back(float_extreme ? builder_.getFalse() : nullptr);  // the NaN flag
  }
  std::vector<Value*> carried;
  for (Value* v : init) {
    if (v != nullptr) carried.push_back(v);
  }
  std::vector<Value*> finals = emit_reduced_nest(
      0, offsets, builder_.getInt64(0), carried,
      [&](const std::vector<Value*>& point_offsets, Value* row, const std::vector<Value*>& accs) {
        Point point{pointers_at(point_offsets), phase, row, nullptr, std::vector<Value*>(count, nullptr)};
        std::vector<Value*> next;
        size_t slot = 0;
        for (size_t r = 0; r < reductions.size(); ++r) {
          const Expr& e = kernel_.exprs[reductions[r]];
          Value* x = eval(e.operands[0], point);
          next.push_back(combine(static_cast<ReduceOp>(e.op), e.dtype, accs[slot++], x, true));
          if (init[2 * r + 1] != nullptr) next.push_back(builder_.CreateOr(accs[slot++], builder_.CreateFCmpUNO(x, x)));
        }
        return next;
      });
  size_t slot = 0;
  for (size_t r = 0; r < reductions.size(); ++r) {
    Value* value = finals[slot++];
    if (init[2 * r + 1] != nullptr) {
      Value* nan = llvm::ConstantFP::getNaN(value->getType());
      value = builder_.CreateSelect(finals[slot++], nan, value);
    }
    reduced_[reductions[r]] = value;
  }
}

void Codegen::store_row_outputs(const std::vector<Value*>& offsets, bool once, bool full) {
  const size_t count = kernel_.exprs.size();
  auto varies = [&](const KernelOutput& out) {
    bool v = varies_[out.value];
    for (int d : kernel_.reduced) v = v || (out.strides[d] != 0 && kernel_.sizes[d] > 1);
    return v;
  };
  // Outputs constant along the reduced dims: once, at the row's start.
  bool any_full = false;
  Point at_start{pointers_at(offsets), 0, nullptr, nullptr, std::vector<Value*>(count, nullptr)};
  for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
    if (varies(kernel_.outputs[i])) {
      any_full = true;
    } else if (once) {
      store_output(i, eval(kernel_.outputs[i].value, at_start), at_start.pointers[kernel_.inputs.size() + i]);
    }
  }
  if (!any_full || !full) return;
  emit_reduced_nest(0, offsets, builder_.getInt64(0), {},
                    [&](const std::vector<Value*>& point_offsets, Value* row, const std::vector<Value*>&) {
                      Point point{pointers_at(point_offsets), phases_ + 1, row, nullptr,
                                  std::vector<Value*>(count, nullptr)};
                      for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
                        const KernelOutput& out = kernel_.outputs[i];
                        if (varies(out)) store_output(i, eval(out.value, point), point.pointers[kernel_.inputs.size() + i]);
                      }
                      return std::vector<Value*>{};
                    });
}

void Codegen::emit_row(const std::vector<Value*>& offsets) {
  if (split_.chunks > 0) {
    emit_split_row(offsets);
    return;
  }
  reduced_.assign(kernel_.exprs.size(), nullptr);
  std::fill(stash_phase_.begin(), stash_phase_.end(), 0);
  for (int phase = 1; phase <= phases_; ++phase) reduce_phase(phase, offsets);
  store_row_outputs(offsets, /*once=*/true, /*full=*/true);
}

Value* Codegen::slot_pointer(Value* word) {
  return builder_.CreateInBoundsGEP(builder_.getInt64Ty(), workspace_, word);
}

void Codegen::store_slot(Value* word, Value* value, DType dtype) {
  if (dtype == DType::Bool) value = builder_.CreateZExt(value, builder_.getInt8Ty());
  builder_.CreateStore(value, slot_pointer(word));
}

Value* Codegen::load_slot(Value* word, DType dtype) {
  if (dtype == DType::Bool) {
    return builder_.CreateICmpNE(builder_.CreateLoad(builder_.getInt8Ty(), slot_pointer(word)), builder_.getInt8(0));
  }
  return builder_.CreateLoad(value_type(dtype), slot_pointer(word));
}

Value* Codegen::final_word(Value* kept, int64_t slot) {
  const int64_t slots = static_cast<int64_t>(split_.reductions.size());
  const int64_t base = kSplitHeaderWords + split_.chunks * split_.kept_points * slots + slot;
  return builder_.CreateAdd(builder_.CreateMul(kept, builder_.getInt64(slots)), builder_.getInt64(base));
}

Value* Codegen::partial_word(Value* kept, int64_t slot) {
  // header + (chunk * kept_points + kept) * slots + slot
  const int64_t slots = static_cast<int64_t>(split_.reductions.size());
  Value* point = builder_.CreateAdd(builder_.CreateMul(chunk_, builder_.getInt64(split_.kept_points)), kept);
  return builder_.CreateAdd(builder_.CreateMul(point, builder_.getInt64(slots)),
                            builder_.getInt64(kSplitHeaderWords + slot));
}

// A kept point of the current chunk in a partial step (split_phase_ > 0)
// or the store step (Note [Split reductions]).
void Codegen::emit_split_row(const std::vector<Value*>& offsets) {
  reduced_.assign(kernel_.exprs.size(), nullptr);
  const int64_t slots = static_cast<int64_t>(split_.reductions.size());
  const int wanted = split_phase_ == 0 ? phases_ : split_phase_ - 1;  // combined stages readable
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int id = split_.reductions[slot];
    if (stage_[id] <= wanted) reduced_[id] = load_slot(final_word(kept_point_, slot), kernel_.exprs[id].dtype);
  }
  if (split_phase_ == 0) {
    // Outputs constant along the reduced dims from chunk 0 only.
    llvm::Function* function = builder_.GetInsertBlock()->getParent();
    llvm::BasicBlock* first = llvm::BasicBlock::Create(context_, "first_chunk", function);
    llvm::BasicBlock* rest = llvm::BasicBlock::Create(context_, "chunk_rows", function);
    builder_.CreateCondBr(builder_.CreateICmpEQ(chunk_, builder_.getInt64(0)), first, rest);
    builder_.SetInsertPoint(first);
    store_row_outputs(offsets, /*once=*/true, /*full=*/false);
    builder_.CreateBr(rest);
    builder_.SetInsertPoint(rest);
    store_row_outputs(offsets, /*once=*/false, /*full=*/true);
    return;
  }
  reduce_phase(split_phase_, offsets);
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int id = split_.reductions[slot];
    if (stage_[id] != split_phase_) continue;
    store_slot(partial_word(kept_point_, slot), reduced_[id], kernel_.exprs[id].dtype);
  }
}

// Folds the chunks' partials of phase `phase` in chunk order, per kept point.
void Codegen::emit_combine(int phase) {
  const int64_t slots = static_cast<int64_t>(split_.reductions.size());
  std::vector<int64_t> mine;
  for (int64_t slot = 0; slot < slots; ++slot) {
    if (stage_[split_.reductions[slot]] == phase) mine.push_back(slot);
  }
  emit_for(builder_.getInt64(0), builder_.getInt64(split_.kept_points), [&](Value* kept) {
    std::vector<Value*> init;
    for (int64_t slot : mine) {
      const Expr& e = kernel_.exprs[split_.reductions[slot]];
      init.push_back(reduce_init(static_cast<ReduceOp>(e.op), e.dtype));
    }
    std::vector<Value*> totals = emit_for(
        builder_.getInt64(0), builder_.getInt64(split_.chunks), init,
        [&](Value* chunk, const std::vector<Value*>& accs) {
          std::vector<Value*> next;
          Value* point = builder_.CreateAdd(builder_.CreateMul(chunk, builder_.getInt64(split_.kept_points)), kept);
          for (size_t j = 0; j < mine.size(); ++j) {
            const Expr& e = kernel_.exprs[split_.reductions[mine[j]]];
            Value* word = builder_.CreateAdd(builder_.CreateMul(point, builder_.getInt64(slots)),
                                             builder_.getInt64(kSplitHeaderWords + mine[j]));
            // In memory order, NaN winning: the same sum on any thread count.
            next.push_back(combine(static_cast<ReduceOp>(e.op), e.dtype, accs[j], load_slot(word, e.dtype), false));
          }
          return next;
        });
    for (size_t j = 0; j < mine.size(); ++j) {
      store_slot(final_word(kept, mine[j]), totals[j], kernel_.exprs[split_.reductions[mine[j]]].dtype);
    }
  });
}

void Codegen::emit_split() {
  llvm::Function* function = builder_.GetInsertBlock()->getParent();
  Value* step = builder_.CreateLoad(builder_.getInt64Ty(), workspace_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(context_, "done", function);
  llvm::SwitchInst* dispatch = builder_.CreateSwitch(step, done, static_cast<unsigned>(split_steps(split_)));
  for (int64_t s = 0; s < split_steps(split_); ++s) {
    llvm::BasicBlock* block = llvm::BasicBlock::Create(context_, "step" + std::to_string(s), function);
    dispatch->addCase(builder_.getInt64(static_cast<uint64_t>(s)), block);
    builder_.SetInsertPoint(block);
    const bool combine_step = s % 2 == 1;
    if (combine_step) {
      llvm::BasicBlock* run = llvm::BasicBlock::Create(context_, "combine", function);
      llvm::BasicBlock* skip = llvm::BasicBlock::Create(context_, "combined", function);
      builder_.CreateCondBr(builder_.CreateICmpEQ(begin_, builder_.getInt64(0)), run, skip);
      builder_.SetInsertPoint(run);
      emit_combine(static_cast<int>(s / 2 + 1));
      builder_.CreateBr(skip);
      builder_.SetInsertPoint(skip);
    } else {
      split_phase_ = s == 2 * phases_ ? 0 : static_cast<int>(s / 2 + 1);
      emit_for(begin_, end_, [&](Value* chunk) {
        chunk_ = chunk;
        chunk_begin_ = builder_.CreateMul(chunk, builder_.getInt64(split_.chunk_size));
        Value* stop = builder_.CreateAdd(chunk_begin_, builder_.getInt64(split_.chunk_size));
        Value* extent = sizes_[split_.dim];
        chunk_end_ = builder_.CreateSelect(builder_.CreateICmpSLT(stop, extent), stop, extent);
        emit_kept(0, origin(), builder_.getInt64(0));
      });
    }
    builder_.CreateBr(done);
  }
  builder_.SetInsertPoint(done);
}

void Codegen::emit_tile(const std::vector<Value*>& offsets) {
  const size_t count = kernel_.exprs.size();
  const size_t tile = static_cast<size_t>(tile_dim(kernel_));
  auto [lo, hi] = dim_range(tile);
  // for (j0 = lo; j0 < hi; j0 += kTileLanes), as a loop over block numbers.
  Value* blocks = builder_.CreateSDiv(builder_.CreateAdd(builder_.CreateSub(hi, lo), builder_.getInt64(kTileLanes - 1)),
                                      builder_.getInt64(kTileLanes));
  emit_for(builder_.getInt64(0), blocks, [&](Value* block) {
    Value* j0 = builder_.CreateAdd(lo, builder_.CreateMul(block, builder_.getInt64(kTileLanes)));
    Value* remaining = builder_.CreateSub(hi, j0);
    Value* lanes = builder_.CreateSelect(builder_.CreateICmpSLT(remaining, builder_.getInt64(kTileLanes)), remaining,
                                         builder_.getInt64(kTileLanes));
    const std::vector<Value*> base = advance(offsets, tile, j0);
    auto lane_loop = [&](const std::vector<Value*>& at, int phase, const std::function<void(Point&)>& body) {
      emit_for(builder_.getInt64(0), lanes, [&](Value* t) {
        Point point{pointers_at(advance(at, tile, t)), phase, nullptr, t, std::vector<Value*>(count, nullptr)};
        body(point);
      });
    };
    // Split (Note [Split reductions]): one phase or the store step per call;
    // a lane's kept point is the row's kept point times the tile, plus j0 + t.
    const bool split = split_.chunks > 0;
    auto lane_point = [&](Value* t) {
      return builder_.CreateAdd(builder_.CreateMul(kept_point_, sizes_[tile]), builder_.CreateAdd(j0, t));
    };
    auto lane_slot = [&](int id, Value* t) {
      return builder_.CreateInBoundsGEP(value_type(kernel_.exprs[id].dtype), lanes_[id], t);
    };
    if (split) {
      const int readable = split_phase_ == 0 ? phases_ : split_phase_ - 1;  // combined stages
      emit_for(builder_.getInt64(0), lanes, [&](Value* t) {
        for (size_t slot = 0; slot < split_.reductions.size(); ++slot) {
          const int id = split_.reductions[slot];
          if (stage_[id] > readable) continue;
          builder_.CreateStore(load_slot(final_word(lane_point(t), static_cast<int64_t>(slot)), kernel_.exprs[id].dtype),
                               lane_slot(id, t));
        }
      });
    }
    const int first_phase = split ? split_phase_ : 1;
    const int last_phase = split ? split_phase_ : phases_;
    for (int phase = std::max(first_phase, 1); phase <= last_phase; ++phase) {
      std::vector<int> reductions;
      for (size_t id = 0; id < count; ++id) {
        if (kernel_.exprs[id].kind == ExprKind::Reduce && stage_[id] == phase) reductions.push_back(static_cast<int>(id));
      }
      emit_for(builder_.getInt64(0), lanes, [&](Value* t) {
        for (int id : reductions) {
          const Expr& e = kernel_.exprs[id];
          builder_.CreateStore(reduce_init(static_cast<ReduceOp>(e.op), e.dtype),
                               builder_.CreateInBoundsGEP(value_type(e.dtype), lanes_[id], t));
        }
      });
      emit_reduced_nest(0, base, builder_.getInt64(0), {},
                        [&](const std::vector<Value*>& at, Value*, const std::vector<Value*>&) {
                          lane_loop(at, phase, [&](Point& point) {
                            for (int id : reductions) {
                              const Expr& e = kernel_.exprs[id];
                              Value* x = eval(e.operands[0], point);
                              Value* slot = builder_.CreateInBoundsGEP(value_type(e.dtype), lanes_[id], point.lane);
                              Value* acc = builder_.CreateLoad(value_type(e.dtype), slot);
                              builder_.CreateStore(combine(static_cast<ReduceOp>(e.op), e.dtype, acc, x, false), slot);
                            }
                          });
                          return std::vector<Value*>{};
                        });
      if (split) {
        emit_for(builder_.getInt64(0), lanes, [&](Value* t) {
          for (size_t slot = 0; slot < split_.reductions.size(); ++slot) {
            const int id = split_.reductions[slot];
            if (stage_[id] != phase) continue;
            Value* value = builder_.CreateLoad(value_type(kernel_.exprs[id].dtype), lane_slot(id, t));
            store_slot(partial_word(lane_point(t), static_cast<int64_t>(slot)), value, kernel_.exprs[id].dtype);
          }
        });
      }
    }
    if (split && split_phase_ != 0) return;  // a partial step stores no output
    std::vector<size_t> once, full;
    for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
      const KernelOutput& out = kernel_.outputs[i];
      bool varies = varies_[out.value];
      for (int d : kernel_.reduced) varies = varies || (out.strides[d] != 0 && kernel_.sizes[d] > 1);
      (varies ? full : once).push_back(i);
    }
    if (!once.empty()) {
      // Split: chunk 0 stores them.
      llvm::BasicBlock* after = nullptr;
      if (split) {
        llvm::Function* function = builder_.GetInsertBlock()->getParent();
        llvm::BasicBlock* first = llvm::BasicBlock::Create(context_, "first_chunk", function);
        after = llvm::BasicBlock::Create(context_, "stored_once", function);
        builder_.CreateCondBr(builder_.CreateICmpEQ(chunk_, builder_.getInt64(0)), first, after);
        builder_.SetInsertPoint(first);
      }
      lane_loop(base, 0, [&](Point& point) {
        for (size_t i : once) {
          store_output(i, eval(kernel_.outputs[i].value, point), point.pointers[kernel_.inputs.size() + i]);
        }
      });
      if (after != nullptr) {
        builder_.CreateBr(after);
        builder_.SetInsertPoint(after);
      }
    }
    if (!full.empty()) {
      emit_reduced_nest(0, base, builder_.getInt64(0), {},
                        [&](const std::vector<Value*>& at, Value*, const std::vector<Value*>&) {
                          lane_loop(at, phases_ + 1, [&](Point& point) {
                            for (size_t i : full) {
                              store_output(i, eval(kernel_.outputs[i].value, point),
                                           point.pointers[kernel_.inputs.size() + i]);
                            }
                          });
                          return std::vector<Value*>{};
                        });
    }
  });
}

void Codegen::emit_kept(size_t d, const std::vector<Value*>& offsets, Value* kept) {
  const size_t rank = kernel_.sizes.size();
  const size_t stop = kernel_.reduced.empty() ? rank : static_cast<size_t>(kernel_.reduced.front());
  if (d == stop) {
    kept_point_ = kept;
    if (!kernel_.reduced.empty()) {
      if (tile_dim(kernel_) >= 0) {
        emit_tile(offsets);
      } else {
        emit_row(offsets);
      }
      return;
    }
    Point point{pointers_at(offsets), 0, nullptr, nullptr, std::vector<Value*>(kernel_.exprs.size(), nullptr)};
    for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
      store_output(i, eval(kernel_.outputs[i].value, point), point.pointers[kernel_.inputs.size() + i]);
    }
    return;
  }
  auto [lo, hi] = dim_range(d);
  emit_for(lo, hi, [&](Value* i) {
    Value* inner = builder_.CreateAdd(builder_.CreateMul(kept, sizes_[d]), i);
    emit_kept(d + 1, advance(offsets, d, i), inner);
  });
}

void Codegen::emit(const std::string& name) {
  llvm::Type* ptr = builder_.getPtrTy();
  llvm::Type* i64 = builder_.getInt64Ty();
  llvm::FunctionType* signature = llvm::FunctionType::get(builder_.getVoidTy(), {ptr, ptr, i64, i64}, false);
  llvm::Function* function = llvm::Function::Create(signature, llvm::Function::ExternalLinkage, name, module_);
  function->setDoesNotThrow();
  function->addFnAttr("target-cpu", host_cpu().name);
  function->addFnAttr("target-features", host_cpu().features);
  function->addParamAttr(0, llvm::Attribute::NoCapture);
  function->addParamAttr(0, llvm::Attribute::ReadOnly);
  function->addParamAttr(1, llvm::Attribute::NoCapture);
  function->addParamAttr(1, llvm::Attribute::ReadOnly);
  llvm::Argument* data = function->getArg(0);
  begin_ = function->getArg(2);
  end_ = function->getArg(3);
  builder_.SetInsertPoint(llvm::BasicBlock::Create(context_, "entry", function));

  // Outputs are fresh tensors: no load aliases a store, no store another.
  llvm::MDBuilder metadata(context_);
  llvm::MDNode* domain = metadata.createAliasScopeDomain("kiln.kernel");
  std::vector<llvm::Metadata*> out_scopes;
  for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
    out_scopes.push_back(metadata.createAliasScope("out" + std::to_string(i), domain));
  }
  loads_noalias_ = llvm::MDNode::get(context_, out_scopes);
  for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
    store_scope_.push_back(llvm::MDNode::get(context_, {out_scopes[i]}));
    std::vector<llvm::Metadata*> others;
    for (size_t j = 0; j < out_scopes.size(); ++j) {
      if (j != i) others.push_back(out_scopes[j]);
    }
    store_noalias_.push_back(others.empty() ? nullptr : llvm::MDNode::get(context_, others));
  }

  const size_t operands = kernel_.inputs.size() + kernel_.outputs.size();
  for (size_t k = 0; k < operands; ++k) {
    Value* slot = builder_.CreateConstInBoundsGEP1_64(ptr, data, k);
    Value* base = builder_.CreateLoad(ptr, slot);
    if (k < kernel_.inputs.size() && kernel_.inputs[k].offset != 0) {
      base = builder_.CreateInBoundsGEP(storage_type(operand_dtype(k)), base,
                                        builder_.getInt64(kernel_.inputs[k].offset));
    }
    bases_.push_back(base);
  }
  index_operand_.assign(kernel_.exprs.size(), -1);
  for (size_t id = 0; id < kernel_.exprs.size(); ++id) {
    if (kernel_.exprs[id].kind != ExprKind::Index) continue;
    index_operand_[id] = static_cast<int>(operands + index_exprs_.size());
    index_exprs_.push_back(static_cast<int>(id));
  }
  // Sizes and strides are compiled in (the ABI's sizes must equal them),
  // but for the outer dims' (Note [Run-time outer layout]).
  split_ = split_reduction(kernel_);
  outer_ = runtime_outer_dims(kernel_, split_);
  llvm::Argument* words = function->getArg(1);
  auto word = [&](size_t w) -> Value* { return builder_.CreateLoad(i64, builder_.CreateConstInBoundsGEP1_64(i64, words, w)); };
  for (size_t d = 0; d < kernel_.sizes.size(); ++d) {
    sizes_.push_back(static_cast<int>(d) < outer_.sizes ? word(d) : builder_.getInt64(kernel_.sizes[d]));
  }
  outer_strides_.assign(operands, {});
  for (size_t k = 0; k < operands; ++k) {
    for (int d = 0; d < outer_.strides; ++d) {
      outer_strides_[k].push_back(operand_stride(k, d) == 0 ? nullptr
                                                            : word(kernel_.sizes.size() + k * outer_.strides + d));
    }
  }
  stage_ = expr_stages(kernel_);
  varies_ = expr_varies(kernel_);
  phases_ = 0;
  for (int s : stage_) phases_ = std::max(phases_, s);
  plan_stash();
  lanes_.assign(kernel_.exprs.size(), nullptr);
  if (tile_dim(kernel_) >= 0) {
    for (size_t id = 0; id < kernel_.exprs.size(); ++id) {
      if (kernel_.exprs[id].kind != ExprKind::Reduce) continue;
      lanes_[id] = builder_.CreateAlloca(value_type(kernel_.exprs[id].dtype), builder_.getInt64(kTileLanes), "lanes");
    }
  }
  if (split_.chunks > 0) {
    Value* slot = builder_.CreateConstInBoundsGEP1_64(ptr, data, operands);
    workspace_ = builder_.CreateLoad(ptr, slot);
    emit_split();
  } else if (parallel_dim(kernel_) < 0) {
    // Nothing to split: the whole space, once, from the call that has 0.
    llvm::BasicBlock* run = llvm::BasicBlock::Create(context_, "run", function);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(context_, "done", function);
    builder_.CreateCondBr(builder_.CreateICmpEQ(begin_, builder_.getInt64(0)), run, done);
    builder_.SetInsertPoint(run);
    emit_kept(0, origin(), builder_.getInt64(0));
    builder_.CreateBr(done);
    builder_.SetInsertPoint(done);
  } else {
    emit_kept(0, origin(), builder_.getInt64(0));
  }
  builder_.CreateRetVoid();
}

// A symbol no other kernel of this process has.
std::string unique_symbol(const std::string& name) {
  static std::atomic<int64_t> counter{0};
  std::string clean;
  for (char c : name) clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return "kiln_" + clean + "_" + std::to_string(counter.fetch_add(1));
}

}  // namespace

bool cpu_codegen_available() { return true; }

CpuKernel compile_cpu_kernel(const Kernel& kernel, bool keep_ir) {
  const std::string problem = verify(kernel);
  if (!problem.empty()) throw CodegenError("invalid kernel " + kernel.name + ": " + problem);
  const std::string symbol = unique_symbol(kernel.name);
  return jit_kernel(
      symbol,
      [&](llvm::LLVMContext& context, llvm::Module& module) { Codegen(kernel, context, module).emit(symbol); },
      keep_ir);
}

std::string kernel_ir_text(const Kernel& kernel) {
  const std::string problem = verify(kernel);
  if (!problem.empty()) throw CodegenError("invalid kernel " + kernel.name + ": " + problem);
  return emit_ir_text("kiln_kernel", [&](llvm::LLVMContext& context, llvm::Module& module) {
    Codegen(kernel, context, module).emit("kiln_kernel");
  });
}

}  // namespace kiln::inductor::cpu
