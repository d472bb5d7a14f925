// GemmSpec -> LLVM IR through IRBuilder, then jit_compile (Note [GEMM
// kernels] in gemm.cpp). The kernel function loops over its tasks; per
// task it packs B blocks (pack function) and calls one register-tile
// function per tile shape: full tiles, the last rows (m % mr), the last
// columns (n % nr) and their corner, each with its shape as constants.
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <atomic>
#include <functional>

#include "inductor/cpu/gemm.h"
#include "inductor/cpu/llvm_module.h"

namespace kiln::inductor::cpu {
namespace {

using llvm::BasicBlock;
using llvm::Function;
using llvm::Value;

class GemmCodegen {
 public:
  GemmCodegen(const GemmSpec& spec, llvm::LLVMContext& context, llvm::Module& module)
      : spec_(spec), plan_(plan_gemm(spec)), context_(context), module_(module), builder_(context) {
    element_ = spec.dtype == graph::DType::Float64 ? builder_.getDoubleTy() : builder_.getFloatTy();
    item_ = spec.dtype == graph::DType::Float64 ? 8 : 4;
    vector_type_ = llvm::FixedVectorType::get(element_, static_cast<unsigned>(plan_.vector));
  }

  // Emits the kernel function named `symbol` (CpuKernelFn's signature).
  void emit(const std::string& symbol);

 private:
  llvm::ConstantInt* i64(int64_t value) { return builder_.getInt64(static_cast<uint64_t>(value)); }
  Value* at(Value* base, Value* offset) { return builder_.CreateInBoundsGEP(element_, base, offset); }
  Value* at(Value* base, int64_t offset) { return at(base, i64(offset)); }
  Function* new_function(const std::string& name, llvm::FunctionType* type, bool exported);
  // for (i = begin; i < end; i += step) body(i), at the insert point; with
  // `unroll`, the loop asks LLVM to unroll it that many times.
  // With `vectorize` false, the loop vectorizer leaves it alone (the pack's
  // rows are vectors already; widened over k they became gathers and scatters).
  void loop(Value* begin, Value* end, int64_t step, const std::function<void(Value*)>& body, unsigned unroll = 0,
            bool vectorize = true);
  // if (condition) body(), at the insert point.
  void when(Value* condition, const std::function<void()>& body);
  // The register tile of `rows` x `columns` (columns <= nr) as a function
  // (a, panel, c, kc, accumulate).
  Function* tile_function(int64_t rows, int64_t columns);
  // Packs a kc x nc block of B (its first element at `b`) into nr-column
  // panels [kc][nr], zero-padded: (b, panel, kc, nc).
  Function* pack_function();
  // The store of one vector of a tile row: lanes < `lanes` only.
  void store_lanes(Value* value, Value* pointer, int64_t lanes, bool accumulate);
  llvm::Constant* lane_mask(int64_t lanes);

