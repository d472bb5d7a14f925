// A host program that serves a Python model through libkiln from 4 threads.
//
//   build/bin/kiln_embed_example [--calls N] [--threads T] [--model model.py]
//
// It loads model.py, computes eager results single-threaded for a pool of
// varied inputs, compiles model.forward, warms it up with one input of each
// batch size, then T threads make N calls in all, each result compared
// bit-for-bit with the eager one. Exit status 0 when every result matches,
// no request traced (warm-up compiled every path) and resident memory grew
// by less than --rss-bound-mb after warm-up.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <kiln/embed.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

// The command line: total calls, threads, the RSS growth bound, the model file.
struct Options {
  long calls = 10000;
  int threads = 4;
  double rss_bound_mb = 8.0;
  std::string model = KILN_EMBED_EXAMPLE_MODEL;
};

// Reads --calls, --threads, --rss-bound-mb, --model; exits 2 on anything else.
Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--calls") == 0) options.calls = std::atol(argv[i + 1]);
    else if (std::strcmp(argv[i], "--threads") == 0) options.threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rss-bound-mb") == 0) options.rss_bound_mb = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--model") == 0) options.model = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--calls N] [--threads T] [--rss-bound-mb MB] [--model FILE]\n", argv[0]);
      std::exit(2);
    }
  }
  return options;
}

// Resident set size of this process in MiB.
double rss_mb() {
  long pages = 0, resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(statm);
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// True when both hold the same tensors, element for element (bit-identical).
bool same_results(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    kiln::Runtime runtime = kiln::Runtime::start();
    kiln::Module model = runtime.load_file(options.model);
    kiln::Function eager = model.function("model.forward");
    // The eager backend replays kiln's graphs through torch, so results are
    // bit-identical to eager torch.
    kiln::Function forward = eager.compile({.backend = "eager"});

    // Serving runs without autograd; warm-up must run under the same grad
    // mode as the requests, since kiln's guards check it.
    c10::NoGradGuard no_grad;
    at::manual_seed(1234);
    const int64_t batch_sizes[] = {1, 4};
    std::vector<std::vector<at::Tensor>> inputs;
    std::vector<std::vector<at::Tensor>> expected;
    for (int i = 0; i < 256; ++i) {
      inputs.push_back({at::randn({batch_sizes[i % 2], 3, 8, 8})});
      expected.push_back(eager.call(inputs.back()));
    }
    forward.warm_up({inputs[0], inputs[1]});
    const int64_t traces_after_warm_up = runtime.stats()["traces"];
    const double rss_after_warm_up = rss_mb();

    std::atomic<long> mismatches = 0;
    std::atomic<long> errors = 0;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < options.threads; ++t) {
      threads.emplace_back([&, t] {
        c10::NoGradGuard thread_no_grad;  // grad mode is per thread
        for (long call = t; call < options.calls; call += options.threads) {
          const size_t which = static_cast<size_t>(call * 7919) % inputs.size();
          try {
            if (!same_results(forward.call(inputs[which]), expected[which])) {
              if (mismatches++ < 5) std::fprintf(stderr, "mismatch: call %ld (input %zu)\n", call, which);
            }
          } catch (const kiln::Error& e) {
            if (errors++ < 5) std::fprintf(stderr, "call %ld failed: %s\n", call, e.what());
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double growth = rss_mb() - rss_after_warm_up;
    // Warm-up compiled every path: no request paid for a trace.
    const int64_t traces_in_requests = runtime.stats()["traces"] - traces_after_warm_up;

    std::printf("%ld calls on %d threads in %.2f s (%.1f us/call): %ld mismatches, %ld errors, "
                "%lld traces after warm-up, RSS %.1f MiB after warm-up, %+.1f MiB at the end (bound %.1f)\n",
                options.calls, options.threads, seconds, seconds * 1e6 / static_cast<double>(options.calls),
                mismatches.load(), errors.load(), static_cast<long long>(traces_in_requests),
                rss_after_warm_up, growth, options.rss_bound_mb);
    return mismatches == 0 && errors == 0 && traces_in_requests == 0 && growth < options.rss_bound_mb ? 0 : 1;
  } catch (const kiln::PythonError& e) {
    std::fprintf(stderr, "%s\n%s", e.what(), e.traceback().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
  return 1;
}
