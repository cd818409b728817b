#define CAF_SUITE cluster
#include "caf/test/unit_test_impl.hpp"
