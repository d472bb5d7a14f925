// Compiling a Kernel to host machine code. The code generator
// (llvm_codegen.cpp) exists only in builds with LLVM (KILN_WITH_LLVM);
// without it cpu_codegen_available() is false and compiling throws.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "inductor/kernel_ir.h"
#include "inductor/reduction_split.h"

namespace kiln::inductor::cpu {

// Note [CPU kernel ABI]
// A compiled kernel is
//   void fn(char* const* data, const int64_t* sizes, int64_t begin, int64_t end)
// data[0 .. inputs) are the inputs' element pointers, then data[inputs ..
// inputs + outputs) the outputs'; each input's Kernel offset (elements) is
// added to its pointer. sizes[0 .. rank) is the iteration space and must
// equal Kernel::sizes; the words after them are the strides Note [Run-time
// outer layout] has the code read (fill_abi_sizes). Every other size and
// stride is compiled in as a constant. A
// call computes the points whose index in parallel_dim(kernel) lies in
// [begin, end), every other dim whole; calls over disjoint ranges may run
// at once on several threads (run_cpu_kernel splits large kernels so, Note
// [Kernel threads]). A kernel without a parallel dim (every dim reduced)
// computes everything in the call with begin == 0 and nothing otherwise.
// A split reduction (split_reduction(kernel).chunks > 0, Note [Split
// reductions]) instead takes one more data pointer after the outputs, its
// int64 workspace (split_workspace_words words), whose word 0 names the
// step a call runs; [begin, end) are chunk indices; the runner calls the
// steps in order, each finished before the next.
// Kernels keep no state; their scratch (row stash, tile accumulators) is
// on the calling thread's stack, at most ~600 KiB. Outputs must not overlap
// inputs or each other.
using CpuKernelFn = void (*)(char* const* data, const int64_t* sizes, int64_t begin, int64_t end);

// Thrown when a kernel cannot be compiled (no LLVM in this build, an
// invalid kernel, LLVM refusing the module).
class CodegenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A compiled kernel and, when asked for, its LLVM IR.
struct CpuKernel {
  CpuKernelFn fn = nullptr;
  std::string symbol;             // fn's name in `object`
  std::string object;             // the relocatable object fn was loaded from (the disk cache's payload)
  std::string llvm_ir;            // as generated (with keep_ir)
  std::string optimized_llvm_ir;  // after O2 (with keep_ir)
};

// True when this build can compile kernels (built with LLVM 16).
bool cpu_codegen_available();

// How many leading dims of a kernel its code reads the sizes of, and the
// operands' strides along, from the ABI's sizes at run time (Note
// [Run-time outer layout]): one compiled kernel serves every kernel that
// differs from it only there.
struct RuntimeOuterDims {
  int sizes = 0;    // sizes[d] for d < sizes
  int strides = 0;  // per operand k (inputs, then outputs), its stride along d < strides
};

// The run-time dims of `kernel`, split as `split` (split_reduction's plan).
RuntimeOuterDims runtime_outer_dims(const Kernel& kernel, const ReductionSplit& split);
RuntimeOuterDims runtime_outer_dims(const Kernel& kernel);

// Words of the ABI's sizes array for `kernel` with `dims`: the iteration
// space, then the run-time strides (Note [Run-time outer layout]).
size_t abi_size_words(const Kernel& kernel, const RuntimeOuterDims& dims);

// Writes those words into `words` (abi_size_words of them).
void fill_abi_sizes(const Kernel& kernel, const RuntimeOuterDims& dims, int64_t* words);

// Everything about `kernel` that decides its machine code, as text (the
// kernel cache's key text): format_kernel without the name, the run-time
// sizes and nonzero strides written -1, the outputs' tensor shapes (which
// only the runner reads) left out when any dim is run-time.
std::string kernel_code_text(const Kernel& kernel);

// Compiles `kernel` for the host CPU. Throws CodegenError.
CpuKernel compile_cpu_kernel(const Kernel& kernel, bool keep_ir = false);

// The LLVM IR compile_cpu_kernel would build for `kernel` (its function
// named kiln_kernel), not compiled. Throws CodegenError.
std::string kernel_ir_text(const Kernel& kernel);

}  // namespace kiln::inductor::cpu
