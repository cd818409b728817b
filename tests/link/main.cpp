#define CAF_SUITE link
#include "caf/test/unit_test_impl.hpp"