  const GemmSpec& spec_;
  const GemmPlan plan_;
  llvm::LLVMContext& context_;
  llvm::Module& module_;
  llvm::IRBuilder<> builder_;
  llvm::Type* element_ = nullptr;
  llvm::FixedVectorType* vector_type_ = nullptr;
  int64_t item_ = 4;
};

Function* GemmCodegen::new_function(const std::string& name, llvm::FunctionType* type, bool exported) {
  Function* function = Function::Create(
      type, exported ? Function::ExternalLinkage : Function::InternalLinkage, name, module_);
  function->addFnAttr("target-cpu", host_cpu().name);
  function->addFnAttr("target-features", host_cpu().features);
  function->addFnAttr(llvm::Attribute::NoUnwind);
  // Tiles and packing stay functions of their own: inlined into the task
  // loops they were unrolled and duplicated there, tripling compile times
  // (~90 ms a kernel) for no faster code; a call per tile is noise.
  if (!exported) function->addFnAttr(llvm::Attribute::NoInline);
  return function;
}

void GemmCodegen::loop(Value* begin, Value* end, int64_t step, const std::function<void(Value*)>& body,
                       unsigned unroll, bool vectorize) {
  Function* function = builder_.GetInsertBlock()->getParent();
  BasicBlock* before = builder_.GetInsertBlock();
  BasicBlock* head = BasicBlock::Create(context_, "loop", function);
  BasicBlock* inside = BasicBlock::Create(context_, "body", function);
  BasicBlock* after = BasicBlock::Create(context_, "after", function);
  builder_.CreateBr(head);
  builder_.SetInsertPoint(head);
  llvm::PHINode* index = builder_.CreatePHI(builder_.getInt64Ty(), 2, "i");
  index->addIncoming(begin, before);
  builder_.CreateCondBr(builder_.CreateICmpSLT(index, end), inside, after);
  builder_.SetInsertPoint(inside);
  body(index);
  Value* next = builder_.CreateAdd(index, i64(step), "", /*HasNUW=*/true, /*HasNSW=*/true);
  index->addIncoming(next, builder_.GetInsertBlock());
  llvm::BranchInst* back = builder_.CreateBr(head);
  // A self-referencing loop id carrying the hints.
  llvm::TempMDTuple placeholder = llvm::MDNode::getTemporary(context_, {});
  std::vector<llvm::Metadata*> operands = {placeholder.get()};
  if (unroll > 1) {
    llvm::Metadata* count[] = {llvm::MDString::get(context_, "llvm.loop.unroll.count"),
                               llvm::ConstantAsMetadata::get(builder_.getInt32(unroll))};
    operands.push_back(llvm::MDNode::get(context_, count));
  }
  if (!vectorize) {
    llvm::Metadata* off[] = {llvm::MDString::get(context_, "llvm.loop.vectorize.enable"),
                             llvm::ConstantAsMetadata::get(builder_.getFalse())};
    operands.push_back(llvm::MDNode::get(context_, off));
  }
  if (operands.size() > 1) {
    llvm::MDNode* id = llvm::MDNode::getDistinct(context_, operands);
    id->replaceOperandWith(0, id);
    back->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
  builder_.SetInsertPoint(after);
}

void GemmCodegen::when(Value* condition, const std::function<void()>& body) {
  Function* function = builder_.GetInsertBlock()->getParent();
  BasicBlock* then = BasicBlock::Create(context_, "then", function);
  BasicBlock* after = BasicBlock::Create(context_, "endif", function);
  builder_.CreateCondBr(condition, then, after);
  builder_.SetInsertPoint(then);
  body();
  builder_.CreateBr(after);
  builder_.SetInsertPoint(after);
}

llvm::Constant* GemmCodegen::lane_mask(int64_t lanes) {
  std::vector<llvm::Constant*> bits;
  for (int64_t lane = 0; lane < plan_.vector; ++lane) bits.push_back(builder_.getInt1(lane < lanes));
  return llvm::ConstantVector::get(bits);
}

void GemmCodegen::store_lanes(Value* value, Value* pointer, int64_t lanes, bool accumulate) {
  const llvm::Align align(static_cast<uint64_t>(item_));
  if (lanes == plan_.vector) {
    if (accumulate) value = builder_.CreateFAdd(builder_.CreateAlignedLoad(vector_type_, pointer, align), value);
    builder_.CreateAlignedStore(value, pointer, align);
    return;
  }
  llvm::Constant* mask = lane_mask(lanes);
  if (accumulate) {
    Value* old = builder_.CreateMaskedLoad(vector_type_, pointer, align, mask,
                                           llvm::Constant::getNullValue(vector_type_));
    value = builder_.CreateFAdd(old, value);
  }
  builder_.CreateMaskedStore(value, pointer, align, mask);
}

Function* GemmCodegen::tile_function(int64_t rows, int64_t columns) {
  llvm::Type* ptr = builder_.getPtrTy();
  llvm::FunctionType* type = llvm::FunctionType::get(
      builder_.getVoidTy(), {ptr, ptr, ptr, builder_.getInt64Ty(), builder_.getInt1Ty()}, false);
  Function* function =
      new_function("tile_" + std::to_string(rows) + "x" + std::to_string(columns), type, /*exported=*/false);
  for (unsigned p = 0; p < 3; ++p) {
    function->addParamAttr(p, llvm::Attribute::NoAlias);
    function->addParamAttr(p, llvm::Attribute::NoCapture);
  }
  auto args = function->arg_begin();
  Value* a = &*args++;
  Value* panel = &*args++;
  Value* c = &*args++;
  Value* kc = &*args++;
  Value* accumulate = &*args++;
  const llvm::IRBuilderBase::InsertPoint saved = builder_.saveIP();
  builder_.SetInsertPoint(BasicBlock::Create(context_, "entry", function));
  const int64_t vectors = (columns + plan_.vector - 1) / plan_.vector;
  // Accumulators in allocas: SROA turns them into registers.
  std::vector<Value*> acc;
  for (int64_t i = 0; i < rows * vectors; ++i) {
    acc.push_back(builder_.CreateAlloca(vector_type_));
    builder_.CreateStore(llvm::Constant::getNullValue(vector_type_), acc.back());
  }
  const llvm::Align panel_align(static_cast<uint64_t>(plan_.vector * item_));
  const llvm::Align scalar_align(static_cast<uint64_t>(item_));
  loop(i64(0), kc, 1, [&](Value* k) {
    std::vector<Value*> b;
    Value* row = builder_.CreateMul(k, i64(plan_.nr));
    for (int64_t v = 0; v < vectors; ++v) {
      Value* offset = builder_.CreateAdd(row, i64(v * plan_.vector));
      b.push_back(builder_.CreateAlignedLoad(vector_type_, at(panel, offset), panel_align));
    }
    Value* a_k = builder_.CreateMul(k, i64(spec_.a_col));
    for (int64_t r = 0; r < rows; ++r) {
      Value* element = builder_.CreateAlignedLoad(
          element_, at(a, builder_.CreateAdd(a_k, i64(r * spec_.a_row))), scalar_align);
      Value* splat = builder_.CreateVectorSplat(static_cast<unsigned>(plan_.vector), element);
      for (int64_t v = 0; v < vectors; ++v) {
        Value* sum = builder_.CreateLoad(vector_type_, acc[r * vectors + v]);
        sum = builder_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vector_type_}, {splat, b[v], sum});
        builder_.CreateStore(sum, acc[r * vectors + v]);
      }
    }
  }, /*unroll=*/4);
  // Later depth blocks add into C; the first stores.
  Function* self = function;
  BasicBlock* add = BasicBlock::Create(context_, "add", self);
  BasicBlock* store = BasicBlock::Create(context_, "store", self);
  BasicBlock* done = BasicBlock::Create(context_, "done", self);
  builder_.CreateCondBr(accumulate, add, store);
  for (bool adding : {true, false}) {
    builder_.SetInsertPoint(adding ? add : store);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t v = 0; v < vectors; ++v) {
        const int64_t lanes = std::min(plan_.vector, columns - v * plan_.vector);
        Value* value = builder_.CreateLoad(vector_type_, acc[r * vectors + v]);
        store_lanes(value, at(c, r * spec_.n + v * plan_.vector), lanes, adding);
      }
    }
    builder_.CreateBr(done);
  }
  builder_.SetInsertPoint(done);
  builder_.CreateRetVoid();
  builder_.restoreIP(saved);
  return function;
}

