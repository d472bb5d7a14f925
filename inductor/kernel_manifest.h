// The kernel replay check's recorder (Note [Kernel replay]): with
// KILN_KERNEL_MANIFEST=<file> set, every distinct kernel this process
// generates appends one line naming it by digests of its loop-level text
// and of the code generated from it. A refactor that changes no kernel
// leaves the manifest of the test corpus unchanged; .ci/kernel_replay.sh
// compares it with the one committed under tests/kernel_replay/.
#pragma once

#include <functional>
#include <string>

namespace kiln::inductor {

// True when KILN_KERNEL_MANIFEST names a file (read once per process).
bool kernel_manifest_on();

// Records a kernel of `kind` ("kernel", "gemm", "cuda") whose cache text is
// `text`; `code` makes its generated code (LLVM IR, CUDA C) and is called
// only the first time this process records that text. Never throws: a
// manifest that cannot be written is reported once on stderr.
void record_kernel(const std::string& kind, const std::string& text, const std::function<std::string()>& code);

// The digest the manifest records for generated code: the host CPU's
// attribute strings ("target-cpu", "target-features") left out.
std::string kernel_code_digest(const std::string& code);

}  // namespace kiln::inductor
