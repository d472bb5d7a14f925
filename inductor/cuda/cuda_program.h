// Several kernels' CUDA sources as one NVRTC program (Note [Kernels
// compiled together] in cuda_program.cpp): the text and the entry names it
// gives each kernel. Pure text, like cuda_source.h.
#pragma once

#include <string>
#include <vector>

#include "inductor/cuda/cuda_source.h"

namespace kiln::inductor::cuda {

// The translation unit compiling `sources` (each generate_cuda_source's,
// none empty) as one program: kiln's prelude once, then each source's
// functions, the entries of the i-th renamed program_entry_name(name, i).
// `renamed` (when given) gets each source with its entries' new names.
// One source is returned as it is. Throws CudaError for a source without
// the prelude.
std::string program_of_sources(const std::vector<CudaSource>& sources, std::vector<CudaSource>* renamed = nullptr);

// The name of entry `entry` of the `index`-th kernel of a program.
std::string program_entry_name(const std::string& entry, size_t index);

// Whether `stored` is `entry` itself or program_entry_name(entry, i) for
// some i: the names a cubin of `entry`'s source may hold it under.
bool is_program_entry_of(const std::string& stored, const std::string& entry);

}  // namespace kiln::inductor::cuda
