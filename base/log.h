// The one logging facility: KILN_LOGS=graph,guards,... selects channels that
// print to stderr. See docs/architecture.md, "Logging".
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace kiln::base {

// Every log channel, written once.
#define KILN_LOG_CHANNELS(X) \
  X(bytecode)                \
  X(graph)                   \
  X(guards)                  \
  X(recompiles)              \
  X(dynamic)                 \
  X(breaks)                  \
  X(backend)                 \
  X(prims)                   \
  X(perf)                    \
  X(cache)                   \
  X(kernels)                 \
  X(autotune)

enum class LogChannel : int {
#define KILN_LOG_ENUM(name) name,
  KILN_LOG_CHANNELS(KILN_LOG_ENUM)
#undef KILN_LOG_ENUM
      kCount
};

// True when `channel` is enabled; cheap enough for hot paths.
bool log_enabled(LogChannel channel);

// Enables exactly the channels named in a comma-separated list ("all" enables
// every channel). Returns the names it did not recognize, comma-separated.
std::string set_log_channels(std::string_view spec);

// Writes one message, prefixed with "[kiln:<channel>] ", to stderr.
void log_message(LogChannel channel, std::string_view message);

// Returns the channel's name, e.g. "graph".
const char* log_channel_name(LogChannel channel);

}  // namespace kiln::base

// Logs `expr` (anything streamable) on `channel` when it is enabled.
#define KILN_LOG(channel, expr)                                              \
  do {                                                                       \
    if (::kiln::base::log_enabled(::kiln::base::LogChannel::channel)) { \
      std::ostringstream kiln_log_stream_;                                   \
      kiln_log_stream_ << expr;                                              \
      ::kiln::base::log_message(::kiln::base::LogChannel::channel,     \
                                   kiln_log_stream_.str());                  \
    }                                                                        \
  } while (0)
