// Kernel IR -> LLVM IR through IRBuilder, then jit_compile. The function
// follows Note [CPU kernel ABI]; the loop nest runs the iteration space in
// row-major order with the last dim innermost, so contiguous outputs are
// written sequentially and the loop vectorizer sees unit-stride accesses.
// Note [Kernel math functions] says how transcendental ops are called.

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include <atomic>
#include <functional>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/llvm_module.h"
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
// calls stay scalar. The callees are declared memory(none): kernels do not
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
  // Computes every expression and stores the outputs, at the point whose
  // operands' element pointers are `pointers` (inputs, then outputs).
  void emit_point(const std::vector<Value*>& pointers);
  // `for (i = 0; i < n; ++i) body(i)`; leaves the builder after the loop.
  void emit_for(Value* n, const std::function<void(Value*)>& body);
  // The loops over dims d.., with each operand's element offset so far.
  void emit_loops(size_t d, const std::vector<Value*>& offsets);

  int64_t operand_stride(size_t operand, size_t d) const {
    return operand < kernel_.inputs.size()
               ? kernel_.inputs[operand].strides[d]
               : kernel_.outputs[operand - kernel_.inputs.size()].strides[d];
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
  llvm::MDNode* loads_noalias_ = nullptr;
  std::vector<llvm::MDNode*> store_scope_, store_noalias_;  // per output
};

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
  llvm::Function* callee = module_.getFunction(scalar_name);
  if (callee == nullptr) {
    callee = llvm::Function::Create(signature, llvm::Function::ExternalLinkage, scalar_name, module_);
    callee->setDoesNotAccessMemory();
    callee->setDoesNotThrow();
    callee->addFnAttr(llvm::Attribute::WillReturn);
  }
  llvm::CallInst* call = builder_.CreateCall(callee, args);
  call->setDoesNotAccessMemory();
  if (vector_math_available()) {
    const int lanes = single ? 8 : 4;
    const std::string params_code(args.size(), 'v');
    const std::string vector_name =
        "_ZGVdN" + std::to_string(lanes) + params_code + "_" + scalar_name;
    if (module_.getFunction(vector_name) == nullptr) {
      llvm::Type* vector = llvm::FixedVectorType::get(type, lanes);
      std::vector<llvm::Type*> vector_params(args.size(), vector);
      llvm::Function* variant = llvm::Function::Create(
          llvm::FunctionType::get(vector, vector_params, false), llvm::Function::ExternalLinkage,
          vector_name, module_);
      variant->setDoesNotAccessMemory();
      variant->setDoesNotThrow();
      // Kept until the vectorizer has looked for it (as InjectTLIMappings does).
      llvm::appendToCompilerUsed(module_, {variant});
    }
    const std::string abi = "_ZGV_LLVM_N" + std::to_string(lanes) + params_code + "_" +
                            scalar_name + "(" + vector_name + ")";
    call->addFnAttr(llvm::Attribute::get(context_, "vector-function-abi-variant", abi));
  }
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

void Codegen::emit_point(const std::vector<Value*>& pointers) {
  std::vector<Value*> values(kernel_.exprs.size(), nullptr);
  for (size_t id = 0; id < kernel_.exprs.size(); ++id) {
    const Expr& e = kernel_.exprs[id];
    auto operand = [&](int i) { return values[e.operands[i]]; };
    auto operand_dtype = [&](int i) { return kernel_.exprs[e.operands[i]].dtype; };
    switch (e.kind) {
      case ExprKind::Load: {
        llvm::LoadInst* load = builder_.CreateLoad(storage_type(e.dtype), pointers[e.input]);
        if (loads_noalias_ != nullptr) load->setMetadata(llvm::LLVMContext::MD_noalias, loads_noalias_);
        values[id] = e.dtype == DType::Bool ? builder_.CreateICmpNE(load, builder_.getInt8(0)) : load;
        break;
      }
      case ExprKind::Constant:
        values[id] = is_float(e.dtype) ? static_cast<Value*>(llvm::ConstantFP::get(value_type(e.dtype), e.constant))
                                       : llvm::ConstantInt::get(value_type(e.dtype), e.integer, /*signed=*/true);
        break;
      case ExprKind::Cast: values[id] = cast(operand(0), operand_dtype(0), e.dtype); break;
      case ExprKind::Unary: values[id] = emit_unary(static_cast<UnaryOp>(e.op), operand(0), operand_dtype(0)); break;
      case ExprKind::Binary:
        values[id] = emit_binary(static_cast<BinaryOp>(e.op), operand(0), operand(1), e.dtype);
        break;
      case ExprKind::Compare:
        values[id] = emit_compare(static_cast<CompareOp>(e.op), operand(0), operand(1), operand_dtype(0));
        break;
      case ExprKind::Select: values[id] = builder_.CreateSelect(operand(0), operand(1), operand(2)); break;
    }
  }
  for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
    const KernelOutput& out = kernel_.outputs[i];
    Value* v = cast(values[out.value], kernel_.exprs[out.value].dtype, out.dtype);
    if (out.dtype == DType::Bool) v = builder_.CreateZExt(v, builder_.getInt8Ty());
    llvm::StoreInst* store = builder_.CreateStore(v, pointers[kernel_.inputs.size() + i]);
    store->setMetadata(llvm::LLVMContext::MD_alias_scope, store_scope_[i]);
    if (store_noalias_[i] != nullptr) store->setMetadata(llvm::LLVMContext::MD_noalias, store_noalias_[i]);
  }
}

