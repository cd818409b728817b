#define CAF_SUITE gateway.upstream_client
#include "caf/test/unit_test.hpp"

#include "gateway/upstream_client.hpp"

using namespace oncegate::gateway;

CAF_TEST(upstream urls name host port and path) {
  auto t = parse_upstream_url("http://127.0.0.1:9000/orders?x=1");
  CAF_REQUIRE(t);
  CAF_CHECK_EQUAL(t->host, "127.0.0.1");
  CAF_CHECK_EQUAL(t->port, 9000);
  CAF_CHECK_EQUAL(t->path, "/orders?x=1");
  t = parse_upstream_url("http://orders.internal");
  CAF_REQUIRE(t);
  CAF_CHECK_EQUAL(t->host, "orders.internal");
  CAF_CHECK_EQUAL(t->port, 80);
  CAF_CHECK_EQUAL(t->path, "/");
  t = parse_upstream_url("http://[::1]:8081/x");
  CAF_REQUIRE(t);
  CAF_CHECK_EQUAL(t->host, "::1");
  CAF_CHECK_EQUAL(t->port, 8081);
}

CAF_TEST(anything but a plain http url is refused) {
  for (auto bad : {"", "https://x/", "ftp://x", "http://", "http://:80/",
                   "http://x:0/", "http://x:65536/", "http://x:8a/",
                   "http://user@x/", "http://[::1/", "http://[::1]x/"})
    CAF_CHECK(!parse_upstream_url(bad));
}
