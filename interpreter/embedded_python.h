// Starting CPython inside a host program (the test and benchmark binaries,
// and libkiln's Runtime::start).
#pragma once

#include <string>

namespace kiln::interpreter {

// Initializes an embedded CPython that computes sys.prefix and site-packages
// from `executable` (so Debian's dist-packages or a venv are seen as that
// python sees them), with argv = [program], without parsing the host's
// command line or installing signal handlers. Returns false with *error set
// on failure.
bool start_embedded_python(const char* executable, const char* program, std::string* error);

}  // namespace kiln::interpreter
