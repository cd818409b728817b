#pragma once

// What the transport answers by itself (limits, timeouts, a handler that
// threw) and the counters of its failures. No connection state and no
// request parsing here (`http/http_session.*`).

#include <cstdint>
#include <exception>

#include "http/http_types.hpp"

namespace oncegate::gateway::detail {

/// A problem response produced by the transport itself (before a request
/// reached the handler). It closes the connection.
http_response transport_problem(int status, const char* title,
                                const char* detail);

/// The answer to a request whose handler threw or whose answer could not
/// be serialised. Fixed text: building it cannot throw in turn.
http_response internal_error_problem();

/// Counts and logs an exception caught on the way to a response.
void report_internal_error(uint64_t conn, uint64_t req, const char* where,
                           const char* what);

/// Runs `fn`; when it throws, counts and logs the exception as an internal
/// error at `where` of request `req` on connection `conn`, and returns
/// false.
template <class F>
bool run_guarded(uint64_t conn, uint64_t req, const char* where, F&& fn) {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    report_internal_error(conn, req, where, e.what());
  } catch (...) {
    report_internal_error(conn, req, where, "unknown exception");
  }
  return false;
}

/// Counts a failed `accept`.
void count_accept_error();

} // namespace oncegate::gateway::detail
