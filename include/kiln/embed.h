// libkiln: kiln's C++ API for host applications that run PyTorch models
// written in Python.
//
//   kiln::Runtime runtime = kiln::Runtime::start();
//   kiln::Module model = runtime.load_file("model.py");
//   kiln::Function forward = model.function("model.forward").compile();
//   forward.warm_up({{at::randn({8, 16})}});
//   std::vector<at::Tensor> out = forward.call({at::randn({8, 16})});
//
// Handles are cheap to copy and safe to use from many host threads at once:
// each call takes the GIL itself (the host's threads need not be Python
// threads). Python errors arrive as kiln::PythonError. This header needs
// ATen's Tensor but not Python.h; link the `kiln_embed` library.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

// A misuse of the API: a wrong number of inputs, a result that is not
// tensors, a runtime that cannot start.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A Python exception, carried into C++. what() is "<context>: Type: message".
class PythonError : public Error {
 public:
  // Builds the error; `context` says what libkiln was doing ("calling f").
  PythonError(const std::string& context, std::string type, std::string message,
              std::string traceback);
  // The exception's type: "ValueError", or "module.Class" for others.
  const std::string& type() const { return type_; }
  // str() of the exception.
  const std::string& message() const { return message_; }
  // The whole formatted traceback, as Python would print it.
  const std::string& traceback() const { return traceback_; }

 private:
  std::string type_;
  std::string message_;
  std::string traceback_;
};

// How Runtime::start starts CPython when the host has not.
struct RuntimeOptions {
  // The python whose prefix and site-packages (torch) are used; empty: the
  // python kiln was built with.
  std::string python_executable;
  // Directories put first on sys.path (model code). The directory holding
  // the kiln package of this build is always added.
  std::vector<std::string> sys_path;
  // sys.argv[0].
  std::string program_name = "kiln-embed";
};

// The options of kiln.compile.
struct CompileOptions {
  std::string backend = "inductor";  // "eager", "aot_eager" or "inductor"
  bool fullgraph = false;            // a graph break is an error
  std::optional<bool> dynamic;       // sizes traced as dynamic; unset: kiln decides
};

namespace embed {
struct RuntimeState;
struct FunctionState;
struct ModuleState;
}  // namespace embed

// A Python callable (a function, a bound method, an nn.Module), compiled or
// not. Copies share the callable.
class Function {
 public:
  // Calls it with `inputs` as positional arguments; returns its tensor, or
  // the tensors of the tuple/list it returned. Thread-safe.
  std::vector<at::Tensor> call(const std::vector<at::Tensor>& inputs) const;
  // Returns this callable compiled by kiln.compile with `options`.
  Function compile(const CompileOptions& options = {}) const;
  // Calls it once per example so every path compiles before the first
  // request; call it under the grad mode the requests will run in.
  void warm_up(const std::vector<std::vector<at::Tensor>>& examples) const;
  // The name used in errors: "model.forward", or "compiled model.forward".
  const std::string& name() const;

 private:
  friend class Module;
  explicit Function(std::shared_ptr<const embed::FunctionState> state) : state_(std::move(state)) {}
  std::shared_ptr<const embed::FunctionState> state_;
};

// An imported Python module.
class Module {
 public:
  // The callable at `dotted_name` in the module: "predict", "model" (an
  // nn.Module, called as model(...)), "model.forward".
  Function function(const std::string& dotted_name) const;
  // The module's __name__.
  const std::string& name() const;

 private:
  friend class Runtime;
  explicit Module(std::shared_ptr<const embed::ModuleState> state) : state_(std::move(state)) {}
  std::shared_ptr<const embed::ModuleState> state_;
};

// The Python interpreter kiln runs in. When start() started it, it is
// finalized when the Runtime and every Module and Function are gone; CPython
// with torch cannot start twice, so keep one Runtime for the process's life.
class Runtime {
 public:
  // Starts CPython (then releases the GIL) or, when the host already runs
  // it, attaches as attach() does; imports torch and kiln.
  static Runtime start(const RuntimeOptions& options = {});
  // Uses the CPython the host started (never finalizing it); imports kiln.
  // The calling thread must not hold the GIL or must be a Python thread.
  static Runtime attach();
  // Imports a module by name (sys.path as set up by start()).
  Module import_module(const std::string& name) const;
  // Imports the Python file at `path` as a module named after its stem.
  Module load_file(const std::string& path) const;
  // True when this Runtime started CPython and will finalize it.
  bool owns_interpreter() const;
  // kiln.stats(): traces, cache hits and misses, recompiles, graph breaks...
  // since the last kiln.reset(); a server can watch recompiles with it.
  std::map<std::string, int64_t> stats() const;

 private:
  explicit Runtime(std::shared_ptr<embed::RuntimeState> state) : state_(std::move(state)) {}
  std::shared_ptr<embed::RuntimeState> state_;
};

}  // namespace kiln
