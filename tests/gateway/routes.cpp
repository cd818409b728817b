#define CAF_SUITE gateway.routes
#include "caf/test/unit_test.hpp"