Function* GemmCodegen::pack_function() {
  llvm::Type* ptr = builder_.getPtrTy();
  llvm::FunctionType* type =
      llvm::FunctionType::get(builder_.getVoidTy(), {ptr, ptr, builder_.getInt64Ty(), builder_.getInt64Ty()}, false);
  Function* function = new_function("pack_b", type, /*exported=*/false);
  for (unsigned p = 0; p < 2; ++p) {
    function->addParamAttr(p, llvm::Attribute::NoAlias);
    function->addParamAttr(p, llvm::Attribute::NoCapture);
  }
  auto args = function->arg_begin();
  Value* b = &*args++;
  Value* panel = &*args++;
  Value* kc = &*args++;
  Value* nc = &*args++;
  const llvm::IRBuilderBase::InsertPoint saved = builder_.saveIP();
  builder_.SetInsertPoint(BasicBlock::Create(context_, "entry", function));
  const int64_t nr = plan_.nr;
  const llvm::Align scalar_align(static_cast<uint64_t>(item_));
  Value* full = builder_.CreateUDiv(nc, i64(nr));
  Value* edge = builder_.CreateSub(nc, builder_.CreateMul(full, i64(nr)));
  // B[k][j] -> panel[(j / nr) * kc * nr + k * nr + j % nr]; columns j of
  // the block from 0 to `columns` are real, the rest of the panel zero.
  auto copy_panel = [&](Value* p, int64_t columns) {
    Value* source = at(b, builder_.CreateMul(p, i64(nr * spec_.b_col)));
    Value* target = at(panel, builder_.CreateMul(builder_.CreateMul(p, kc), i64(nr)));
    const llvm::Align panel_align(static_cast<uint64_t>(plan_.vector * item_));
    Value* zero = llvm::Constant::getNullValue(vector_type_);
    // One row of the panel per k, a vector at a time: loaded whole where B's
    // rows are contiguous, else element by element (B transposed or strided).
    loop(i64(0), kc, 1, [&](Value* k) {
      Value* from = at(source, builder_.CreateMul(k, i64(spec_.b_row)));
      Value* to = at(target, builder_.CreateMul(k, i64(nr)));
      for (int64_t v = 0; v < nr / plan_.vector; ++v) {
        const int64_t lanes = std::clamp<int64_t>(columns - v * plan_.vector, 0, plan_.vector);
        Value* row = zero;
        if (lanes > 0 && spec_.b_col == 1) {
          Value* pointer = at(from, v * plan_.vector);
          row = lanes == plan_.vector
                    ? static_cast<Value*>(builder_.CreateAlignedLoad(vector_type_, pointer, scalar_align))
                    : builder_.CreateMaskedLoad(vector_type_, pointer, scalar_align, lane_mask(lanes), zero);
        } else {
          for (int64_t lane = 0; lane < lanes; ++lane) {
            Value* element = builder_.CreateAlignedLoad(
                element_, at(from, (v * plan_.vector + lane) * spec_.b_col), scalar_align);
            row = builder_.CreateInsertElement(row, element, static_cast<uint64_t>(lane));
          }
        }
        builder_.CreateAlignedStore(row, at(to, v * plan_.vector), panel_align);
      }
    }, /*unroll=*/0, /*vectorize=*/false);
  };
  loop(i64(0), full, 1, [&](Value* p) { copy_panel(p, nr); });
  const int64_t last = spec_.n % nr;  // a block's edge is 0 or this (blocks are multiples of nr)
  if (last != 0) {
    when(builder_.CreateICmpNE(edge, i64(0)), [&] { copy_panel(full, last); });
  }
  builder_.CreateRetVoid();
  builder_.restoreIP(saved);
  return function;
}

