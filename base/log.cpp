#include "base/log.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace kiln::base {
namespace {

constexpr int kChannelCount = static_cast<int>(LogChannel::kCount);
constexpr std::array<const char*, kChannelCount> kChannelNames = {
#define KILN_LOG_NAME(name) #name,
    KILN_LOG_CHANNELS(KILN_LOG_NAME)
#undef KILN_LOG_NAME
};

std::string apply_spec(std::array<bool, kChannelCount>& enabled, std::string_view spec) {
  enabled.fill(false);
  std::string unknown;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    if (item == "all") {
      enabled.fill(true);
      continue;
    }
    bool found = false;
    for (int i = 0; i < kChannelCount; ++i) {
      if (item == kChannelNames[i]) {
        enabled[i] = true;
        found = true;
      }
    }
    if (!found) {
      if (!unknown.empty()) unknown += ",";
      unknown += item;
    }
  }
  return unknown;
}

std::array<bool, kChannelCount>& enabled_channels() {
  // KILN_LOGS is read once, on first use, so the variable works even when
  // nothing calls set_log_channels().
  static std::array<bool, kChannelCount> enabled = [] {
    std::array<bool, kChannelCount> flags{};
    if (const char* spec = std::getenv("KILN_LOGS")) apply_spec(flags, spec);
    return flags;
  }();
  return enabled;
}

}  // namespace

bool log_enabled(LogChannel channel) {
  return enabled_channels()[static_cast<int>(channel)];
}

std::string set_log_channels(std::string_view spec) {
  return apply_spec(enabled_channels(), spec);
}

void log_message(LogChannel channel, std::string_view message) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[kiln:%s] %.*s\n", log_channel_name(channel),
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

const char* log_channel_name(LogChannel channel) {
  return kChannelNames[static_cast<int>(channel)];
}

}  // namespace kiln::base
