#define CAF_SUITE api
#include "caf/test/unit_test_impl.hpp"