void GemmCodegen::emit(const std::string& symbol) {
  llvm::Type* ptr = builder_.getPtrTy();
  llvm::Type* i64_type = builder_.getInt64Ty();
  llvm::FunctionType* type = llvm::FunctionType::get(builder_.getVoidTy(), {ptr, ptr, i64_type, i64_type}, false);
  Function* function = new_function(symbol, type, /*exported=*/true);
  function->addParamAttr(0, llvm::Attribute::NoCapture);
  function->addParamAttr(0, llvm::Attribute::ReadOnly);
  const int64_t mr = plan_.mr, nr = plan_.nr;
  const int64_t columns_left = spec_.n % nr;
  const bool any_rows = spec_.rows_at_run_time;  // Note [GEMM rows at run time]
  // Short-row tiles by row count (1 .. mr-1): the one m % mr needs, or all.
  std::vector<Function*> tile_rows(static_cast<size_t>(mr), nullptr), tile_corner(static_cast<size_t>(mr), nullptr);
  for (int64_t r = 1; r < mr; ++r) {
    if (!any_rows && r != spec_.m % mr) continue;
    tile_rows[r] = tile_function(r, nr);
    if (columns_left) tile_corner[r] = tile_function(r, columns_left);
  }
  Function* pack = pack_function();
  Function* tile_full = tile_function(mr, nr);
  Function* tile_columns = columns_left ? tile_function(mr, columns_left) : nullptr;

  auto args = function->arg_begin();
  Value* data = &*args++;
  Value* words = &*args++;  // gemm_row_words: read only with rows at run time
  Value* begin = &*args++;
  Value* end = &*args++;
  builder_.SetInsertPoint(BasicBlock::Create(context_, "entry", function));
  auto word = [&](int64_t w) -> Value* {
    return builder_.CreateLoad(i64_type, builder_.CreateConstInBoundsGEP1_64(i64_type, words, w));
  };
  Value* m = any_rows ? word(0) : i64(spec_.m);
  Value* mb = any_rows ? word(1) : i64(plan_.mb);
  Value* m_blocks = any_rows ? word(2) : i64(plan_.m_blocks);
  Value* a0 = builder_.CreateLoad(ptr, builder_.CreateConstInBoundsGEP1_64(ptr, data, 0));
  Value* b0 = builder_.CreateLoad(ptr, builder_.CreateConstInBoundsGEP1_64(ptr, data, 1));
  Value* c0 = builder_.CreateLoad(ptr, builder_.CreateConstInBoundsGEP1_64(ptr, data, 2));
  llvm::AllocaInst* buffer = builder_.CreateAlloca(element_, i64(plan_.kc * plan_.nc), "packed");
  buffer->setAlignment(llvm::Align(64));
  const int64_t k_blocks = std::max<int64_t>(1, (spec_.k + plan_.kc - 1) / plan_.kc);

  loop(begin, end, 1, [&](Value* task) {
    Value* batch = builder_.CreateUDiv(task, m_blocks);
    Value* block = builder_.CreateURem(task, m_blocks);
    // The batch's operands: its index split over the batch dims, innermost last.
    Value* rest = batch;
    Value* a_offset = i64(0);
    Value* b_offset = i64(0);
    for (size_t d = spec_.batch.size(); d-- > 0;) {
      Value* index = d == 0 ? rest : builder_.CreateURem(rest, i64(spec_.batch[d]));
      if (d > 0) rest = builder_.CreateUDiv(rest, i64(spec_.batch[d]));
      a_offset = builder_.CreateAdd(a_offset, builder_.CreateMul(index, i64(spec_.a_batch[d])));
      b_offset = builder_.CreateAdd(b_offset, builder_.CreateMul(index, i64(spec_.b_batch[d])));
    }
    Value* a = at(a0, a_offset);
    Value* b = at(b0, b_offset);
    Value* c = at(c0, builder_.CreateMul(batch, builder_.CreateMul(m, i64(spec_.n))));
    Value* m0 = builder_.CreateMul(block, mb);
    Value* rows = builder_.CreateSelect(builder_.CreateICmpSLT(builder_.CreateSub(m, m0), mb),
                                        builder_.CreateSub(m, m0), mb);
    Value* row_tiles = builder_.CreateUDiv(rows, i64(mr));
    // A block's rows are a multiple of mr except the last block's.
    Value* rows_left = builder_.CreateURem(rows, i64(mr));
    Value* short_rows = builder_.CreateICmpNE(rows_left, i64(0));
    loop(i64(0), i64(spec_.n), plan_.nc, [&](Value* j0) {
      Value* columns = builder_.CreateSub(i64(spec_.n), j0);
      columns = builder_.CreateSelect(builder_.CreateICmpSLT(columns, i64(plan_.nc)), columns, i64(plan_.nc));
      Value* panels = builder_.CreateUDiv(columns, i64(nr));
      Value* short_columns = builder_.CreateICmpNE(builder_.CreateURem(columns, i64(nr)), i64(0));
      loop(i64(0), i64(k_blocks), 1, [&](Value* kb) {
        Value* k0 = builder_.CreateMul(kb, i64(plan_.kc));
        Value* depth = builder_.CreateSub(i64(spec_.k), k0);
        depth = builder_.CreateSelect(builder_.CreateICmpSLT(depth, i64(plan_.kc)), depth, i64(plan_.kc));
        Value* b_block = at(b, builder_.CreateAdd(builder_.CreateMul(k0, i64(spec_.b_row)),
                                                  builder_.CreateMul(j0, i64(spec_.b_col))));
        builder_.CreateCall(pack, {b_block, buffer, depth, columns});
        Value* accumulate = builder_.CreateICmpNE(kb, i64(0));
        // One column panel against every row tile of the block.
        auto panel_pass = [&](Value* p, Function* full_rows, const std::vector<Function*>& short_tiles) {
          Value* panel = at(buffer, builder_.CreateMul(builder_.CreateMul(p, depth), i64(nr)));
          Value* j = builder_.CreateAdd(j0, builder_.CreateMul(p, i64(nr)));
          auto tile_at = [&](Value* i, Function* tile) {
            Value* a_tile = at(a, builder_.CreateAdd(builder_.CreateMul(i, i64(spec_.a_row)),
                                                     builder_.CreateMul(k0, i64(spec_.a_col))));
            Value* c_tile = at(c, builder_.CreateAdd(builder_.CreateMul(i, i64(spec_.n)), j));
            builder_.CreateCall(tile, {a_tile, panel, c_tile, depth, accumulate});
          };
          loop(i64(0), row_tiles, 1, [&](Value* t) {
            tile_at(builder_.CreateAdd(m0, builder_.CreateMul(t, i64(mr))), full_rows);
          });
          Value* last = builder_.CreateAdd(m0, builder_.CreateMul(row_tiles, i64(mr)));
          if (!any_rows) {
            Function* short_tile = short_tiles[spec_.m % mr];
            if (short_tile != nullptr) when(short_rows, [&] { tile_at(last, short_tile); });
            return;
          }
          // The short tile of this block's row count, whatever m is.
          Function* function = builder_.GetInsertBlock()->getParent();
          BasicBlock* done = BasicBlock::Create(context_, "rows_done", function);
          llvm::SwitchInst* pick = builder_.CreateSwitch(rows_left, done, static_cast<unsigned>(mr - 1));
          for (int64_t r = 1; r < mr; ++r) {
            BasicBlock* tile = BasicBlock::Create(context_, "rows" + std::to_string(r), function);
            pick->addCase(builder_.getInt64(static_cast<uint64_t>(r)), tile);
            builder_.SetInsertPoint(tile);
            tile_at(last, short_tiles[r]);
            builder_.CreateBr(done);
          }
          builder_.SetInsertPoint(done);
        };
        loop(i64(0), panels, 1, [&](Value* p) { panel_pass(p, tile_full, tile_rows); });
        if (tile_columns != nullptr) {
          when(short_columns, [&] { panel_pass(panels, tile_columns, tile_corner); });
        }
      });
    });
  });
  builder_.CreateRetVoid();
}

// A symbol no other GEMM of this process has.
std::string gemm_symbol() {
  static std::atomic<int64_t> counter{0};
  return "kiln_gemm_" + std::to_string(counter.fetch_add(1));
}

}  // namespace

CpuKernel compile_gemm(const GemmSpec& spec, bool keep_ir) {
  if (spec.dtype != graph::DType::Float32 && spec.dtype != graph::DType::Float64) {
    throw CodegenError("gemm: float32 and float64 only, got " + std::string(graph::dtype_name(spec.dtype)));
  }
  if (spec.batch.size() != spec.a_batch.size() || spec.batch.size() != spec.b_batch.size()) {
    throw CodegenError("gemm: batch strides do not match the batch dims");
  }
  const std::string symbol = gemm_symbol();
  return jit_kernel(
      symbol,
      [&](llvm::LLVMContext& context, llvm::Module& module) { GemmCodegen(spec, context, module).emit(symbol); },
      keep_ir);
}

std::string gemm_ir_text(const GemmSpec& spec) {
  return emit_ir_text("kiln_gemm", [&](llvm::LLVMContext& context, llvm::Module& module) {
    GemmCodegen(spec, context, module).emit("kiln_gemm");
  });
}

}  // namespace kiln::inductor::cpu
