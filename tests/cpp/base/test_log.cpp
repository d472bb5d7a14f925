// Tests of base/log.h: channel selection, unknown names, message format
// and that KILN_LOG evaluates nothing when its channel is off.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/log.h"

namespace kiln::base {
namespace {

constexpr int kChannels = static_cast<int>(LogChannel::kCount);

std::vector<LogChannel> all_channels() {
  std::vector<LogChannel> out;
  for (int i = 0; i < kChannels; ++i) out.push_back(static_cast<LogChannel>(i));
  return out;
}

// The names of the enabled channels, comma-separated, in channel order.
std::string enabled_names() {
  std::string out;
  for (LogChannel channel : all_channels()) {
    if (!log_enabled(channel)) continue;
    if (!out.empty()) out += ",";
    out += log_channel_name(channel);
  }
  return out;
}

// Restores whatever channels were on (KILN_LOGS may be set) after each test.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = enabled_names(); }
  void TearDown() override { EXPECT_EQ(set_log_channels(saved_), ""); }

 private:
  std::string saved_;
};

TEST_F(LogTest, ChannelNames) {
  EXPECT_STREQ(log_channel_name(LogChannel::bytecode), "bytecode");
  EXPECT_STREQ(log_channel_name(LogChannel::graph), "graph");
  EXPECT_STREQ(log_channel_name(LogChannel::guards), "guards");
  EXPECT_STREQ(log_channel_name(LogChannel::recompiles), "recompiles");
  EXPECT_STREQ(log_channel_name(LogChannel::breaks), "breaks");
  EXPECT_STREQ(log_channel_name(LogChannel::backend), "backend");
  EXPECT_STREQ(log_channel_name(LogChannel::perf), "perf");
}

TEST_F(LogTest, EnablesExactlyTheNamedChannels) {
  EXPECT_EQ(set_log_channels("graph,guards"), "");
  EXPECT_EQ(enabled_names(), "graph,guards");
  EXPECT_TRUE(log_enabled(LogChannel::graph));
  EXPECT_TRUE(log_enabled(LogChannel::guards));
  EXPECT_FALSE(log_enabled(LogChannel::bytecode));
  EXPECT_FALSE(log_enabled(LogChannel::perf));
  // A new spec replaces the old one rather than adding to it.
  EXPECT_EQ(set_log_channels("perf"), "");
  EXPECT_EQ(enabled_names(), "perf");
}

TEST_F(LogTest, AllEnablesEveryChannel) {
  EXPECT_EQ(set_log_channels("all"), "");
  for (LogChannel channel : all_channels()) {
    EXPECT_TRUE(log_enabled(channel)) << log_channel_name(channel);
  }
}

TEST_F(LogTest, EmptySpecDisablesEverything) {
  set_log_channels("all");
  EXPECT_EQ(set_log_channels(""), "");
  EXPECT_EQ(enabled_names(), "");
  EXPECT_EQ(set_log_channels(" , ,"), "");
  EXPECT_EQ(enabled_names(), "");
}

TEST_F(LogTest, UnknownNamesAreReturned) {
  EXPECT_EQ(set_log_channels("graph,bogus, breaks ,nope"), "bogus,nope");
  EXPECT_EQ(enabled_names(), "graph,breaks");
  EXPECT_EQ(set_log_channels("all,graphs"), "graphs");
  EXPECT_EQ(enabled_names(), "bytecode,graph,guards,recompiles,dynamic,breaks,backend,prims,perf,cache,kernels,autotune");
}

TEST_F(LogTest, MessagesArePrefixedWithTheChannel) {
  ::testing::internal::CaptureStderr();
  log_message(LogChannel::guards, "L['x'] changed");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "[kiln:guards] L['x'] changed\n");
}

TEST_F(LogTest, KilnLogEvaluatesOnlyWhenEnabled) {
  int evaluated = 0;
  auto expensive = [&evaluated] {
    ++evaluated;
    return std::string("value");
  };
  set_log_channels("guards");
  ::testing::internal::CaptureStderr();
  KILN_LOG(graph, "graph " << expensive());
  KILN_LOG(guards, "guards " << expensive() << " " << 42);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "[kiln:guards] guards value 42\n");
  EXPECT_EQ(evaluated, 1);
}

}  // namespace
}  // namespace kiln::base
