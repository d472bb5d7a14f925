// What `kiln --report` prints, gathered per compile config: compile work
// (traces, their time, graph breaks, recompiles, frames left eager) and
// call timings, with every N-th call run eagerly to measure the saving.
// Nothing here is touched unless reporting was switched on.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::interpreter {

// Report counters of one compile config. Mutated under the GIL only.
struct ConfigReport {
  std::string name;           // what was compiled: "step (train.py:12)"
  int64_t calls = 0;          // calls of the compiled callable
  int64_t traces = 0;         // successful traces (graphs) under this config
  int64_t compile_ns = 0;     // time spent tracing and building executors
  std::vector<std::string> breaks;      // "frame: reason"
  std::vector<std::string> recompiles;  // "frame: failed guard"
  std::vector<std::string> eager_frames;  // frames that could not be traced
  std::vector<int64_t> eager_ns;     // sampled eager calls
  std::vector<int64_t> compiled_ns;  // compiled calls that did not trace
};

// True once reporting was switched on (kiln --report); cheap to test.
bool report_enabled();

// Switches reporting on; every `sample_every`-th call of a compiled
// callable then runs eagerly and is timed (0: never).
void enable_report(int sample_every);

// The eager sampling period given to enable_report.
int report_sample_every();

// A new report for a config named `name`, kept until the process ends.
std::shared_ptr<ConfigReport> register_report(std::string name);

// Every report registered so far, in registration order.
const std::vector<std::shared_ptr<ConfigReport>>& all_reports();

// Counts a call of a reported callable; true when it is a sampled call to
// run eagerly (every report_sample_every()-th call after the first).
bool begin_reported_call(ConfigReport& report);

// Records how long a successful call took. Calls that traced are left out
// of the compiled timings (their time is compile time, reported apart).
void end_reported_call(ConfigReport& report, bool eager, bool traced, int64_t elapsed_ns);

// A monotonic clock in nanoseconds, for timing reported calls.
int64_t report_clock_ns();

}  // namespace kiln::interpreter
