#define CAF_SUITE persistence
#include "caf/test/unit_test_impl.hpp"
