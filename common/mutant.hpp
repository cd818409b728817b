// Mutation points: where the test-only mutant build (tests/mutants) breaks
// the product on purpose, so that the test command can show that a named
// test catches each bug (docs/testing.md, "Mutants").
//
// The product is compiled without ONCEGATE_MUTANTS: every
// `ONCEGATE_MUTANT("name")` is the constant `false`, and the code it guards
// is dead and dropped; the shipped binary holds no mutant and no switch to
// turn one on. Only `oncegate_mutant` compiles the translation units that
// hold mutation points a second time with ONCEGATE_MUTANTS defined; there
// the point asks `oncegate::mutant::active` (tests/mutants/mutant.cpp),
// which compares the name with the environment variable ONCEGATE_MUTANT.
#pragma once

#ifdef ONCEGATE_MUTANTS
namespace oncegate::mutant {

/// True if the mutant build runs with ONCEGATE_MUTANT=`name`. Records that
/// the mutation point was reached (ONCEGATE_MUTANT_TRACE), so that a test
/// failing for an unrelated reason does not count as a kill.
bool active(const char* name);

} // namespace oncegate::mutant
#  define ONCEGATE_MUTANT(name) (::oncegate::mutant::active(name))
#else
#  define ONCEGATE_MUTANT(name) false
#endif
