// A small FileCheck for tests: matches generated text (LLVM IR, CUDA C)
// against CHECK-style directives, as LLVM's FileCheck does, so a test pins
// the lines that matter rather than whole dumps.
//
// Directives, one a line, each a prefix (CHECK, or whatever the test names)
// with an optional suffix, then ':' and a pattern:
//   PREFIX:         the pattern occurs after the previous match;
//   PREFIX-NEXT:    ... on the line right after the previous match's;
//   PREFIX-SAME:    ... on the same line as the previous match, after it;
//   PREFIX-NOT:     it does not occur between the previous match and the
//                   next one (or the end of the text or block);
//   PREFIX-LABEL:   matched first, in order, over the whole text; they cut
//                   the text into blocks, and the other directives between
//                   two labels match only inside the block between them;
//   PREFIX-COUNT-n: the pattern occurs n times, one after another.
// A pattern is literal text, except {{regex}} (std::regex ECMAScript, never
// spanning lines), [[NAME:regex]], which matches regex and sets variable
// NAME to the text matched, and [[NAME]], the text NAME was last set to
// (by this pattern or an earlier match; LABEL patterns see only what
// earlier labels set). A run of spaces or tabs matches any run of them, and
// leading and trailing spaces do not count, as FileCheck by default.
// Not supported: numeric variables, CHECK-DAG, CHECK-EMPTY.
#pragma once

#include <string>
#include <vector>

namespace kiln::test {

// What a directive asks (FileCheck's meanings, above).
enum class CheckKind { Plain, Next, Same, Not, Label, Count };

// One directive of a check file.
struct Check {
  std::string prefix;     // "LLVM" for "LLVM-NEXT:"
  CheckKind kind = CheckKind::Plain;
  int count = 1;          // PREFIX-COUNT-n's n
  std::string pattern;    // as written, without the spaces around it
  int line = 0;           // in the check file, from 1

  // The directive as written: "LLVM-NEXT", "CUDA-COUNT-4".
  std::string directive() const;
};

// The directives of `prefixes` in `text`: every line whose first word
// (after spaces) is a prefix, alone or with one of the suffixes above, then
// ':'. Other lines are ignored. Throws std::invalid_argument naming the
// line for a prefix with an unknown suffix (LLVM-NXT:), an empty pattern,
// an unclosed {{ or [[, a bad variable name, a variable set by a NOT, or a
// regex std::regex refuses.
std::vector<Check> read_checks(const std::string& text, const std::vector<std::string>& prefixes);

// Matches `output` against `checks` in order. Returns "" when every check
// holds, else a report of the first that fails: `check_file`:line, the
// directive and its pattern, what went wrong, and the numbered lines of
// `output` that were searched.
std::string file_check(const std::vector<Check>& checks, const std::string& output, const std::string& check_file);

}  // namespace kiln::test
