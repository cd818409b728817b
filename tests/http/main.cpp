#define CAF_SUITE http
#include "caf/test/unit_test_impl.hpp"
