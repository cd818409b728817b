#pragma once

// Who may use the admin endpoints (`/v1/keys...`, `/v1/cluster...`): the
// bearer token, or without one a direct request on loopback (reads; changes
// only with an explicit opt-out); never what a browser sends cross-site.
// Only the check lives here, never what an admin endpoint does.

#include <optional>
#include <string>

#include "api/client_address.hpp"
#include "http/http_types.hpp"

namespace oncegate::gateway {

/// Who may use the admin endpoints (`/v1/keys...`, `/v1/cluster...`).
struct admin_options {
  /// Bearer token; empty: none configured. When set, every admin request
  /// needs it, on every listener.
  std::string token;
  /// Whether the listener is bound to a loopback address
  /// (`is_loopback_address`). Without a token, reads answer only there.
  bool loopback_listener = true;
  /// Without a token, also let changes through on a loopback listener from
  /// a loopback peer (`admin.allow-unauthenticated-loopback`, for a
  /// loopback-only setup; warned about at start). Off: changes need the
  /// token everywhere.
  bool allow_unauthenticated_loopback = false;
};

/// Whether `req` only reads (GET, HEAD). Every other method (OPTIONS and
/// unknown ones included) counts as a change.
bool admin_read(const http_request& req);

/// Whether `req` is what a browser sends from another site: an `Origin`
/// that is `null`, malformed or not the request's `Host` (same host and
/// port; the scheme's default port may be left out), or a
/// `Sec-Fetch-Site` other than `same-origin` or `none`. Requests without
/// either header (curl, scripts) are not.
bool cross_site(const http_request& req);

/// Whether `req` names a loopback host in its one `Host` field:
/// `localhost`, a loopback IPv4 address or a bracketed loopback IPv6
/// address, with or without a port (0..65535). No `Host`, an empty one or
/// two of them: no. A page whose own name was rebound to 127.0.0.1 (DNS
/// rebinding) sends its own name, which is same-origin but not this.
bool loopback_host(const http_request& req);

/// Whether `req` comes straight from this host: the listener is loopback,
/// the direct peer (`req.remote`, never a forwarded address) is loopback,
/// it was not relayed (`relayed`: no trusted proxy, no forwarding header)
/// and it names a loopback host (`loopback_host`).
bool local_admin_request(const admin_options& admin,
                         const proxy_options& proxies,
                         const http_request& req);

/// The refusal of an admin request, nothing when `req` may proceed. In
/// this order:
/// - `cross_site`: 403 `cross-site`, token or not;
/// - a change with a body whose Content-Type is not `application/json`:
///   415 `unsupported-media-type` (a change without a body needs none);
/// - a token is configured and `Authorization: Bearer <token>` is missing
///   or wrong: 401 `unauthorized` with `WWW-Authenticate: Bearer`;
/// - no token: a read that is not `local_admin_request`: 403 `forbidden`;
///   a change: 403 `admin-token-required`, unless the opt-out is set and
///   it is local.
std::optional<http_response> refuse_admin(const admin_options& admin,
                                          const proxy_options& proxies,
                                          const http_request& req);

} // namespace oncegate::gateway
