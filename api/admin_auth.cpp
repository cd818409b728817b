#include "api/admin_auth.hpp"

#include <cctype>
#include <string_view>

#include "api/auth.hpp"
#include "api/responses.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view bearer = "bearer ";

// The scheme name is case-insensitive (RFC 9110 11.1).
bool bearer_scheme(std::string_view value) {
  if (value.size() < bearer.size())
    return false;
  for (size_t i = 0; i < bearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(value[i])) != bearer[i])
      return false;
  return true;
}

} // namespace

std::optional<http_response> refuse_admin(const admin_options& admin,
                                          const http_request& req) {
  if (!admin.token.empty()) {
    auto auth = req.header("authorization");
    if (!auth || !bearer_scheme(*auth)
        || !constant_time_equal(auth->substr(bearer.size()), admin.token)) {
      auto res = make_problem({401, "unauthorized", "Unauthorized",
                               "admin endpoints need a valid bearer token"});
      res.set("WWW-Authenticate", "Bearer");
      return res;
    }
  } else if (!admin.loopback_listener) {
    return make_problem({403, "forbidden", "Forbidden",
                         "admin endpoints are off on a non-loopback "
                         "listener without an admin token"});
  }
  return std::nullopt;
}

} // namespace oncegate::gateway
