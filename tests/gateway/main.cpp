#define CAF_SUITE gateway
#include "caf/test/unit_test_impl.hpp"
