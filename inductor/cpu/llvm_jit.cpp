// One LLJIT per process (Note [One JIT]). Modules are optimized here, not by
// ORC's IR transform layer, so the O2 pipeline sees the host's
// TargetTransformInfo (vector widths, costs) and the loop vectorizer works;
// then compiled to a relocatable object here too, so that the bytes the JIT
// runs are bytes the kernel cache can keep on disk and load again.
#include "inductor/cpu/llvm_jit.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <mutex>

#include "inductor/cpu/llvm_module.h"

namespace kiln::inductor::cpu {
namespace {

// Note [One JIT]
// The LLJIT lives for the process (kernels' addresses must stay valid while
// any compiled graph may call them) and is never destroyed: tearing it down
// at exit would race with torch's and CPython's own teardown. Kernels are
// optimized and compiled to objects on the caller's thread, each thread with
// a TargetMachine of its own (one is not safe to share while it emits), so
// several kernels compile at once (inductor/fuse_kernels.cpp); one mutex
// serializes loading objects; calling compiled kernels needs no lock.
// Every kernel is compiled to a relocatable object, and every object is
// linked into a JITDylib of its own whose link order reaches the main
// JITDylib (libm, libmvec, the process): an object loaded from the disk
// cache keeps the symbol name it was compiled with in another process, which
// may be the name of a kernel already loaded here, and a JITDylib per object
// keeps the two apart.
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  // What makes each thread's TargetMachine (for O2 and object code): the
  // one the LLJIT itself would compile with.
  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> machine_builder;
  std::mutex mutex;
  int64_t dylibs = 0;  // JITDylibs made so far, for unique names
};

std::string take_message(llvm::Error error) { return llvm::toString(std::move(error)); }

void initialize_native_target() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

Jit& the_jit() {
  static Jit* jit = [] {
    initialize_native_target();
    auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!builder) throw JitError("llvm: " + take_message(builder.takeError()));
    // detectHost() already names the host CPU and its features.
    builder->setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
    auto lljit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*builder).create();
    if (!lljit) throw JitError("llvm: " + take_message(lljit.takeError()));
    const char prefix = (*lljit)->getDataLayout().getGlobalPrefix();
    llvm::orc::JITDylib& main = (*lljit)->getMainJITDylib();
    // libm (and everything else the process has loaded) ...
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix);
    if (!process) throw JitError("llvm: " + take_message(process.takeError()));
    main.addGenerator(std::move(*process));
    // ... and glibc's vector math library, which torch does not load.
    auto mvec = llvm::orc::DynamicLibrarySearchGenerator::Load("libmvec.so.1", prefix);
    if (mvec) {
      main.addGenerator(std::move(*mvec));
    } else {
      llvm::consumeError(mvec.takeError());  // codegen then emits scalar calls only
    }
    Jit* made = new Jit();
    made->lljit = std::move(*lljit);
    made->machine_builder = std::make_unique<llvm::orc::JITTargetMachineBuilder>(*builder);
    return made;
  }();
  return *jit;
}

// This thread's TargetMachine, made on first use.
llvm::TargetMachine& thread_target_machine(Jit& jit) {
  thread_local std::unique_ptr<llvm::TargetMachine> machine;
  if (!machine) {
    auto made = jit.machine_builder->createTargetMachine();
    if (!made) throw JitError("llvm: " + take_message(made.takeError()));
    machine = std::move(*made);
  }
  return *machine;
}

void optimize(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder passes(&machine, tuning);
  passes.registerModuleAnalyses(mam);
  passes.registerCGSCCAnalyses(cam);
  passes.registerFunctionAnalyses(fam);
  passes.registerLoopAnalyses(lam);
  passes.crossRegisterProxies(lam, fam, cam, mam);
  // O2, not O3: on the 64-layer model's reduction kernels O3's extra
  // unrolling doubled compile time (100-250 ms a kernel under load) while
  // gelu and softmax->layer_norm ran no faster (docs/perf.md).
  llvm::ModulePassManager pipeline = passes.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  pipeline.run(module, mam);
}

