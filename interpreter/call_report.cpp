#include "interpreter/call_report.h"

#include <chrono>

namespace kiln::interpreter {
namespace {

bool g_report_enabled = false;
int g_sample_every = 50;
// Enough samples for a stable median; later calls are counted, not kept.
constexpr size_t kMaxSamples = 100000;

std::vector<std::shared_ptr<ConfigReport>>& reports() {
  static auto* list = new std::vector<std::shared_ptr<ConfigReport>>();  // lives to exit
  return *list;
}

}  // namespace

bool report_enabled() { return g_report_enabled; }

void enable_report(int sample_every) {
  g_report_enabled = true;
  g_sample_every = sample_every;
}

int report_sample_every() { return g_sample_every; }

std::shared_ptr<ConfigReport> register_report(std::string name) {
  auto report = std::make_shared<ConfigReport>();
  report->name = std::move(name);
  reports().push_back(report);
  return report;
}

const std::vector<std::shared_ptr<ConfigReport>>& all_reports() { return reports(); }

bool begin_reported_call(ConfigReport& report) {
  report.calls++;
  return g_sample_every > 0 && report.calls > 1 && report.calls % g_sample_every == 0;
}

void end_reported_call(ConfigReport& report, bool eager, bool traced, int64_t elapsed_ns) {
  std::vector<int64_t>& samples = eager ? report.eager_ns : report.compiled_ns;
  if (traced || samples.size() >= kMaxSamples) return;
  samples.push_back(elapsed_ns);
}

int64_t report_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace kiln::interpreter
