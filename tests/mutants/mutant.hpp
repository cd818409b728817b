// The mutant build's switch (see common/mutant.hpp), tests only.
#pragma once

#include "common/mutant.hpp"

namespace oncegate::mutant {

#ifndef ONCEGATE_MUTANTS
bool active(const char* name);
#endif

/// The mutants this build knows, null-terminated.
const char* const* known();

/// Whether `name` is one of `known()`.
bool valid(const char* name);

/// ONCEGATE_MUTANT, or null when the build runs unmutated.
const char* current();

} // namespace oncegate::mutant
