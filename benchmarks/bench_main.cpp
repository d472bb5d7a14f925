// main() of kiln_bench: starts the configured CPython, imports torch and
// kiln, defines the Python functions the benchmarks call, then runs Google
// Benchmark on this thread with the GIL held. After the runs it prints the
// added per-call cost of compiled functions (compiled minus eager, from the
// medians when --benchmark_repetitions > 1).

#include <Python.h>
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "benchmarks/bench_support.h"
#include "interpreter/embedded_python.h"

#ifndef KILN_PYTHON_EXECUTABLE
#error "KILN_PYTHON_EXECUTABLE must name the python the build was configured with"
#endif
#ifndef KILN_PYTHON_PACKAGE_DIR
#error "KILN_PYTHON_PACKAGE_DIR must name the directory that holds the kiln package"
#endif

namespace kiln::bench {
namespace {

PyObject* g_namespace = nullptr;  // owned for the process's life
int64_t g_collected_iterations = 0;

// The code the call-overhead benchmarks run. Its file name is not one kiln
// skips (torch's, kiln's, the standard library's), so kiln traces it.
constexpr const char* kBenchSource = R"PY(
import torch
import kiln

def f1(x):
    return x + 1

def f8(a, b, c, d, e, f, g, h):
    return a + b + c + d + e + f + g + h

compiled_f1 = kiln.compile(f1, backend="eager")
compiled_f8 = kiln.compile(f8, backend="eager")

torch.manual_seed(0)
inputs_1 = (torch.randn(1),)
inputs_8 = tuple(torch.randn(1) for _ in range(8))
)PY";

int start_python(const char* program) {
  std::string error;
  if (!kiln::interpreter::start_embedded_python(KILN_PYTHON_EXECUTABLE, program, &error)) {
    std::fprintf(stderr, "%s: %s\n", "kiln_bench", error.c_str());
    return -1;
  }
  // kiln's package directory first, as the kiln binary does.
  PyObject* path = PySys_GetObject("path");  // borrowed
  PyObject* dir = PyUnicode_DecodeFSDefault(KILN_PYTHON_PACKAGE_DIR);
  if (path == nullptr || dir == nullptr || PyList_Insert(path, 0, dir) != 0) {
    Py_XDECREF(dir);
    PyErr_Print();
    return -1;
  }
  Py_DECREF(dir);

  g_namespace = PyDict_New();
  PyDict_SetItemString(g_namespace, "__builtins__", PyEval_GetBuiltins());
  PyObject* name = PyUnicode_FromString("kiln_bench");
  PyDict_SetItemString(g_namespace, "__name__", name);
  Py_XDECREF(name);
  PyObject* code = Py_CompileString(kBenchSource, "<kiln_bench>", Py_file_input);
  PyObject* result = code ? PyEval_EvalCode(code, g_namespace, g_namespace) : nullptr;
  Py_XDECREF(code);
  if (result == nullptr) {
    PyErr_Print();
    std::fprintf(stderr, "kiln_bench: cannot import torch and kiln with %s (package dir %s)\n",
                 KILN_PYTHON_EXECUTABLE, KILN_PYTHON_PACKAGE_DIR);
    return -1;
  }
  Py_DECREF(result);
  return 0;
}

// True for a run that failed or was skipped. Google Benchmark 1.7 (Debian)
// has Run::error_occurred; 1.8+ (the GPU machine) replaced it with skipped.
template <typename R>
auto run_failed(const R& run, int) -> decltype(run.error_occurred, bool()) {
  return run.error_occurred;
}
template <typename R>
auto run_failed(const R& run, long) -> decltype(run.skipped, bool()) {
  return static_cast<bool>(run.skipped);
}

// The console reporter, also remembering each benchmark's time and counters
// so main() can print compiled minus eager.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  explicit SummaryReporter(OutputOptions options) : ConsoleReporter(options) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run_failed(run, 0)) continue;
      // Prefer the median, then the mean, then a single run.
      int rank = run.aggregate_name == "median" ? 3
                 : run.aggregate_name == "mean" ? 2
                 : run.aggregate_name.empty()   ? 1
                                                : 0;
      if (rank == 0) continue;
      Entry& entry = results_[run.run_name.function_name + "/" + run.run_name.args];
      if (rank > entry.rank) {
        entry.rank = rank;
        entry.ns = run.GetAdjustedRealTime() *
                   benchmark::GetTimeUnitMultiplier(benchmark::kNanosecond) /
                   benchmark::GetTimeUnitMultiplier(run.time_unit);
        entry.counters.clear();
        for (const auto& [name, counter] : run.counters) entry.counters[name] = counter.value;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintSummary() const {
    bool header = false;
    for (const char* n : {"1", "8"}) {
      auto eager = results_.find(std::string("BM_Call_Eager/") + n);
      auto compiled = results_.find(std::string("BM_Call_Compiled/") + n);
      auto paired = results_.find(std::string("BM_Call_Paired/") + n);
      const bool separate = eager != results_.end() && compiled != results_.end();
      const bool pair = paired != results_.end() && paired->second.counters.count("added_ns");
      if (!separate && !pair) continue;
      if (!header) {
        std::printf("\nAdded per-call cost of kiln.compile(fn, backend=\"eager\") over fn, "
                    "real time, ns (median over repetitions when there are several):\n");
        std::printf("  %-7s %-34s %10s %12s %10s\n", "inputs", "measured by", "eager",
                    "compiled", "added");
        header = true;
      }
      if (separate) {
        std::printf("  %-7s %-34s %10.0f %12.0f %10.0f\n", n, "BM_Call_Eager vs BM_Call_Compiled",
                    eager->second.ns, compiled->second.ns, compiled->second.ns - eager->second.ns);
      }
      if (pair) {
        const auto& c = paired->second.counters;
        std::printf("  %-7s %-34s %10.0f %12.0f %10.0f\n", n, "BM_Call_Paired (same iteration)",
                    c.at("eager_ns"), c.at("compiled_ns"), c.at("added_ns"));
      }
    }
  }

 private:
  struct Entry {
    int rank = 0;
    double ns = 0;
    std::map<std::string, double> counters;
  };
  std::map<std::string, Entry> results_;
};

// Console options as Google Benchmark's own reporter would pick them: a
// table, colored when stdout is a terminal unless --benchmark_color=false.
benchmark::ConsoleReporter::OutputOptions console_options(int argc, char** argv) {
  bool color = isatty(STDOUT_FILENO) != 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--benchmark_color=false" || arg == "--benchmark_color=no") color = false;
    if (arg == "--benchmark_color=true" || arg == "--benchmark_color=yes") color = true;
  }
  int options = benchmark::ConsoleReporter::OO_Tabular;
  if (color) options |= benchmark::ConsoleReporter::OO_Color;
  return static_cast<benchmark::ConsoleReporter::OutputOptions>(options);
}

}  // namespace

