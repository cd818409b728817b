#define CAF_SUITE routing
#include "caf/test/unit_test_impl.hpp"
