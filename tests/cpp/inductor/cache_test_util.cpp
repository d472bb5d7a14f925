#include "tests/cpp/inductor/cache_test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace kiln::test {
namespace {

// Removes one entry of a tree walked depth-first (nftw callback).
int remove_entry(const char* path, const struct stat*, int kind, FTW*) {
  if (kind == FTW_DP) {
    ::rmdir(path);
    return 0;
  }
  ::unlink(path);
  return 0;
}

// Makes every directory of a tree writable, so its entries can go.
int open_up(const char* path, const struct stat*, int kind, FTW*) {
  if (kind == FTW_D) ::chmod(path, 0700);
  return 0;
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/kiln-cache-test-XXXXXX";
  const char* made = ::mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
  path_ = made ? made : "";
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  ::nftw(path_.c_str(), open_up, 16, FTW_PHYS);
  ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

unsigned mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  DIR* listing = ::opendir(dir.c_str());
  EXPECT_NE(listing, nullptr) << dir;
  if (!listing) return names;
  while (const dirent* item = ::readdir(listing)) {
    const std::string name = item->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(listing);
  return names;
}

bool make_dir(const std::string& path) { return ::mkdir(path.c_str(), 0700) == 0; }

}  // namespace kiln::test
