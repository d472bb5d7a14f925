// Wall-clock time of a compile phase, for KILN_LOGS=perf.
#pragma once

#include <chrono>

namespace kiln::base {

// Starts at construction; ms() reads the time since then.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}

  // Milliseconds since construction.
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln::base
