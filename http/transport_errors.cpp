#include "http/transport_errors.hpp"

#include <atomic>
#include <string>

#include "common/logging.hpp"
#include "http/http_server.hpp"

namespace oncegate::gateway {

namespace {

std::atomic<uint64_t> internal_errors_total{0};
std::atomic<uint64_t> accept_errors_total{0};

const char* reason_type(int status) {
  switch (status) {
    case 400:
      return "bad-request";
    case 408:
      return "request-timeout";
    case 413:
      return "body-too-large";
    case 431:
      return "headers-too-large";
    case 500:
      return "internal-error";
    case 501:
      return "not-implemented";
    case 503:
      return "unavailable";
    default:
      return "error";
  }
}

} // namespace

http_transport_counters transport_counters() {
  http_transport_counters res;
  res.internal_errors = internal_errors_total.load(std::memory_order_relaxed);
  res.accept_errors = accept_errors_total.load(std::memory_order_relaxed);
  return res;
}

namespace detail {

http_response transport_problem(int status, const char* title,
                                const char* detail) {
  http_response res;
  res.status = status;
  res.close = true;
  res.set("Content-Type", "application/problem+json");
  res.set("Cache-Control", "no-store");
  if (status == 503)
    res.set("Retry-After", "1");
  res.body = std::string{"{\"type\":\"https://oncegate.dev/problems/"}
             + reason_type(status) + "\",\"title\":\"" + title
             + "\",\"status\":" + std::to_string(status) + ",\"detail\":\""
             + detail + "\"}";
  return res;
}

http_response internal_error_problem() {
  return transport_problem(500, "Internal error",
                           "the answer could not be produced; retry later");
}

void report_internal_error(uint64_t conn, uint64_t req, const char* where,
                           const char* what) {
  internal_errors_total.fetch_add(1, std::memory_order_relaxed);
  log::gateway()->error("[C{}][R{}] http.internal_error where={} what={}",
                        conn, req, where, what);
}

void count_accept_error() {
  accept_errors_total.fetch_add(1, std::memory_order_relaxed);
}

} // namespace detail

} // namespace oncegate::gateway
