#pragma once

// The admin CLI's HTTP/1.1 client: where the node is, one request on a new
// connection with bounded time and a bounded answer, over TLS for an
// `https://` node. The node is outside input here: nothing it sends is
// trusted to be small, fast or well formed, and over TLS nothing is sent
// before its certificate was verified.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

// The TLS client context is the upstream client's (`http/upstream_tls.hpp`):
// one TLS client policy for the node and its CLI.
namespace oncegate::gateway {
class upstream_tls;
} // namespace oncegate::gateway

namespace oncegate::cli {

/// A node's HTTP listener.
struct node_address {
  /// A name or an address, IPv6 without brackets.
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  /// `https://`: TLS, the certificate verified for `host`.
  bool tls = false;

  /// `HOST:PORT` as the `Host` header names it (`[::1]:8080`): the node
  /// judges "local" by it too (docs/http-api.md, "Access").
  std::string authority() const;

  /// `http://HOST:PORT` or `https://HOST:PORT`, for messages.
  std::string url() const;
};

/// Parses `http://HOST[:PORT][/]`, `https://HOST[:PORT][/]` or
/// `HOST[:PORT]` (plain HTTP; `[V6]` for an IPv6 address). The port is 8080
/// when absent, for `https://` too: the node's default, where its TLS
/// listener serves as well. Returns the reason for anything else.
std::variant<node_address, std::string> parse_node_address(std::string_view text);

/// A client TLS context for `https://` nodes: TLS 1.2 at least, the node's
/// certificate verified against the CA certificates in `ca_file` (PEM), or
/// the system store when it is empty. Returns why it cannot be made (the
/// file does not load) otherwise.
std::variant<std::shared_ptr<const gateway::upstream_tls>, std::string>
make_client_tls(const std::string& ca_file);

/// Bounds of one request.
struct transport_limits {
  /// Name resolution and the TCP connect, at most (within `request`).
  std::chrono::milliseconds connect{5000};
  /// The whole request: resolve, connect, send, the complete answer.
  std::chrono::milliseconds request{30000};
  /// The answer's body at most; a larger one is refused unread.
  std::size_t max_body = 16 * 1024 * 1024;
  /// The answer's header block at most.
  std::size_t max_header = 64 * 1024;
};

/// One request to the node.
struct node_request {
  std::string method = "GET";
  /// Origin-form target, already escaped (`cli/admin_paths.hpp`).
  std::string target;
  /// Sent as `application/json` when not empty.
  std::string json_body;
};

/// The node's answer.
struct node_answer {
  int status = 0;
  std::string content_type;
  /// `Retry-After`, when given.
  std::string retry_after;
  std::string body;
};

/// What went wrong before a complete answer arrived, for a message.
struct transport_failure {
  std::string what;
};

/// Sends admin requests to one node, each on a connection of its own
/// (`Connection: close`), with the bearer token when there is one. Over
/// TLS the request (and so the token) is written only after the handshake
/// verified the node's certificate for its host name or address.
class node_client {
public:
  /// `tls` is the context for an `https://` node (`make_client_tls`), null
  /// for plain HTTP.
  node_client(node_address where, std::string token, transport_limits limits,
              std::string user_agent,
              std::shared_ptr<const gateway::upstream_tls> tls = nullptr);

  /// Sends `req` and waits for the answer, within `limits().request`.
  std::variant<node_answer, transport_failure>
  send(const node_request& req) const;

  const node_address& address() const {
    return where_;
  }

  const transport_limits& limits() const {
    return limits_;
  }

  /// Whether requests carry a token (never the token itself).
  bool has_token() const {
    return !token_.empty();
  }

private:
  node_address where_;
  std::string token_;
  transport_limits limits_;
  std::string user_agent_;
  std::shared_ptr<const gateway::upstream_tls> tls_;
};

} // namespace oncegate::cli
