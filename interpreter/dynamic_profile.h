// Dynamic dims a code learned in earlier runs, kept on disk beside the
// kernel caches (Note [Dynamic profiles] in dynamic_profile.cpp).
#pragma once

#include <Python.h>

#include "tracer/dynamic_shapes.h"

namespace kiln::interpreter {

// True when profiles are read and written: the disk cache is on and
// KILN_DYNAMIC_PROFILES is not "0".
bool dynamic_profiles_enabled();

// Adds to `dims` the dims an earlier run saved for `code`, the first time
// this process asks for that code (later calls, after kiln.reset() too,
// add nothing). Returns how many dims were new.
int seed_from_profile(PyCodeObject* code, tracer::DynamicDims* dims);

// Saves `dims` (their sources and dim numbers) as `code`'s profile,
// replacing the one on disk (removing it when `dims` is empty). Failures
// are logged, never raised.
void save_profile(PyCodeObject* code, const tracer::DynamicDims& dims);

}  // namespace kiln::interpreter