void Codegen::emit_for(Value* n, const std::function<void(Value*)>& body) {
  llvm::Function* function = builder_.GetInsertBlock()->getParent();
  llvm::BasicBlock* before = builder_.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(context_, "loop", function);
  llvm::BasicBlock* after = llvm::BasicBlock::Create(context_, "after", function);
  builder_.CreateCondBr(builder_.CreateICmpSGT(n, builder_.getInt64(0)), loop, after);
  builder_.SetInsertPoint(loop);
  llvm::PHINode* i = builder_.CreatePHI(builder_.getInt64Ty(), 2, "i");
  i->addIncoming(builder_.getInt64(0), before);
  body(i);
  Value* next = builder_.CreateAdd(i, builder_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, builder_.GetInsertBlock());
  builder_.CreateCondBr(builder_.CreateICmpSLT(next, n), loop, after);
  builder_.SetInsertPoint(after);
}

void Codegen::emit_loops(size_t d, const std::vector<Value*>& offsets) {
  const size_t rank = kernel_.sizes.size();
  const size_t operands = bases_.size();
  if (rank == 0) {
    emit_point(bases_);
    return;
  }
  if (d + 1 < rank) {
    emit_for(sizes_[d], [&](Value* i) {
      std::vector<Value*> inner(operands);
      for (size_t k = 0; k < operands; ++k) {
        const int64_t stride = operand_stride(k, d);
        inner[k] = stride == 0 ? offsets[k]
                               : builder_.CreateAdd(offsets[k], builder_.CreateMul(i, builder_.getInt64(stride), "", false, true),
                                                    "", false, true);
      }
      emit_loops(d + 1, inner);
    });
    return;
  }
  // The innermost dim: each operand's row start is invariant in this loop.
  std::vector<Value*> rows(operands);
  for (size_t k = 0; k < operands; ++k) {
    rows[k] = builder_.CreateInBoundsGEP(storage_type(operand_dtype(k)), bases_[k], offsets[k]);
  }
  emit_for(sizes_[d], [&](Value* j) {
    std::vector<Value*> pointers(operands);
    for (size_t k = 0; k < operands; ++k) {
      const int64_t stride = operand_stride(k, d);
      Value* index = stride == 1 ? j : builder_.CreateMul(j, builder_.getInt64(stride), "", false, true);
      pointers[k] = stride == 0 ? rows[k]
                                : builder_.CreateInBoundsGEP(storage_type(operand_dtype(k)), rows[k], index);
    }
    emit_point(pointers);
  });
}

void Codegen::emit(const std::string& name) {
  llvm::Type* ptr = builder_.getPtrTy();
  llvm::FunctionType* signature = llvm::FunctionType::get(builder_.getVoidTy(), {ptr, ptr}, false);
  llvm::Function* function = llvm::Function::Create(signature, llvm::Function::ExternalLinkage, name, module_);
  function->setDoesNotThrow();
  function->addFnAttr("target-cpu", host_cpu().name);
  function->addFnAttr("target-features", host_cpu().features);
  function->addParamAttr(0, llvm::Attribute::NoCapture);
  function->addParamAttr(0, llvm::Attribute::ReadOnly);
  function->addParamAttr(1, llvm::Attribute::NoCapture);
  function->addParamAttr(1, llvm::Attribute::ReadOnly);
  llvm::Argument* data = function->getArg(0);
  llvm::Argument* sizes = function->getArg(1);
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
  for (size_t d = 0; d < kernel_.sizes.size(); ++d) {
    sizes_.push_back(builder_.CreateLoad(builder_.getInt64Ty(), builder_.CreateConstInBoundsGEP1_64(builder_.getInt64Ty(), sizes, d)));
  }
  emit_loops(0, std::vector<Value*>(operands, builder_.getInt64(0)));
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
  JitModulePtr handle(new JitModule());
  handle->context = std::make_unique<llvm::LLVMContext>();
  handle->module = std::make_unique<llvm::Module>(symbol, *handle->context);
  CpuKernel result;
  try {
    Codegen(kernel, *handle->context, *handle->module).emit(symbol);
    if (keep_ir) {
      llvm::raw_string_ostream ir(result.llvm_ir);
      handle->module->print(ir, nullptr);
    }
    JitResult compiled = jit_compile(std::move(handle), symbol, keep_ir);
    result.fn = reinterpret_cast<CpuKernelFn>(compiled.address);
    result.optimized_llvm_ir = std::move(compiled.optimized_ir);
    result.symbol = symbol;
    result.object = std::move(compiled.object);
  } catch (const JitError& error) {
    throw CodegenError(error.what());
  }
  return result;
}

}  // namespace kiln::inductor::cpu
