#define CAF_SUITE replication
#include "caf/test/unit_test_impl.hpp"
