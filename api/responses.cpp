#include "api/responses.hpp"

#include <string_view>
#include <utility>

#include "api/json_text.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view problem_base = "https://oncegate.dev/problems/";

bool printable_ascii(std::string_view str) {
  for (auto c : str)
    if (c < 0x20 || c > 0x7E)
      return false;
  return !str.empty();
}

rejection unavailable(errc error) {
  return {503, "unavailable", "Service unavailable",
          error == errc::overloaded
            ? "node overloaded; this request was not executed; retry later"
            : "no durable decision could be made; this request was not "
              "executed; retry later"};
}

} // namespace

void set_common_headers(http_response& res, const std::string& key) {
  res.set("Cache-Control", "no-store");
  // Header values must be visible ASCII; body-sourced keys may not be.
  if (printable_ascii(key))
    res.set("Idempotency-Key", key);
}

/// Header lines of an answer (content type, cache control, the key, a
/// replay mark, Retry-After or Allow): one allocation for them.
constexpr std::size_t answer_fields = 6;

/// A problem body with its extensions fits without growing.
constexpr std::size_t problem_body_bytes = 384;

http_response make_problem(const rejection& why, const std::string& key,
                           std::string_view extensions) {
  http_response res;
  res.headers.reserve(answer_fields);
  res.status = why.status;
  res.set("Content-Type", "application/problem+json");
  set_common_headers(res, key);
  std::string& out = res.body;
  out.reserve(problem_body_bytes + key.size());
  out = R"({"type":")";
  out += problem_base;
  out += why.type;
  out += R"(","title":)";
  append_json_string(out, why.title);
  out += R"(,"status":)";
  out += std::to_string(why.status);
  out += R"(,"detail":)";
  append_json_string(out, why.detail);
  out += extensions;
  if (!key.empty()) {
    out += R"(,"idempotency_key":)";
    append_json_string(out, key);
  }
  out += '}';
  return res;
}

http_response json_response(int status, std::string body) {
  http_response res;
  res.headers.reserve(answer_fields);
  res.status = status;
  res.set("Content-Type", "application/json");
  res.set("Cache-Control", "no-store");
  res.body = std::move(body);
  return res;
}

http_response method_not_allowed(const char* allow) {
  auto res = make_problem({405, "method-not-allowed", "Method not allowed",
                           std::string{"allowed: "} + allow});
  res.set("Allow", allow);
  return res;
}

http_response not_found(std::string detail) {
  return make_problem({404, "not-found", "Not found", std::move(detail)});
}

http_response unavailable_response(errc error, const std::string& key) {
  auto res = make_problem(unavailable(error), key);
  res.set("Retry-After", "1");
  return res;
}

http_response route_paused(const std::string& route, const std::string& key) {
  auto res = make_problem({503, "paused", "Route paused",
                           "route " + route
                             + " is paused by its operator; this request was "
                               "not executed; retry later"},
                          key);
  res.set("Retry-After", "30");
  return res;
}

} // namespace oncegate::gateway
