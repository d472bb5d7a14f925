#include "tests/cpp/filecheck.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace kiln::test {
namespace {

// The most output lines a report shows of the region searched.
constexpr int kReportLines = 60;

using Vars = std::map<std::string, std::string>;

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_blank(text[begin])) ++begin;
  while (end > begin && is_blank(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

[[noreturn]] void fail_line(int line, const std::string& what) {
  throw std::invalid_argument("check file line " + std::to_string(line) + ": " + what);
}

std::string escape(const std::string& literal) {
  std::string regex;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) regex += '\\';
    regex += c;
  }
  return regex;
}

// Capture groups a regex opens: '(' not escaped, not in a [class], not "(?".
int count_groups(const std::string& regex) {
  int groups = 0;
  bool in_class = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    if (regex[i] == '\\') {
      ++i;
    } else if (in_class) {
      in_class = regex[i] != ']';
    } else if (regex[i] == '[') {
      in_class = true;
    } else if (regex[i] == '(' && (i + 1 == regex.size() || regex[i + 1] != '?')) {
      ++groups;
    }
  }
  return groups;
}

bool is_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A pattern in parts: literal text, {{regex}}, [[NAME:regex]], [[NAME]].
struct Piece {
  enum Kind { Literal, Regex, Define, Use } kind;
  std::string text;  // Literal's text, Regex's and Define's regex
  std::string name;  // Define, Use
};

// The end of "[[...]]" starting at `open`: the first "]]" outside a [class]
// of the regex inside; npos if none.
size_t variable_end(const std::string& pattern, size_t open) {
  int depth = 0;
  for (size_t i = open + 2; i + 1 < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      ++i;
    } else if (pattern[i] == '[') {
      ++depth;
    } else if (pattern[i] == ']') {
      if (depth == 0 && pattern[i + 1] == ']') return i;
      depth = std::max(0, depth - 1);
    }
  }
  return std::string::npos;
}

std::vector<Piece> split_pattern(const std::string& pattern, int line) {
  std::vector<Piece> pieces;
  auto literal = [&](char c) {
    if (pieces.empty() || pieces.back().kind != Piece::Literal) pieces.push_back({Piece::Literal, "", ""});
    pieces.back().text += c;
  };
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.compare(i, 2, "{{") == 0) {
      const size_t close = pattern.find("}}", i + 2);
      if (close == std::string::npos) fail_line(line, "unclosed {{ in \"" + pattern + "\"");
      if (close == i + 2) fail_line(line, "empty {{}} in \"" + pattern + "\"");
      pieces.push_back({Piece::Regex, pattern.substr(i + 2, close - i - 2), ""});
      i = close + 2;
    } else if (pattern.compare(i, 2, "[[") == 0) {
      const size_t close = variable_end(pattern, i);
      if (close == std::string::npos) fail_line(line, "unclosed [[ in \"" + pattern + "\"");
      const std::string inside = pattern.substr(i + 2, close - i - 2);
      const size_t colon = inside.find(':');
      const std::string name = inside.substr(0, colon);
      if (!is_name(name)) fail_line(line, "bad variable name \"" + name + "\" in \"" + pattern + "\"");
      if (colon == std::string::npos) {
        pieces.push_back({Piece::Use, "", name});
      } else {
        if (colon + 1 == inside.size()) fail_line(line, "empty regex for [[" + name + ":]]");
        pieces.push_back({Piece::Define, inside.substr(colon + 1), name});
      }
      i = close + 2;
    } else if (is_blank(pattern[i])) {
      while (i < pattern.size() && is_blank(pattern[i])) ++i;
      pieces.push_back({Piece::Regex, "[ \\t]+", ""});
    } else {
      literal(pattern[i++]);
    }
  }
  return pieces;
}

// A check's pattern as a regex, given the variables set so far.
struct Compiled {
  std::regex regex;
  std::vector<std::pair<std::string, int>> defines;  // variable, capture group
  std::vector<std::string> uses;                     // variables read from `vars`
};

