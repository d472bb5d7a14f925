// The `kiln` binary: a drop-in for python3 with kiln enabled.
//
// It starts CPython the way Py_BytesMain does (same pre-config, same argv
// parsing, Py_RunMain for -c/-m/script/REPL), so command-line options, exit
// codes, tracebacks and signal handling are python3's own. Two differences:
//   - paths (sys.prefix, site-packages, venv) are computed from the python
//     the build was configured with, so its torch is the one imported;
//   - before the user's code runs, the repository's python/ directory is put
//     on sys.path and `import kiln` enables the frame hook.
// Enabling goes through `import kiln`, not kiln_core directly, because the
// extension module holds its own copy of kiln_core and there must be one
// frame hook and one code cache per process.
//
// kiln's own options (Note [kiln options]) are taken out of argv before
// CPython sees it: `--compile=marked|modules|none`, `--report`,
// `--report-sample=N`, anywhere among python's options (before the script,
// -c or -m), and `trace` as the first argument, which runs kiln.trace_cli.
// Everything else reaches CPython unchanged, so sys.argv is python3's.

#include <Python.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef KILN_PYTHON_EXECUTABLE
#error "KILN_PYTHON_EXECUTABLE must name the python the build was configured with"
#endif
#ifndef KILN_PYTHON_PACKAGE_DIR
#error "KILN_PYTHON_PACKAGE_DIR must name the directory that holds the kiln package"
#endif

namespace {

// What kiln's own options asked for.
struct KilnOptions {
  const char* policy = "marked";
  bool report = false;
  long sample_every = 50;
  bool help = false;  // python's -h/--help: kiln's options are printed too
};

constexpr const char* kUsage =
    "usage: kiln [--compile=marked|modules|none] [--report] [--report-sample=N] [python option] "
    "... [-c cmd | -m mod | file | -] [arg] ...\n"
    "       kiln trace FILE.py::function [--args EXPR] | kiln trace --check DIR [--update]\n";

constexpr const char* kHelp =
    "kiln: python3 with kiln's JIT enabled. kiln options (before the script, -c or -m):\n"
    "--compile=marked : compile only what kiln.compile wraps (default)\n"
    "--compile=modules: compile every nn.Module call (each outermost call; submodules are\n"
    "                   traced into their parent's graphs)\n"
    "--compile=none   : kiln.compile returns its argument unchanged (eager, for A/B runs)\n"
    "--report         : print at exit, to stderr, graphs, graph breaks, recompiles, compile\n"
    "                   time and the measured saving of each compiled function\n"
    "--report-sample=N: with --report, run every N-th call eagerly to measure the saving\n"
    "                   (default 50; 0: never)\n"
    "kiln trace ...   : trace dumps and golden trace checks (kiln trace --help)\n"
    "\npython's own options follow.\n\n";

// Reports a bad kiln option the way python3 reports a bad option: a
// message, the usage, exit status 2.
[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "kiln: %s\n%sTry `kiln -h' for more information.\n", message.c_str(), kUsage);
  std::exit(2);
}

// Parses one kiln option into `options`; false when `arg` is not one.
bool parse_kiln_option(const char* arg, KilnOptions& options) {
  if (std::strncmp(arg, "--compile", 9) == 0) {
    if (arg[9] != '=') usage_error(std::string("--compile needs a policy: --compile=marked|modules|none, got '") + arg + "'");
    const char* policy = arg + 10;
    for (const char* known : {"marked", "modules", "none"}) {
      if (std::strcmp(policy, known) == 0) {
        options.policy = known;
        return true;
      }
    }
    usage_error(std::string("unknown compile policy '") + policy + "' (choose marked, modules or none)");
  }
  if (std::strcmp(arg, "--report") == 0) {
    options.report = true;
    return true;
  }
  if (std::strncmp(arg, "--report-sample=", 16) == 0) {
    char* end = nullptr;
    const long every = std::strtol(arg + 16, &end, 10);
    if (arg[16] == '\0' || *end != '\0' || every < 0) {
      usage_error(std::string("--report-sample needs a count >= 0, got '") + (arg + 16) + "'");
    }
    options.sample_every = every;
    return true;
  }
  if (std::strncmp(arg, "--report", 8) == 0) {
    usage_error(std::string("unknown option '") + arg + "' (kiln has --report and --report-sample=N)");
  }
  return false;
}