PyObject* namespace_dict() { return g_namespace; }

void note_collected(int64_t iterations) { g_collected_iterations += iterations; }

int64_t collected_iterations() { return g_collected_iterations; }

PyObject* eval(const char* expression) {
  PyObject* value = PyRun_String(expression, Py_eval_input, g_namespace, g_namespace);
  if (value == nullptr) PyErr_Print();
  return value;
}

bool read_kiln_stats(KilnStats* out) {
  PyObject* dict = eval("kiln.stats()");
  if (dict == nullptr || !PyDict_Check(dict)) {
    Py_XDECREF(dict);
    return false;
  }
  auto get = [dict](const char* key, int64_t* field) {
    PyObject* value = PyDict_GetItemString(dict, key);  // borrowed
    if (value == nullptr) return false;
    *field = PyLong_AsLongLong(value);
    return !PyErr_Occurred();
  };
  bool ok = get("traces", &out->traces) && get("cache_hits", &out->cache_hits) &&
            get("cache_misses", &out->cache_misses) && get("eager_runs", &out->eager_runs);
  if (!ok) PyErr_Print();
  Py_DECREF(dict);
  return ok;
}

}  // namespace kiln::bench

int main(int argc, char** argv) {
  // Read before Initialize(), which removes the flags it knows.
  const auto options = kiln::bench::console_options(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (kiln::bench::start_python(argv[0]) != 0) return 1;
  // This thread keeps the GIL: Google Benchmark runs single-threaded
  // benchmarks on the calling thread.
  kiln::bench::SummaryReporter reporter(options);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  if (kiln::bench::collected_iterations() > 0) {
    std::printf("\nkiln_bench: callgrind collected %lld timed iterations\n",
                static_cast<long long>(kiln::bench::collected_iterations()));
  }
  benchmark::Shutdown();
  return Py_FinalizeEx() < 0 ? 1 : 0;
}
