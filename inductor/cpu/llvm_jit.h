// The quarantine around LLVM's JIT: one ORC LLJIT per process, created on
// first use, targeting the host CPU. No LLVM type appears here; the module
// handed in is opaque (llvm_module.h, included only by llvm_*.cpp, defines
// it). Only llvm_*.cpp files include LLVM headers.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

namespace kiln::inductor::cpu {

// Thrown when LLVM refuses a module (verification, optimization, linking,
// an unresolved symbol); the message is LLVM's.
class JitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An LLVM module and the context that owns it, built by the code generator.
struct JitModule;

// Frees a module that was never compiled.
struct JitModuleDeleter {
  void operator()(JitModule* module) const;
};
using JitModulePtr = std::unique_ptr<JitModule, JitModuleDeleter>;

// The host CPU as the JIT targets it (llvm::sys::getHostCPUName and the
// host's features), so generated code may use AVX2/AVX-512 where present.
struct HostCpu {
  std::string triple;
  std::string name;      // e.g. "skylake-avx512"
  std::string features;  // e.g. "+avx2,+fma,..."
  bool avx2 = false;     // glibc's libmvec AVX2 variants ("_ZGVd...") may be called
};

// The host CPU; initializes LLVM's native target on first use.
const HostCpu& host_cpu();

// What jit_compile returns besides the address.
struct JitResult {
  void* address = nullptr;
  std::string optimized_ir;  // the module after O2, when asked for
  std::string object;        // the relocatable object `address` lives in (ELF on Linux)
};

// Runs LLVM's O2 pipeline over `module` for the host CPU, compiles it to a
// relocatable object, loads that object into the process's JIT and returns
// the address of function `symbol` and the object's bytes (which
// jit_load_object can load again, in this process or another one on the
// same host). Thread-safe. Throws JitError (the module is consumed either way).
JitResult jit_compile(JitModulePtr module, const std::string& symbol, bool want_ir = false);

// Loads a relocatable object that jit_compile made for this host and
// returns the address of its function `symbol`. Each object gets a JITDylib
// of its own (Note [One JIT]), so objects whose symbols have the same name
// can be loaded side by side. Thread-safe. Throws JitError when the object
// does not parse, link or define `symbol`.
void* jit_load_object(const std::string& object, const std::string& symbol);

// The LLVM version this build links, e.g. "16.0.6" (empty in builds
// without LLVM): part of the kernel cache's key, since another LLVM may
// generate other code for the same kernel.
std::string jit_llvm_version();

// The address the JIT resolves `name` to in its host search (libm, libmvec,
// the process), or null (always, in builds without LLVM): lets tests check
// which C functions kernels can call.
void* jit_resolve_host_symbol(const std::string& name);

}  // namespace kiln::inductor::cpu