// Links `object` into a fresh JITDylib and resolves `symbol`. The caller holds
// jit.mutex.
void* load_object_locked(Jit& jit, llvm::StringRef object, const std::string& symbol) {
  llvm::orc::ExecutionSession& session = jit.lljit->getExecutionSession();
  llvm::orc::JITDylib& dylib = session.createBareJITDylib("kiln.kernel." + std::to_string(jit.dylibs++));
  dylib.addToLinkOrder(jit.lljit->getMainJITDylib());
  std::unique_ptr<llvm::MemoryBuffer> buffer = llvm::MemoryBuffer::getMemBufferCopy(object, symbol);
  if (llvm::Error error = jit.lljit->addObjectFile(dylib, std::move(buffer))) {
    throw JitError("llvm: " + take_message(std::move(error)));
  }
  auto address = jit.lljit->lookup(dylib, symbol);
  if (!address) throw JitError("llvm: " + take_message(address.takeError()));
  return address->toPtr<void*>();
}

}  // namespace

void JitModuleDeleter::operator()(JitModule* module) const { delete module; }

const HostCpu& host_cpu() {
  static const HostCpu cpu = [] {
    initialize_native_target();
    HostCpu made;
    made.triple = llvm::sys::getProcessTriple();
    made.name = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> host_features;
    std::string list;
    if (llvm::sys::getHostCPUFeatures(host_features)) {
      for (const auto& feature : host_features) {
        if (!list.empty()) list += ",";
        list += (feature.getValue() ? "+" : "-") + feature.getKey().str();
      }
      made.avx2 = host_features.lookup("avx2") && host_features.lookup("fma");
    }
    made.features = list;
    return made;
  }();
  return cpu;
}

JitResult jit_compile(JitModulePtr handle, const std::string& symbol, bool want_ir) {
  Jit& jit = the_jit();
  llvm::TargetMachine& machine = thread_target_machine(jit);
  llvm::Module& module = *handle->module;
  module.setDataLayout(machine.createDataLayout());
  module.setTargetTriple(machine.getTargetTriple().str());
  std::string problems;
  llvm::raw_string_ostream problem_stream(problems);
  if (llvm::verifyModule(module, &problem_stream)) {
    throw JitError("llvm: the generated module is invalid: " + problem_stream.str());
  }
  optimize(module, machine);
  JitResult result;
  if (want_ir) {
    llvm::raw_string_ostream ir(result.optimized_ir);
    module.print(ir, nullptr);
  }
  llvm::orc::SimpleCompiler compile(machine);
  auto object = compile(module);
  if (!object) throw JitError("llvm: " + take_message(object.takeError()));
  result.object = (*object)->getBuffer().str();
  std::lock_guard<std::mutex> lock(jit.mutex);
  result.address = load_object_locked(jit, (*object)->getBuffer(), symbol);
  return result;
}

void* jit_load_object(const std::string& object, const std::string& symbol) {
  Jit& jit = the_jit();
  std::lock_guard<std::mutex> lock(jit.mutex);
  return load_object_locked(jit, object, symbol);
}

std::string jit_llvm_version() { return LLVM_VERSION_STRING; }

void* jit_resolve_host_symbol(const std::string& name) {
  Jit& jit = the_jit();
  std::lock_guard<std::mutex> lock(jit.mutex);
  auto address = jit.lljit->lookup(name);
  if (!address) {
    llvm::consumeError(address.takeError());
    return nullptr;
  }
  return address->toPtr<void*>();
}

std::string emit_ir_text(const std::string& symbol,
                         const std::function<void(llvm::LLVMContext&, llvm::Module&)>& emit) {
  llvm::LLVMContext context;
  llvm::Module module(symbol, context);
  emit(context, module);
  std::string text;
  llvm::raw_string_ostream out(text);
  module.print(out, nullptr);
  out.flush();
  return text;
}

CpuKernel jit_kernel(const std::string& symbol, const std::function<void(llvm::LLVMContext&, llvm::Module&)>& emit,
                     bool keep_ir) {
  JitModulePtr handle(new JitModule());
  handle->context = std::make_unique<llvm::LLVMContext>();
  handle->module = std::make_unique<llvm::Module>(symbol, *handle->context);
  CpuKernel result;
  try {
    emit(*handle->context, *handle->module);
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
