// What the kernel cache tests share (CPU: test_kernel_cache.cpp, CUDA:
// cuda/test_cubin_cache.cpp): a throwaway directory and small file helpers.
// POSIX calls only: torch 2.11's libtorch.so exports a
// std::filesystem::remove_all that calls through a null pointer, and the
// test binary binds to it; std::filesystem also crashed in these tests on
// the GPU host's toolchain.
#pragma once

#include <string>
#include <vector>

namespace kiln::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// when the object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory's absolute path.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The permission bits of `path` (a failed stat fails the test).
unsigned mode_of(const std::string& path);

// The whole contents of `path` ("" when it cannot be read).
std::string read_file(const std::string& path);

// Replaces `path`'s contents with `bytes`.
void write_file(const std::string& path, const std::string& bytes);

// The names in `dir`, without "." and "..".
std::vector<std::string> files_in(const std::string& dir);

// mkdir with mode 0700; true when it made the directory.
bool make_dir(const std::string& path);

}  // namespace kiln::test