// Throws std::invalid_argument naming a variable no match has set (with
// `vars` null: any value will do, to check the syntax).
Compiled compile(const Check& check, const Vars* vars) {
  Compiled compiled;
  std::string regex;
  int groups = 0;
  std::map<std::string, int> here;  // variables this pattern defines, by group
  for (const Piece& piece : split_pattern(check.pattern, check.line)) {
    switch (piece.kind) {
      case Piece::Literal: regex += escape(piece.text); break;
      case Piece::Regex:
        regex += "(?:" + piece.text + ")";
        groups += count_groups(piece.text);
        break;
      case Piece::Define:
        here[piece.name] = ++groups;
        compiled.defines.emplace_back(piece.name, groups);
        regex += "(" + piece.text + ")";
        groups += count_groups(piece.text);
        break;
      case Piece::Use:
        if (here.count(piece.name)) {
          regex += "(?:\\" + std::to_string(here[piece.name]) + ")";
        } else if (vars == nullptr) {
          regex += "(?:.*)";
        } else if (auto it = vars->find(piece.name); it != vars->end()) {
          regex += "(?:" + escape(it->second) + ")";
          compiled.uses.push_back(piece.name);
        } else {
          throw std::invalid_argument("[[" + piece.name + "]] was not set by an earlier match");
        }
        break;
    }
  }
  compiled.regex = std::regex(regex, std::regex::ECMAScript);
  return compiled;
}

// The kind a suffix after "PREFIX" names ("", "-NEXT", "-COUNT-3", ...);
// false for none.
bool read_suffix(const std::string& suffix, CheckKind* kind, int* count) {
  static const std::pair<const char*, CheckKind> kSuffixes[] = {
      {"", CheckKind::Plain}, {"-NEXT", CheckKind::Next},   {"-SAME", CheckKind::Same},
      {"-NOT", CheckKind::Not}, {"-LABEL", CheckKind::Label}};
  for (const auto& [text, k] : kSuffixes) {
    if (suffix == text) {
      *kind = k;
      return true;
    }
  }
  const std::string count_prefix = "-COUNT-";
  if (suffix.rfind(count_prefix, 0) != 0 || suffix.size() == count_prefix.size() || suffix.size() > count_prefix.size() + 6)
    return false;
  for (size_t i = count_prefix.size(); i < suffix.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(suffix[i]))) return false;
  }
  *count = std::stoi(suffix.substr(count_prefix.size()));
  *kind = CheckKind::Count;
  return *count > 0;
}

struct Match {
  size_t begin = 0;
  size_t end = 0;
  std::vector<std::string> groups;  // capture groups, from 1
};

// The output, with its line starts, searched a line at a time.
class Output {
 public:
  explicit Output(const std::string& text) : text_(text) {
    starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') starts_.push_back(i + 1);
    }
  }

  // The line (from 1) holding offset `at`; a line's '\n' belongs to it.
  int line_of(size_t at) const {
    return static_cast<int>(std::upper_bound(starts_.begin(), starts_.end(), at) - starts_.begin());
  }

  size_t line_start(int line) const { return starts_[line - 1]; }

  // Offset of the line's '\n', or the text's end.
  size_t line_end(int line) const {
    return line < static_cast<int>(starts_.size()) ? starts_[line] - 1 : text_.size();
  }

  // The first match of `regex` in [from, to), within one line.
  std::optional<Match> search(const std::regex& regex, size_t from, size_t to) const {
    for (size_t at = from; at <= to;) {
      const int line = line_of(at);
      const size_t end = std::min(line_end(line), to);
      auto flags = std::regex_constants::match_default;
      // Mid-line starts see the character before them (for \b; ^ cannot match).
      if (at != line_start(line)) flags |= std::regex_constants::match_prev_avail;
      if (end != line_end(line)) flags |= std::regex_constants::match_not_eol;
      std::match_results<std::string::const_iterator> m;
      if (std::regex_search(text_.begin() + static_cast<std::ptrdiff_t>(at),
                            text_.begin() + static_cast<std::ptrdiff_t>(end), m, regex, flags)) {
        Match match;
        match.begin = at + static_cast<size_t>(m.position(0));
        match.end = match.begin + static_cast<size_t>(m.length(0));
        for (size_t g = 1; g < m.size(); ++g) match.groups.push_back(m[g].str());
        return match;
      }
      if (end >= to) break;
      at = end + 1;
    }
    return std::nullopt;
  }

  // Lines of [from, to), numbered, at most kReportLines of them.
  std::string lines(size_t from, size_t to) const {
    const int first = line_of(from), last = std::max(first, line_of(to > from ? to - 1 : from));
    std::ostringstream out;
    for (int line = first; line <= last && line < first + kReportLines; ++line) {
      out << "  " << std::string(std::max(0, 6 - static_cast<int>(std::to_string(line).size())), ' ') << line
          << " | " << text_.substr(line_start(line), line_end(line) - line_start(line)) << "\n";
    }
    if (last >= first + kReportLines) out << "  ... " << (last - first - kReportLines + 1) << " more lines\n";
    return out.str();
  }

 private:
  const std::string& text_;
  std::vector<size_t> starts_;
};

