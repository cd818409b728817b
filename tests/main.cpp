// The one main() of every unit-test binary (CAF's test runner); each suite
// lives in its component's folder and is picked with `-s`.
#define CAF_SUITE main
#include "caf/test/unit_test_impl.hpp"
