#define CAF_SUITE actors
#include "caf/test/unit_test_impl.hpp"
