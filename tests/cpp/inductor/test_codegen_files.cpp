// FileCheck-style codegen tests: each file of tests/cpp/inductor/codegen/
// holds one kernel in format_kernel's text form, the generators to run on
// it (# RUN: llvm, # RUN: cuda) and the directives (tests/cpp/filecheck.h)
// its generated code must satisfy; each file is one test case. The format
// and how to add a file: docs/architecture.md, "Inductor (CPU)", Codegen
// tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cuda/cuda_source.h"
#include "inductor/kernel_ir.h"
#include "inductor/kernel_ir_parse.h"
#include "tests/cpp/filecheck.h"

namespace kiln::inductor {
namespace {

namespace fs = std::filesystem;
using test::Check;

// The prefix of each generated text: unoptimized LLVM IR, LLVM IR after
// O2, CUDA C; CHECK stands for the only generator a file runs.
const std::vector<std::string> kPrefixes = {"CHECK", "LLVM", "LLVM-OPT", "CUDA"};

// The directory of codegen files: from the source root (ctest's working
// directory), else beside this file.
fs::path codegen_dir() {
  const fs::path from_root = "tests/cpp/inductor/codegen";
  if (fs::is_directory(from_root)) return from_root;
  return fs::path(__FILE__).parent_path() / "codegen";
}

std::vector<fs::path> codegen_files() {
  std::vector<fs::path> files;
  if (!fs::is_directory(codegen_dir())) return files;
  for (const fs::directory_entry& entry : fs::directory_iterator(codegen_dir())) {
    if (entry.is_regular_file() && entry.path().extension() == ".kernel") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// One codegen file, read.
struct CodegenFile {
  std::string name;         // the file's name, for reports
  std::string kernel_text;  // the kernel lines; other lines blank, so line numbers stay the file's
  bool llvm = false;        // # RUN: llvm
  bool cuda = false;        // # RUN: cuda [tpr=N rpb=N items=N vec=N minblocks=N]
  std::vector<std::string> cuda_options;
  std::vector<Check> checks;

  // The checks of `prefix`, and of CHECK when this generator is the only one.
  std::vector<Check> checks_of(const std::string& prefix) const {
    std::vector<Check> chosen;
    for (const Check& check : checks) {
      if (check.prefix == prefix || (check.prefix == "CHECK" && prefix != "LLVM-OPT")) chosen.push_back(check);
    }
    return chosen;
  }
};

// Reads a codegen file. Throws std::invalid_argument naming the file and
// line for a malformed RUN line or directives no generator would match.
CodegenFile read_codegen_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  CodegenFile file;
  file.name = path.filename().string();
  auto fail = [&](int line, const std::string& what) {
    throw std::invalid_argument(file.name + (line > 0 ? ":" + std::to_string(line) : "") + ": " + what);
  };
  try {
    file.checks = test::read_checks(text, kPrefixes);
  } catch (const std::invalid_argument& error) {
    fail(0, error.what());
  }
  std::set<int> check_lines;
  for (const Check& check : file.checks) check_lines.insert(check.line);
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '#') {
      std::istringstream words(line.substr(first + 1));
      std::string word, generator;
      if (words >> word && word == "RUN:") {
        if (!(words >> generator) || (generator != "llvm" && generator != "cuda"))
          fail(number, "RUN: names llvm or cuda");
        bool& runs = generator == "llvm" ? file.llvm : file.cuda;
        if (runs) fail(number, "a second RUN: " + generator);
        runs = true;
        for (std::string option; words >> option;) {
          if (generator != "cuda") fail(number, "RUN: llvm takes no options");
          file.cuda_options.push_back(option);
        }
      }
      line.clear();
    } else if (check_lines.count(number)) {
      line.clear();
    }
    file.kernel_text += line + "\n";
  }
  if (!file.llvm && !file.cuda) fail(0, "no \"# RUN: llvm\" or \"# RUN: cuda\" line");
  int count[2] = {0, 0};  // llvm, cuda
  for (const Check& check : file.checks) {
    if (check.prefix == "CHECK" && file.llvm && file.cuda)
      fail(check.line, "CHECK with two RUN lines: write LLVM: or CUDA:");
    const bool llvm = check.prefix == "LLVM" || check.prefix == "LLVM-OPT" || (check.prefix == "CHECK" && file.llvm);
    if (llvm && !file.llvm) fail(check.line, check.directive() + " without \"# RUN: llvm\"");
    if (!llvm && !file.cuda) fail(check.line, check.directive() + " without \"# RUN: cuda\"");
    ++count[llvm ? 0 : 1];
  }
  if (file.llvm && count[0] == 0) fail(0, "RUN: llvm with no LLVM: or LLVM-OPT: directives");
  if (file.cuda && count[1] == 0) fail(0, "RUN: cuda with no CUDA: directives");
  return file;
}

// The launch configuration a RUN: cuda line asks for: the kernel's default
// with its options (tpr=256 rpb=1 items=16 vec=16 minblocks=4) applied.
cuda::LaunchConfig cuda_config(const Kernel& kernel, const CodegenFile& file) {
  cuda::LaunchConfig config = cuda::default_launch_config(kernel);
  for (const std::string& option : file.cuda_options) {
    const size_t eq = option.find('=');
    const std::string key = option.substr(0, eq);
    int* field = key == "tpr"         ? &config.threads_per_row
                 : key == "rpb"       ? &config.rows_per_block
                 : key == "items"     ? &config.max_items
                 : key == "vec"       ? &config.vector_bytes
                 : key == "minblocks" ? &config.min_blocks_per_sm
                                      : nullptr;
    if (field == nullptr || eq == std::string::npos)
      throw std::invalid_argument(file.name + ": unknown RUN: cuda option \"" + option + "\"");
    *field = std::stoi(option.substr(eq + 1));
  }
  return config;
}

// With KILN_CODEGEN_DUMP=DIR, writes a generated text to DIR/<file><suffix>
// (for writing a file's directives); returns where, or "".
std::string dump(const CodegenFile& file, const std::string& suffix, const std::string& text) {
  const char* dir = std::getenv("KILN_CODEGEN_DUMP");
  if (dir == nullptr || *dir == '\0') return "";
  fs::create_directories(dir);
  const fs::path path = fs::path(dir) / (fs::path(file.name).stem().string() + suffix);
  std::ofstream(path) << text;
  return path.string();
}

// Runs the directives of `prefix` over `output`, failing the test with the
// report.
void expect_checks(const CodegenFile& file, const std::string& prefix, const std::string& output,
                   const std::string& what) {
  const std::vector<Check> checks = file.checks_of(prefix);
  if (checks.empty()) return;
  const std::string report = test::file_check(checks, output, file.name);
  if (!report.empty()) {
    ADD_FAILURE() << what << " does not match " << file.name << "'s " << prefix << " directives:\n"
                  << report << "(KILN_CODEGEN_DUMP=DIR writes the whole text to DIR)";
  }
}

class CodegenFiles : public ::testing::TestWithParam<fs::path> {};

TEST_P(CodegenFiles, Match) {
  CodegenFile file;
  Kernel kernel;
  try {
    file = read_codegen_file(GetParam());
  } catch (const std::invalid_argument& error) {
    FAIL() << error.what();
  }
  try {
    kernel = parse_kernel(file.kernel_text);
  } catch (const std::invalid_argument& error) {
    FAIL() << file.name << ": " << error.what();
  }
  const std::string problem = verify(kernel);
  if (!problem.empty()) FAIL() << file.name << ": the kernel does not verify: " << problem;
  if (file.cuda) {
    try {
      const cuda::CudaSource source = cuda::generate_cuda_source(kernel, cuda_config(kernel, file));
      dump(file, ".cu", source.text);
      expect_checks(file, "CUDA", source.text, "The CUDA C");
    } catch (const std::exception& error) {
      ADD_FAILURE() << file.name << ": writing CUDA C failed: " << error.what();
    }
  }
  if (!file.llvm) return;
  if (!cpu::cpu_codegen_available())
    GTEST_SKIP() << file.name << ": LLVM directives not run: kiln was built with KILN_WITH_LLVM=OFF (no LLVM 16)";
  try {
    const cpu::CpuKernel compiled = cpu::compile_cpu_kernel(kernel, /*keep_ir=*/true);
    dump(file, ".ll", compiled.llvm_ir);
    dump(file, ".opt.ll", compiled.optimized_llvm_ir);
    expect_checks(file, "LLVM", compiled.llvm_ir, "The LLVM IR");
    expect_checks(file, "LLVM-OPT", compiled.optimized_llvm_ir, "The optimized LLVM IR");
  } catch (const cpu::CodegenError& error) {
    ADD_FAILURE() << file.name << ": compiling failed: " << error.what();
  }
}

// "pointwise_add_f32.kernel" -> "pointwise_add_f32", a test name.
std::string case_name(const ::testing::TestParamInfo<fs::path>& info) {
  std::string name = info.param.stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CodegenFile, CodegenFiles, ::testing::ValuesIn(codegen_files()), case_name);

// The directory is found and holds the representative kernels (were it
// missing, the suite above would silently hold no case).
TEST(CodegenFileDirectory, HoldsFiles) {
  EXPECT_GE(codegen_files().size(), 8u) << "no codegen files in " << codegen_dir().string()
                                        << " (run kiln_cpp_tests from the source root)";
}

}  // namespace
}  // namespace kiln::inductor
