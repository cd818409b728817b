#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oncegate::gateway {

struct http_response;
class response_deadline;

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
  /// What the server answers if `http.response-timeout` passes first
  /// (null: the request has no deadline, e.g. in unit tests).
  std::shared_ptr<response_deadline> deadline;

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

/// The answer to a request whose handler did not answer within
/// `http.response-timeout`. By default `503 unavailable`, which promises
/// that nothing was executed; so a handler that is about to start
/// something with effects beyond its answer (a forward upstream) first
/// registers the answer that fits once it has begun (`begin_effect`), and
/// does not begin at all if the timeout has already answered. Shared by
/// the session and the handler; thread-safe.
class response_deadline {
public:
  /// The handler is about to begin an effect; `answer` is what the
  /// timeout says from now on. False: the timeout has answered already,
  /// and the effect must not begin.
  bool begin_effect(http_response answer);

  /// The timeout passed: the answer registered by `begin_effect`, or none
  /// (the default answer; no effect begins after this call).
  std::optional<http_response> expire();

private:
  std::mutex mtx_;
  bool expired_ = false;
  std::unique_ptr<http_response> answer_;
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

inline bool response_deadline::begin_effect(http_response answer) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (expired_)
    return false;
  answer_ = std::make_unique<http_response>(std::move(answer));
  return true;
}

inline std::optional<http_response> response_deadline::expire() {
  std::lock_guard<std::mutex> guard{mtx_};
  expired_ = true;
  if (answer_ == nullptr)
    return std::nullopt;
  return std::move(*answer_);
}

} // namespace oncegate::gateway