// Matches checks against one output, keeping the variables they set.
class Matcher {
 public:
  Matcher(const Output& out, const std::string& check_file) : out_(out), check_file_(check_file) {}

  // The first match of `check` in [from, to), setting the variables it
  // defines; nullopt with `problem_` set for a variable never set.
  std::optional<Match> search(const Check& check, size_t from, size_t to) {
    Compiled compiled;
    try {
      compiled = compile(check, &vars_);
    } catch (const std::invalid_argument& error) {
      problem_ = report(check, error.what(), from, to);
      return std::nullopt;
    }
    std::optional<Match> found = out_.search(compiled.regex, from, to);
    if (found) {
      for (const auto& [name, group] : compiled.defines) vars_[name] = found->groups[group - 1];
    }
    return found;
  }

  // The report of a failed check: where it is, what it says, what went
  // wrong, the variables it read and the output region it looked at.
  std::string report(const Check& check, const std::string& what, size_t from, size_t to) const {
    if (!problem_.empty()) return problem_;
    std::ostringstream text;
    text << check_file_ << ":" << check.line << ": error: " << check.directive() << ": " << what << "\n"
         << "  " << check.directive() << ": " << check.pattern << "\n";
    for (const Piece& piece : split_pattern(check.pattern, check.line)) {
      auto it = vars_.find(piece.name);
      if (piece.kind == Piece::Use && it != vars_.end()) text << "  with " << piece.name << " = \"" << it->second << "\"\n";
    }
    const int first = out_.line_of(from), last = out_.line_of(to > from ? to - 1 : from);
    text << "output searched (lines " << first << "-" << last << "):\n" << out_.lines(from, to);
    return text.str();
  }

  // Matches the checks of one block (between two labels, or before the
  // first or after the last) in [begin, end); `previous` is the label's match.
  std::string match_block(const std::vector<const Check*>& checks, size_t begin, size_t end,
                          std::optional<Match> previous) {
    size_t at = begin;
    std::vector<const Check*> nots;
    // The NOT checks waiting since the last match must be absent from [from, until).
    auto check_nots = [&](size_t from, size_t until) -> std::string {
      for (const Check* not_check : nots) {
        if (auto found = search(*not_check, from, until)) {
          return report(*not_check,
                        "found on output line " + std::to_string(out_.line_of(found->begin)) + ", where it must not be",
                        from, until);
        }
        if (!problem_.empty()) return problem_;
      }
      nots.clear();
      return "";
    };
    for (const Check* check : checks) {
      if (check->kind == CheckKind::Not) {
        nots.push_back(check);
        continue;
      }
      const bool follows = check->kind == CheckKind::Next || check->kind == CheckKind::Same;
      if (follows && !previous) return report(*check, "no previous match to follow", at, end);
      const size_t from = at;
      const int times = check->kind == CheckKind::Count ? check->count : 1;
      std::optional<Match> first;
      for (int i = 0; i < times; ++i) {
        const std::optional<Match> found = search(*check, at, end);
        if (!found) {
          const std::string what = check->kind == CheckKind::Count
                                       ? "found " + std::to_string(i) + " of " + std::to_string(times) + " matches"
                                       : "no match";
          return report(*check, what, from, end);
        }
        if (follows) {
          const int want = out_.line_of(previous->end) + (check->kind == CheckKind::Next ? 1 : 0);
          const int got = out_.line_of(found->begin);
          if (got != want) {
            return report(*check,
                          "matched on output line " + std::to_string(got) + ", not on line " + std::to_string(want) +
                              (check->kind == CheckKind::Next ? " (the line after the previous match)"
                                                              : " (the previous match's)"),
                          from, out_.line_end(std::max(got, want)));
          }
        }
        if (!first) first = found;
        previous = found;
        // An empty match must not be counted twice.
        at = std::min(end, found->end + (found->begin == found->end && times > 1 ? 1 : 0));
      }
      std::string problem = check_nots(from, first->begin);
      if (!problem.empty()) return problem;
    }
    return check_nots(at, end);
  }

