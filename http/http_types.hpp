#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oncegate::gateway {

/// A complete HTTP request, detached from the transport so that request
/// handling is testable without sockets.
struct http_request {
  std::string method;
  /// Origin-form target including the query, e.g. `/v1/webhook?x=1`.
  std::string target;
  /// Header fields with lower-case names, in arrival order.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// Peer address, e.g. `127.0.0.1`: the direct peer of the connection.
  std::string remote;
  /// The client's address when a trusted reverse proxy named one (set by
  /// the API's dispatcher, `api/client_address.hpp`); empty: `remote`.
  std::string client;
  /// Connection and request numbers for log lines (`[C12][R3]`).
  uint64_t conn_id = 0;
  uint64_t req_id = 0;

  /// Returns the first field named `name` (lower case).
  std::optional<std::string_view> header(std::string_view name) const {
    for (auto& [k, v] : headers)
      if (k == name)
        return std::string_view{v};
    return std::nullopt;
  }

  /// Returns every field named `name` (lower case) as one value, the
  /// lines joined with ", " as RFC 9110 combines repeated fields.
  std::optional<std::string> combined_header(std::string_view name) const {
    std::optional<std::string> result;
    for (auto& [k, v] : headers) {
      if (k != name)
        continue;
      if (result)
        *result += ", ";
      else
        result.emplace();
      *result += v;
    }
    return result;
  }

  /// `client`, or `remote` when no proxy named one: the address route
  /// allowlists and logs go by.
  std::string_view client_address() const {
    return client.empty() ? std::string_view{remote} : std::string_view{client};
  }

  /// The target without its query.
  std::string_view path() const {
    std::string_view t{target};
    return t.substr(0, t.find('?'));
  }
};

/// A complete HTTP response.
struct http_response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// Close the connection after sending.
  bool close = false;

  void set(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

/// Completes one request; may be called from any thread, exactly once.
using responder = std::function<void(http_response)>;

/// Turns requests into responses, synchronously or later.
class request_handler {
public:
  virtual ~request_handler() = default;

  /// Handles `req` and eventually calls `done`. Must not block.
  virtual void handle(http_request req, responder done) = 0;

  /// The largest body accepted for `target`, asked once its headers
  /// arrived (the server's own limit still applies).
  virtual std::size_t body_limit(std::string_view target) const {
    return static_cast<std::size_t>(-1);
  }
};

} // namespace oncegate::gateway
