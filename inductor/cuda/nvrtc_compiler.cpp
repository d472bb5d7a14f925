// NVRTC through dlopen: the library is found at first use (Note [Finding
// libnvrtc]) and its entry points resolved by name; NVRTC's header gives
// their types only.
#include "inductor/cuda/nvrtc_compiler.h"

#include <Python.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "inductor/cuda/cuda_source.h"
#include "base/log.h"

namespace kiln::inductor::cuda {
namespace {

struct Nvrtc {
  void* handle = nullptr;
  std::string path;   // what dlopen loaded
  std::string error;  // why it is missing
  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
};

// Directories of pip's CUDA wheels (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib)
// beside the running Python's torch, when Python runs and this thread
// holds the GIL.
std::vector<std::string> wheel_dirs() {
  std::vector<std::string> dirs;
  if (!Py_IsInitialized() || !PyGILState_Check()) return dirs;
  PyObject* nvidia = PyImport_ImportModule("nvidia");
  if (nvidia == nullptr) {
    PyErr_Clear();
    return dirs;
  }
  PyObject* paths = PyObject_GetAttrString(nvidia, "__path__");
  PyObject* list = paths ? PySequence_List(paths) : nullptr;
  if (list != nullptr) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
      const char* path = PyUnicode_AsUTF8(PyList_GET_ITEM(list, i));
      if (path == nullptr) continue;
      for (const char* sub : {"/cu13/lib", "/cuda_nvrtc/lib"}) dirs.push_back(std::string(path) + sub);
    }
  }
  PyErr_Clear();
  Py_XDECREF(list);
  Py_XDECREF(paths);
  Py_DECREF(nvidia);
  return dirs;
}

// Note [Finding libnvrtc]
// In order: $KILN_NVRTC_LIBRARY; libnvrtc.so.13 and libnvrtc.so.12 on the
// loader's path; /usr/local/cuda/lib64; the nvidia wheels of the running
// Python (torch's pip dependencies). The first that loads and has every
// entry point wins.
Nvrtc load_nvrtc() {
  Nvrtc n;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KILN_NVRTC_LIBRARY"); env != nullptr && *env) candidates.push_back(env);
  for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12"}) candidates.push_back(name);
  for (const char* name : {"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so"}) {
    candidates.push_back(name);
  }
  for (const std::string& dir : wheel_dirs()) {
    for (const char* name : {"/libnvrtc.so.13", "/libnvrtc.so.12"}) candidates.push_back(dir + name);
  }
  std::string tried;
  for (const std::string& path : candidates) {
    n.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (n.handle != nullptr) {
      n.path = path;
      KILN_LOG(kernels, "NVRTC loaded from " << path);
      break;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (n.handle == nullptr) {
    n.error = "libnvrtc not found (tried " + tried + "; set KILN_NVRTC_LIBRARY to its path)";
    return n;
  }
  bool complete = true;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(n.handle, name));
    if (fn == nullptr) {
      complete = false;
      n.error += std::string(n.error.empty() ? "libnvrtc lacks " : ", ") + name;
    }
  };
  resolve(n.GetErrorString, "nvrtcGetErrorString");
  resolve(n.Version, "nvrtcVersion");
  resolve(n.CreateProgram, "nvrtcCreateProgram");
  resolve(n.DestroyProgram, "nvrtcDestroyProgram");
  resolve(n.CompileProgram, "nvrtcCompileProgram");
  resolve(n.GetProgramLogSize, "nvrtcGetProgramLogSize");
  resolve(n.GetProgramLog, "nvrtcGetProgramLog");
  resolve(n.GetCUBINSize, "nvrtcGetCUBINSize");
  resolve(n.GetCUBIN, "nvrtcGetCUBIN");
  if (!complete) {
    dlclose(n.handle);
    n.handle = nullptr;
  }
  return n;
}

const Nvrtc& nvrtc() {
  static std::once_flag once;
  static Nvrtc* loaded = nullptr;  // kept for the process
  std::call_once(once, [] { loaded = new Nvrtc(load_nvrtc()); });
  return *loaded;
}

const Nvrtc& require_nvrtc() {
  const Nvrtc& n = nvrtc();
  if (n.handle == nullptr) throw CudaError("CUDA kernels need NVRTC: " + n.error);
  return n;
}

void check(const Nvrtc& n, nvrtcResult result, const char* call) {
  if (result != NVRTC_SUCCESS) throw CudaError(std::string(call) + " failed: " + n.GetErrorString(result));
}

}  // namespace

bool nvrtc_available(std::string* why) {
  const Nvrtc& n = nvrtc();
  if (why != nullptr) *why = n.error;
  return n.handle != nullptr;
}

std::string nvrtc_version() {
  const Nvrtc& n = require_nvrtc();
  int major = 0, minor = 0;
  check(n, n.Version(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string nvrtc_library_path() { return require_nvrtc().path; }

std::string compile_cubin_here(const std::string& source, const std::string& arch, std::string* messages) {
  const Nvrtc& n = require_nvrtc();
  nvrtcProgram program = nullptr;
  check(n, n.CreateProgram(&program, source.c_str(), "kiln_kernel.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  struct Destroy {
    const Nvrtc& n;
    nvrtcProgram* program;
    ~Destroy() { n.DestroyProgram(program); }
  } destroy{n, &program};
  const std::vector<std::string> options = nvrtc_options(arch);
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());
  const nvrtcResult compiled =
      n.CompileProgram(program, static_cast<int>(option_pointers.size()), option_pointers.data());
  std::string log;
  size_t log_size = 0;
  if (n.GetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    if (n.GetProgramLog(program, log.data()) != NVRTC_SUCCESS) log.clear();
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  if (compiled != NVRTC_SUCCESS) {
    throw CudaError(std::string("NVRTC could not compile a kernel for ") + arch + " (" + n.GetErrorString(compiled) +
                    "):\n" + log);
  }
  if (messages != nullptr) *messages = log;
  size_t size = 0;
  check(n, n.GetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check(n, n.GetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace kiln::inductor::cuda
