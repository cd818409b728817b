#define CAF_SUITE common
#include "caf/test/unit_test_impl.hpp"
