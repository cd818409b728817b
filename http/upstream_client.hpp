#pragma once

// The client oncegate forwards first requests with: where an upstream is
// (its URL, timeouts, limits, TLS context), what a forward is and what
// became of it, and the asynchronous client with its keep-alive pools.
// The TLS contexts are `http/upstream_tls.*`, the pooled connections
// `http/upstream_conn.*`.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/upstream_tls.hpp"

namespace oncegate::gateway {

/// Where and how a route forwards its first requests.
struct upstream_target {
  std::string host;
  uint16_t port = 80;
  /// `https://`: TLS with the certificate verified against `tls`'s CAs and
  /// this `host` (a name, or an address the certificate must carry).
  bool https = false;
  /// The TLS context of an https upstream (set when the routes are loaded,
  /// shared by routes with the same files); an https target without one is
  /// never sent.
  std::shared_ptr<const upstream_tls> tls;
  /// Origin-form target, e.g. `/orders?x=1`.
  std::string path = "/";
  /// Failing to connect within this is "not sent": the key is released.
  /// For https it bounds the TLS handshake too (one deadline for both).
  std::chrono::milliseconds connect_timeout{2000};
  /// No complete response within this after sending is "maybe sent": the
  /// key is in doubt.
  /// Keep below `http.response-timeout` (10 s) so the sender hears the
  /// upstream outcome rather than a generic timeout.
  std::chrono::milliseconds response_timeout{8000};
  /// Connections to this upstream at most (busy + idle); a request beyond
  /// is "not sent" (pool exhausted).
  std::size_t max_connections = 64;
  /// Largest upstream response body stored and relayed (route option
  /// `upstream-max-response`). A larger answer is an upstream error after
  /// sending: the key is in doubt. It is kept in the record, in the live key
  /// actor (up to `keys.actor-cache-bytes`) and in the decision cache
  /// (within `keys.decision-cache-bytes`), so it bounds memory per key.
  std::size_t max_response = 64 * 1024;
};

/// Parses `http://host[:port][/path]` (port 80) and
/// `https://host[:port][/path]` (port 443, `https` set, no `tls` yet);
/// nothing for anything else.
std::optional<upstream_target> parse_upstream_url(std::string_view url);

/// One forwarded request.
struct upstream_request {
  std::string body;
  std::string content_type;
  /// Sent as `Idempotency-Key` so an upstream that dedups by key is
  /// protected too.
  std::string idempotency_key;
  /// A `GET` of `path` (a reconciliation: does the upstream have the
  /// order?) instead of a `POST` of the body to the target's path.
  bool get = false;
  std::string path;
  /// Sent as `Oncegate-Attempt` when not empty: the attempt's fence
  /// (`<term>.<n>`), so that an upstream can refuse an attempt older than
  /// one it has seen.
  std::string attempt;
};

/// What became of a forwarded request.
struct upstream_result {
  enum class kind {
    /// The upstream gave a final answer, status 200-599 (5xx included).
    /// Interim 1xx answers are skipped; `101`, more than 8 interim
    /// answers or a status outside 100-599 are `maybe_sent`.
    response,
    /// Nothing reached the upstream (refused, unresolvable, pool exhausted,
    /// connect timeout, a TLS handshake that failed or timed out: no byte
    /// of the request was handed to the socket): safe to execute again.
    not_sent,
    /// The request may have reached the upstream, but no usable answer
    /// came (timeout, connection lost after sending, or an answer that is
    /// not HTTP: a bogus status, an unasked protocol switch). Over TLS,
    /// any failure once the request's first record was handed over, also
    /// one the upstream reports as a TLS alert (TLS 1.3 refuses a client
    /// certificate only after the client's handshake is done).
    maybe_sent,
  };
  kind outcome = kind::not_sent;
  int status = 0;
  std::string content_type;
  std::string body;
  /// Why, for logs and problem details.
  std::string error;
  /// maybe_sent: whether it was the response timeout.
  bool timed_out = false;
};

/// An asynchronous HTTP/1.1 client (Boost.Beast, OpenSSL for https) with a
/// keep-alive pool per upstream (and TLS context), on its own I/O thread.
/// It never blocks the caller. A connection returns to the pool only after
/// a complete keep-alive final answer with no byte after it, and is checked
/// quiet again right before reuse; a pooled TLS connection carries the next
/// request without a new handshake.
class upstream_client {
public:
  upstream_client();
  ~upstream_client();

  upstream_client(const upstream_client&) = delete;
  upstream_client& operator=(const upstream_client&) = delete;

  /// Forwards `req`; `done` runs once on the client's thread. Thread-safe.
  void send(const upstream_target& target, upstream_request req,
            std::function<void(upstream_result)> done);

  /// Runs `fn` on the client's thread after `delay`. Thread-safe.
  void after(std::chrono::milliseconds delay, std::function<void()> fn);

  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

} // namespace oncegate::gateway
