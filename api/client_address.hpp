#pragma once

// Who sent a request: its direct peer, or, when that peer is a trusted
// reverse proxy (`http.trusted-proxies`), the client the proxy names in its
// forwarding header (RFC 7239 `Forwarded: for=`, or `X-Forwarded-For`).
// Only the parsing and the choice live here; the networks are `cidr`s of
// `api/auth.hpp`, the one place for address matching. What the address is
// used for (route allowlists, logs) is decided elsewhere; the admin
// endpoints' loopback exceptions never use it (`api/admin_auth.hpp`).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/auth.hpp"
#include "http/http_types.hpp"

namespace oncegate::gateway {

/// A header in which a reverse proxy names the client.
enum class forwarded_header {
  /// RFC 7239 `Forwarded`, its elements' `for=` parameters.
  forwarded,
  /// `X-Forwarded-For`: a comma-separated list of addresses.
  x_forwarded_for,
};

/// The header's name in lower case (`forwarded`, `x-forwarded-for`), as
/// `http.forwarded-headers` lists it.
const char* to_string(forwarded_header x);

/// Parses a name `to_string` returns.
std::optional<forwarded_header> parse_forwarded_header(std::string_view name);

/// Which peers are reverse proxies, and what is read from them.
struct proxy_options {
  /// Direct peers whose forwarding header is believed; empty: none (every
  /// forwarding header is ignored).
  std::vector<cidr> trusted;
  /// The headers a trusted peer's client is read from; the first one
  /// present is used, the others ignored. Only X-Forwarded-For by default:
  /// nginx and Caddy append to it, but pass a client's `Forwarded` header
  /// on untouched.
  std::vector<forwarded_header> headers{forwarded_header::x_forwarded_for};
  /// Bytes of that header examined at most, from its right end (all its
  /// lines together); when the answer lies further left the peer is used.
  std::size_t max_bytes = 2048;
};

/// The names of `xs` (`to_string`), in order.
std::vector<std::string> to_strings(const std::vector<forwarded_header>& xs);

/// The client named by the forwarding header `value` (all its lines,
/// joined by ", ") of kind `kind`: the right-most hop whose address is not
/// in `opts.trusted` (the left-most hop when all are), without port or
/// brackets. `unknown` when that hop is `unknown` or an obfuscated
/// identifier (RFC 7239 6.3), which no allowlist admits. Nothing when the
/// header is empty, malformed where it is read (a hop that is no strict
/// IPv4/IPv6 address, broken quoting, an element without `for=`), or the
/// answer lies beyond `opts.max_bytes`.
std::optional<std::string> client_from_header(std::string_view value,
                                              forwarded_header kind,
                                              const proxy_options& opts);

/// The address route allowlists and logs go by: `req.remote`, or, when
/// that peer is in `opts.trusted`, the client of the first header of
/// `opts.headers` present (`client_from_header`; the peer when it names
/// none). Forwarding headers from any other peer are ignored.
std::string resolve_client(const proxy_options& opts, const http_request& req);

/// Whether `req` was relayed by a proxy: its peer is in `opts.trusted`, or
/// it carries `Forwarded`, `X-Forwarded-For` or `X-Real-IP` (a proxy on
/// this host that is not listed says so too). A relayed request is never
/// local, whatever the addresses.
bool relayed(const proxy_options& opts, const http_request& req);

} // namespace oncegate::gateway
