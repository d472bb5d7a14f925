// Tests of the FileCheck matcher the codegen tests use (tests/cpp/filecheck.h):
// each directive passes where it should and, as important, fails where it
// should, with a report naming the check line, the pattern and the output
// searched.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tests/cpp/filecheck.h"

namespace kiln::test {
namespace {

// The report of matching `output` against the CHECK directives of `checks`.
std::string run(const std::string& checks, const std::string& output) {
  return file_check(read_checks(checks, {"CHECK"}), output, "t.check");
}

const std::string kOutput =
    "define void @kernel(ptr %0) {\n"    // 1
    "entry:\n"                           // 2
    "  %1 = load float, ptr %0\n"        // 3
    "  %2 = fadd float %1, 1.0\n"        // 4
    "  br label %loop\n"                 // 5
    "loop:\n"                            // 6
    "  %3 = call float @erff(float %2)\n"  // 7
    "  ret void\n"                       // 8
    "}\n"                                // 9
    "define void @other() {\n"           // 10
    "  ret void\n"                       // 11
    "}\n";                               // 12

TEST(FileCheck, PlainChecksMatchInOrder) {
  EXPECT_EQ(run("CHECK: define void @kernel\nCHECK: fadd float\nCHECK: @erff", kOutput), "");
  const std::string report = run("CHECK: @erff\nCHECK: fadd float", kOutput);
  EXPECT_NE(report.find("t.check:2: error: CHECK: no match"), std::string::npos) << report;
  EXPECT_NE(report.find("  CHECK: fadd float"), std::string::npos) << report;
  // The region searched starts after the previous match, numbered.
  EXPECT_NE(report.find("output searched (lines 7-12)"), std::string::npos) << report;
  EXPECT_NE(report.find("      8 |   ret void"), std::string::npos) << report;
}

TEST(FileCheck, RegexBlocksAndLiteralMetacharacters) {
  EXPECT_EQ(run("CHECK: %{{[0-9]+}} = fadd float %1, 1.0", kOutput), "");
  EXPECT_EQ(run("CHECK: call float @erff(float %2)", kOutput), "");  // ( ) . stay literal
  EXPECT_NE(run("CHECK: fadd float %1, 1x0", kOutput), "");           // '.' is not a wildcard
  EXPECT_NE(run("CHECK: %{{[a-z]+}} = fadd", kOutput), "");
  // Runs of blanks match any run; the pattern's own edges do not count.
  EXPECT_EQ(run("CHECK:    %2   =   fadd\tfloat   ", kOutput), "");
  EXPECT_NE(run("CHECK: %2=fadd", kOutput), "");
}

TEST(FileCheck, NextAndSame) {
  EXPECT_EQ(run("CHECK: entry:\nCHECK-NEXT: load float\nCHECK-NEXT: fadd", kOutput), "");
  const std::string next = run("CHECK: entry:\nCHECK-NEXT: fadd", kOutput);
  EXPECT_NE(next.find("t.check:2: error: CHECK-NEXT: matched on output line 4, not on line 3"), std::string::npos)
      << next;
  EXPECT_EQ(run("CHECK: %3 = call\nCHECK-SAME: @erff\nCHECK-SAME: (float", kOutput), "");
  const std::string same = run("CHECK: %3 = call\nCHECK-SAME: ret void", kOutput);
  EXPECT_NE(same.find("CHECK-SAME: matched on output line 8, not on line 7"), std::string::npos) << same;
  // SAME looks after the previous match only.
  EXPECT_NE(run("CHECK: @erff\nCHECK-SAME: call", kOutput), "");
  EXPECT_NE(run("CHECK-NEXT: entry:", kOutput).find("no previous match to follow"), std::string::npos);
}

TEST(FileCheck, NotHoldsBetweenTheMatchesAround) {
  EXPECT_EQ(run("CHECK: entry:\nCHECK-NOT: call\nCHECK: br label", kOutput), "");
  const std::string report = run("CHECK: entry:\nCHECK-NOT: fadd\nCHECK: br label", kOutput);
  EXPECT_NE(report.find("t.check:2: error: CHECK-NOT: found on output line 4, where it must not be"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("output searched (lines 2-5)"), std::string::npos) << report;
  // A NOT at the end runs to the end of the text; at the start, from its top.
  EXPECT_NE(run("CHECK: @erff\nCHECK-NOT: ret void", kOutput), "");
  EXPECT_EQ(run("CHECK: @other\nCHECK-NOT: @erff", kOutput), "");
  EXPECT_NE(run("CHECK-NOT: fadd\nCHECK: @erff", kOutput), "");
}

TEST(FileCheck, LabelsConfineTheirBlocks) {
  EXPECT_EQ(run("CHECK-LABEL: @kernel\nCHECK: ret void\nCHECK-LABEL: @other\nCHECK: ret void", kOutput), "");
  // @erff is in @kernel's block only: it is not found after @other's label,
  // and @kernel's block must not reach into @other's.
  EXPECT_NE(run("CHECK-LABEL: @other\nCHECK: @erff", kOutput), "");
  const std::string report = run("CHECK-LABEL: @kernel\nCHECK: @other\nCHECK-LABEL: @other", kOutput);
  EXPECT_NE(report.find("t.check:2: error: CHECK: no match"), std::string::npos) << report;
  EXPECT_NE(report.find("output searched (lines 1-10)"), std::string::npos) << report;
  // NOT holds up to the end of its block, not beyond.
  EXPECT_EQ(run("CHECK-LABEL: @kernel\nCHECK: @erff\nCHECK-NOT: @other\nCHECK-LABEL: @other", kOutput), "");
  EXPECT_NE(run("CHECK-LABEL: @missing\nCHECK: ret", kOutput).find("label not found"), std::string::npos);
  // NEXT after a label follows the label's line.
  EXPECT_EQ(run("CHECK-LABEL: @other\nCHECK-NEXT: ret void", kOutput), "");
}

TEST(FileCheck, CountMatchesOneAfterAnother) {
  EXPECT_EQ(run("CHECK-COUNT-2: ret void", kOutput), "");
  EXPECT_EQ(run("CHECK-COUNT-3: float", kOutput), "");  // lines 3, 4 and 7 (twice there)
  const std::string report = run("CHECK-COUNT-3: ret void", kOutput);
  EXPECT_NE(report.find("CHECK-COUNT-3: found 2 of 3 matches"), std::string::npos) << report;
}

TEST(FileCheck, VariablesCarryMatchedText) {
  EXPECT_EQ(run("CHECK: [[X:%[0-9]+]] = load float\nCHECK: fadd float [[X]], 1.0", kOutput), "");
  EXPECT_EQ(run("CHECK: [[SUM:%[0-9]+]] = fadd\nCHECK: @erff(float [[SUM]])", kOutput), "");
  const std::string report = run("CHECK: [[X:%[0-9]+]] = load\nCHECK: @erff(float [[X]])", kOutput);
  EXPECT_NE(report.find("t.check:2: error: CHECK: no match"), std::string::npos) << report;
  EXPECT_NE(report.find("with X = \"%1\""), std::string::npos) << report;
  // A use in the pattern that sets it is a backreference.
  EXPECT_EQ(run("CHECK: add [[V:%[0-9]]], [[V]]", "add %4, %5\nadd %5, %5\n"), "");
  EXPECT_NE(run("CHECK: add [[V:%[0-9]]], [[V]]", "add %4, %5\n"), "");
  // Labels set variables for the checks after them.
  EXPECT_EQ(run("CHECK-LABEL: define void @[[F:[a-z]+]](\nCHECK-LABEL: @other\nCHECK-NOT: @[[F]]", kOutput), "");
  const std::string unset = run("CHECK: ret [[Y]]", kOutput);
  EXPECT_NE(unset.find("t.check:1: error: CHECK: [[Y]] was not set by an earlier match"), std::string::npos) << unset;
}

TEST(FileCheck, ReadsOnlyItsPrefixes) {
  const std::vector<Check> checks = read_checks(
      "# LLVM: a comment, not a directive\n"
      "LLVM: one\n"
      "  LLVM-OPT-NEXT: two\n"
      "CUDA: three\n"
      "LLVMX: not ours\n",
      {"LLVM", "LLVM-OPT"});
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].prefix, "LLVM");
  EXPECT_EQ(checks[0].line, 2);
  EXPECT_EQ(checks[0].pattern, "one");
  EXPECT_EQ(checks[1].prefix, "LLVM-OPT");
  EXPECT_EQ(checks[1].kind, CheckKind::Next);
  EXPECT_EQ(checks[1].directive(), "LLVM-OPT-NEXT");
  EXPECT_EQ(checks[1].line, 3);
}

TEST(FileCheck, MalformedDirectivesThrow) {
  const struct {
    const char* text;
    const char* expected;
  } cases[] = {
      {"CHECK: a\nCHECK-NXT: b\n", "check file line 2: unknown directive \"CHECK-NXT:\""},
      {"CHECK-COUNT-0: b\n", "unknown directive \"CHECK-COUNT-0:\""},
      {"CHECK:   \n", "check file line 1: CHECK: empty pattern"},
      {"CHECK: a {{[0-9]+\n", "unclosed {{"},
      {"CHECK: a {{}}\n", "empty {{}}"},
      {"CHECK: a {{[0-9}}\n", "bad regex in \"a {{[0-9}}\""},
      {"CHECK: [[1X:a]]\n", "bad variable name \"1X\""},
      {"CHECK: [[X:a\n", "unclosed [["},
      {"CHECK: [[X:]]\n", "empty regex for [[X:]]"},
      {"CHECK-NOT: [[X:a]]\n", "CHECK-NOT: sets a variable"},
  };
  for (const auto& c : cases) {
    try {
      read_checks(c.text, {"CHECK"});
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(c.expected), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace kiln::test
