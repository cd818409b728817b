#define CAF_SUITE api.url
#include "caf/test/unit_test.hpp"

#include <string>

#include "api/url.hpp"

using namespace oncegate::gateway;

CAF_TEST(a key a normaliser could change gets no path segment) {
  // Dot segments, spelled out or as RFC 3986 would decode them first.
  for (auto key : {".", "..", "...", "%2e", "%2E%2E", "a/.", "b/..", "/",
                   "a/b", "a\\b", "a%2Fb", "a;jsessionid=1", "a?b", "a#b"})
    CAF_CHECK_EQUAL(stable_path_segment(key), std::nullopt);
  CAF_CHECK_EQUAL(stable_path_segment(""), std::nullopt);
}

CAF_TEST(other keys are percent encoded with unreserved characters kept) {
  CAF_CHECK_EQUAL(stable_path_segment("order-42"), std::string{"order-42"});
  CAF_CHECK_EQUAL(stable_path_segment("a.b_c~d"), std::string{"a.b_c~d"});
  CAF_CHECK_EQUAL(stable_path_segment(".a"), std::string{".a"});
  CAF_CHECK_EQUAL(stable_path_segment("sha256:ab"), std::string{"sha256%3Aab"});
  CAF_CHECK_EQUAL(stable_path_segment("BINANCE:BTC USDT@1"),
                  std::string{"BINANCE%3ABTC%20USDT%401"});
  CAF_CHECK_EQUAL(stable_path_segment("+&="), std::string{"%2B%26%3D"});
}
