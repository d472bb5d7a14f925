// main() of kiln_cpp_tests: the tests run inside an embedded CPython with
// torch imported, because kiln_core works on live interpreter objects (code
// objects, frames, tensors). Every other file under tests/cpp holds only
// TESTs; the tests run on this thread and hold the GIL.

#include <Python.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <execinfo.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "interpreter/embedded_python.h"

#ifndef KILN_PYTHON_EXECUTABLE
#error "KILN_PYTHON_EXECUTABLE must name the python the build was configured with"
#endif

namespace {

// Starts the interpreter with the configured python's paths (sys.prefix,
// Debian's dist-packages, a venv's site-packages). Returns 0 on success.
int start_python(const char* program) {
  std::string error;
  if (!kiln::interpreter::start_embedded_python(KILN_PYTHON_EXECUTABLE, program, &error)) {
    std::fprintf(stderr, "%s: %s\n", "kiln_cpp_tests", error.c_str());
    return -1;
  }
  PyObject* torch = PyImport_ImportModule("torch");  // new reference
  if (torch == nullptr) {
    PyErr_Print();
    std::fprintf(stderr, "kiln_cpp_tests: %s cannot import torch\n", KILN_PYTHON_EXECUTABLE);
    return -1;
  }
  Py_DECREF(torch);
  return 0;
}

// A crash names the test, the faulting instruction (module + offset, for
// addr2line) and the native stack (machines without a debugger, like the
// GPU host, show nothing else), then dies as it would.
void report_crash(int signal, siginfo_t* info, void* context) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (test) {
    std::fprintf(stderr, "\nkiln_cpp_tests: signal %d in %s.%s\n", signal, test->test_suite_name(), test->name());
  }
  const auto* uc = static_cast<const ucontext_t*>(context);
  void* pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  if (pc == nullptr) {
    // A call through a null pointer: the caller is the return address the
    // call pushed.
    pc = *reinterpret_cast<void* const*>(uc->uc_mcontext.gregs[REG_RSP]);
    std::fprintf(stderr, "called a null function pointer from:\n");
  }
  Dl_info where{};
  if (dladdr(pc, &where) && where.dli_fname) {
    std::fprintf(stderr, "at %s+%#lx (%s), fault address %p\n", where.dli_fname,
                 static_cast<unsigned long>(static_cast<char*>(pc) - static_cast<char*>(where.dli_fbase)),
                 where.dli_sname ? where.dli_sname : "?", info->si_addr);
  } else {
    std::fprintf(stderr, "at %p, fault address %p\n", pc, info->si_addr);
  }
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// Names the running test in KILN_KERNEL_LABEL, so the kernel manifest
// (Note [Kernel replay] in inductor/kernel_manifest.cpp) says which test
// made each kernel.
class KernelLabel : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& test) override {
    const std::string label = std::string("cpp:") + test.test_suite_name() + "." + test.name();
    setenv("KILN_KERNEL_LABEL", label.c_str(), 1);
  }
};

}  // namespace

int main(int argc, char** argv) {
  struct sigaction action {};
  action.sa_sigaction = report_crash;
  action.sa_flags = SA_SIGINFO;
  for (int signal : {SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE}) sigaction(signal, &action, nullptr);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new KernelLabel);
  // Trace counts must not depend on earlier runs (Note [Dynamic profiles]):
  // the tests run with the user's kernel cache, where profiles would persist.
  setenv("KILN_DYNAMIC_PROFILES", "0", 0);
  if (start_python(argv[0]) != 0) return 1;
  int result = RUN_ALL_TESTS();
  if (Py_FinalizeEx() < 0 && result == 0) result = 1;
  return result;
}
