// Tests of base/check.h: a failed KILN_CHECK throws InternalError naming
// where and what; a passing one evaluates its message never.
#include <gtest/gtest.h>

#include <string>

#include "base/check.h"

namespace kiln::base {
namespace {

int message_evaluations = 0;

int counted(int value) {
  ++message_evaluations;
  return value;
}

TEST(Check, AFailedCheckNamesFileLineConditionAndMessage) {
  try {
    const int rank = 3;
    KILN_CHECK(rank == 2, "rank " << rank << " where 2 was expected");
    FAIL() << "KILN_CHECK did not throw";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_check.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("kiln invariant failed: rank == 2: rank 3 where 2 was expected"), std::string::npos) << what;
  }
}

TEST(Check, APassingCheckBuildsNoMessage) {
  message_evaluations = 0;
  KILN_CHECK(1 + 1 == 2, "never " << counted(1));
  EXPECT_EQ(message_evaluations, 0);
  // InternalError is a logic_error: callers catching those still do.
  EXPECT_THROW(KILN_CHECK(false, ""), std::logic_error);
}

}  // namespace
}  // namespace kiln::base
