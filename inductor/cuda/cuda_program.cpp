#include "inductor/cuda/cuda_program.h"

#include <cstring>

#include "inductor/cuda/cuda_text.h"

namespace kiln::inductor::cuda {

// Note [Kernels compiled together]
// NVRTC costs about 20 ms a program before the first line of a kernel
// (measured on the dev VM's NVRTC 13: a one-line kernel takes 20.4 ms with
// or without kiln's prelude), and a training graph has a hundred or more
// small kernels whose bodies take 20-50 ms each. Compiled as one program,
// eight such kernels (four pointwise, four row reductions) took 287 ms
// against 457 ms one program each. So a graph's kernels missing from both
// caches are compiled a few to a program (cuda_kernel_batch.cpp decides how
// many): the prelude once, then each kernel's functions. The generated
// entry names say a kernel's shape, not its identity, so two kernels of a
// program may share one: the i-th kernel's entries become <entry>_k<i>
// (its vector entry <entry>_k<i>_vec). A kernel's functions name only its
// own entries, so renaming every occurrence of the scalar entry's name in
// its text renames both entries and nothing else.
// The cubin is the whole program's, so each kernel of it is filed in the
// disk cache under its own source's key (Note [Cubin cache keys]) with the
// program's cubin and its entry's new name: a later process finds every
// kernel by its own source, whichever kernels it was compiled beside, and
// the cache's name check accepts an entry's program names
// (is_program_entry_of). The cost: the program's cubin stored once per
// kernel on disk; in memory its module is loaded once per device for all
// the kernels compiled together (CudaKernel's shared modules).

namespace {

// Replaces every occurrence of `from` in `text` by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

std::string program_entry_name(const std::string& entry, size_t index) {
  return entry + "_k" + std::to_string(index);
}

bool is_program_entry_of(const std::string& stored, const std::string& entry) {
  if (stored == entry) return true;
  const std::string marker = entry + "_k";
  if (stored.size() <= marker.size() || stored.compare(0, marker.size(), marker) != 0) return false;
  for (size_t i = marker.size(); i < stored.size(); ++i) {
    if (stored[i] < '0' || stored[i] > '9') return false;
  }
  return true;
}

std::string program_of_sources(const std::vector<CudaSource>& sources, std::vector<CudaSource>* renamed) {
  if (renamed != nullptr) *renamed = sources;
  if (sources.size() == 1) return sources[0].text;
  const char* prelude = detail::cuda_prelude();
  const size_t prelude_size = std::strlen(prelude);
  std::string program = prelude;
  for (size_t i = 0; i < sources.size(); ++i) {
    const CudaSource& source = sources[i];
    if (source.text.compare(0, prelude_size, prelude) != 0 || source.scalar.name.empty()) {
      throw CudaError("a CUDA source without kiln's prelude or an entry cannot join a program");
    }
    const std::string name = program_entry_name(source.scalar.name, i);
    program += replace_all(source.text.substr(prelude_size), source.scalar.name, name);
    if (renamed != nullptr) {
      CudaSource& out = (*renamed)[i];
      out.scalar.name = name;
      if (!out.vector.name.empty()) out.vector.name = name + "_vec";
    }
  }
  return program;
}

}  // namespace kiln::inductor::cuda