 private:
  const Output& out_;
  const std::string& check_file_;
  Vars vars_;
  std::string problem_;  // a variable never set, reported as the failure
};

}  // namespace

std::string Check::directive() const {
  switch (kind) {
    case CheckKind::Plain: return prefix;
    case CheckKind::Next: return prefix + "-NEXT";
    case CheckKind::Same: return prefix + "-SAME";
    case CheckKind::Not: return prefix + "-NOT";
    case CheckKind::Label: return prefix + "-LABEL";
    case CheckKind::Count: return prefix + "-COUNT-" + std::to_string(count);
  }
  return prefix;
}

std::vector<Check> read_checks(const std::string& text, const std::vector<std::string>& prefixes) {
  // Longest first, so LLVM-OPT is not read as LLVM with a suffix "-OPT".
  std::vector<std::string> sorted = prefixes;
  std::sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  std::vector<Check> checks;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    size_t begin = 0;
    while (begin < line.size() && is_blank(line[begin])) ++begin;
    size_t colon = begin;
    while (colon < line.size() && (std::isalnum(static_cast<unsigned char>(line[colon])) || line[colon] == '-' ||
                                   line[colon] == '_'))
      ++colon;
    if (colon == begin || colon == line.size() || line[colon] != ':') continue;
    const std::string word = line.substr(begin, colon - begin);
    for (const std::string& prefix : sorted) {
      if (word.rfind(prefix, 0) != 0) continue;
      const std::string suffix = word.substr(prefix.size());
      if (!suffix.empty() && suffix[0] != '-') continue;  // another word (CHECKS:)
      Check check;
      check.prefix = prefix;
      check.line = number;
      if (!read_suffix(suffix, &check.kind, &check.count)) fail_line(number, "unknown directive \"" + word + ":\"");
      check.pattern = trim(line.substr(colon + 1));
      if (check.pattern.empty()) fail_line(number, word + ": empty pattern");
      Compiled compiled;
      try {
        compiled = compile(check, nullptr);
      } catch (const std::regex_error& error) {
        fail_line(number, "bad regex in \"" + check.pattern + "\": " + error.what());
      }
      if (check.kind == CheckKind::Not && !compiled.defines.empty()) fail_line(number, word + ": sets a variable");
      checks.push_back(std::move(check));
      break;
    }
  }
  return checks;
}

std::string file_check(const std::vector<Check>& checks, const std::string& output, const std::string& check_file) {
  const Output out(output);
  Matcher matcher(out, check_file);
  // Labels first, in order, over the whole text: they bound the blocks.
  std::vector<Match> labels;
  size_t at = 0;
  for (const Check& check : checks) {
    if (check.kind != CheckKind::Label) continue;
    const std::optional<Match> found = matcher.search(check, at, output.size());
    if (!found) return matcher.report(check, "label not found", at, output.size());
    labels.push_back(*found);
    at = found->end;
  }
  std::vector<const Check*> block;
  size_t begin = 0;
  std::optional<Match> previous;
  size_t label = 0;
  for (const Check& check : checks) {
    if (check.kind != CheckKind::Label) {
      block.push_back(&check);
      continue;
    }
    std::string problem = matcher.match_block(block, begin, labels[label].begin, previous);
    if (!problem.empty()) return problem;
    block.clear();
    previous = labels[label];
    begin = labels[label].end;
    ++label;
  }
  return matcher.match_block(block, begin, output.size(), previous);
}

}  // namespace kiln::test