// Note [kiln options]
// Returns argv without kiln's options. Python's options are walked as
// CPython's getopt does (clusters such as -bW ignore, options taking a
// value: -c -m -W -X --check-hash-based-pycs) so that what follows the
// script, -c or -m is the program's own, copied untouched.
std::vector<char*> split_options(int argc, char** argv, KilnOptions& options) {
  std::vector<char*> out{argv[0]};
  int i = 1;
  for (; i < argc; ++i) {
    char* arg = argv[i];
    if (parse_kiln_option(arg, options)) continue;
    if (std::strcmp(arg, "--") == 0 || arg[0] != '-' || arg[1] == '\0') break;  // program starts
    out.push_back(arg);
    if (arg[1] == '-') {  // a long option
      if (std::strcmp(arg, "--help") == 0) options.help = true;
      if (std::strcmp(arg, "--check-hash-based-pycs") == 0 && i + 1 < argc) out.push_back(argv[++i]);
      continue;
    }
    bool program_starts = false;
    for (const char* c = arg + 1; *c; ++c) {
      if (*c == 'h' || *c == '?') options.help = true;
      if (*c == 'c' || *c == 'm' || *c == 'W' || *c == 'X') {
        // The rest of the cluster, or else the next argument, is the value.
        if (c[1] == '\0' && i + 1 < argc) out.push_back(argv[++i]);
        program_starts = *c == 'c' || *c == 'm';
        break;
      }
    }
    if (program_starts) {
      ++i;
      break;
    }
  }
  for (; i < argc; ++i) out.push_back(argv[i]);
  return out;
}

// Applies the compile policy and report options through the kiln package.
// Returns 0, or -1 with the traceback printed.
int apply_options(const KilnOptions& options) {
  if (std::strcmp(options.policy, "marked") != 0) {
    PyObject* policy = PyImport_ImportModule("kiln.policy");  // new
    PyObject* done = policy ? PyObject_CallMethod(policy, "set_policy", "s", options.policy) : nullptr;
    Py_XDECREF(policy);
    if (!done) {
      PyErr_Print();
      return -1;
    }
    Py_DECREF(done);
  }
  if (options.report) {
    PyObject* report = PyImport_ImportModule("kiln.report");  // new
    PyObject* done = report ? PyObject_CallMethod(report, "enable", "l", options.sample_every) : nullptr;
    Py_XDECREF(report);
    if (!done) {
      PyErr_Print();
      return -1;
    }
    Py_DECREF(done);
  }
  return 0;
}

// Exits the process the way python3 does for a failed or "exit" status (-h,
// --version, bad options); returns otherwise.
void exit_if_failed(PyStatus status, PyConfig* config) {
  if (!PyStatus_Exception(status)) return;
  if (config != nullptr) PyConfig_Clear(config);
  Py_ExitStatusException(status);
}

// Puts the kiln package first on sys.path and imports it. Returns 0 on
// success; on failure prints the traceback and returns -1. Needs the GIL.
int enable_kiln() {
  PyObject* path = PySys_GetObject("path");  // borrowed
  PyObject* dir = PyUnicode_DecodeFSDefault(KILN_PYTHON_PACKAGE_DIR);  // new
  if (path == nullptr || dir == nullptr || PyList_Insert(path, 0, dir) != 0) {
    Py_XDECREF(dir);
    if (PyErr_Occurred()) PyErr_Print();
    return -1;
  }
  Py_DECREF(dir);
  PyObject* kiln = PyImport_ImportModule("kiln");  // new
  if (kiln == nullptr) {
    PyErr_Print();
    return -1;
  }
  Py_DECREF(kiln);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  KilnOptions options;
  std::vector<char*> args;
  if (argc > 1 && std::strcmp(argv[1], "trace") == 0) {
    // `kiln trace ...` is `kiln -m kiln.trace_cli ...`.
    args = {argv[0], const_cast<char*>("-m"), const_cast<char*>("kiln.trace_cli")};
    args.insert(args.end(), argv + 2, argv + argc);
  } else {
    args = split_options(argc, argv, options);
  }
  if (options.help) {
    std::fputs(kHelp, stdout);
    std::fflush(stdout);
  }
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();

  PyPreConfig preconfig;
  PyPreConfig_InitPythonConfig(&preconfig);
  // Pre-initialization reads -E, -I, -X utf8 and -X dev from argv, as
  // python3's own main does.
  exit_if_failed(Py_PreInitializeFromBytesArgs(&preconfig, argc, argv), nullptr);

  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  exit_if_failed(PyConfig_SetBytesArgv(&config, argc, argv), &config);
  // sys.prefix, sys.path and venv detection all derive from the executable;
  // naming the configured python makes them exactly that python's.
  exit_if_failed(PyConfig_SetBytesString(&config, &config.executable, KILN_PYTHON_EXECUTABLE),
                 &config);
  exit_if_failed(Py_InitializeFromConfig(&config), &config);
  PyConfig_Clear(&config);

  if (enable_kiln() != 0) {
    std::fprintf(stderr, "kiln: cannot import the kiln package from %s (python: %s)\n",
                 KILN_PYTHON_PACKAGE_DIR, KILN_PYTHON_EXECUTABLE);
    Py_FinalizeEx();
    return 1;
  }
  if (apply_options(options) != 0) {
    Py_FinalizeEx();
    return 1;
  }
  // Runs -c/-m/script/REPL, finalizes, and maps SystemExit and
  // KeyboardInterrupt to python3's exit codes.
  return Py_RunMain();
}
