#define CAF_SUITE service
#include "caf/test/unit_test_impl.hpp"
