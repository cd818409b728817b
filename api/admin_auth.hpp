#pragma once

// Who may use the admin endpoints (`/v1/keys...`, `/v1/cluster...`): the
// bearer token, or without one a loopback listener. Only the check lives
// here, never what an admin endpoint does.

#include <optional>
#include <string>

#include "http/http_types.hpp"

namespace oncegate::gateway {

/// Who may use the admin endpoints (`/v1/keys/...`).
struct admin_options {
  /// Bearer token; empty: none configured.
  std::string token;
  /// Whether the listener is bound to a loopback address. Without a token,
  /// admin endpoints answer only there.
  bool loopback_listener = true;
};

/// The refusal of an admin request: 401 without a valid
/// `Authorization: Bearer <token>` when a token is configured, 403 on a
/// non-loopback listener when none is; nothing when `req` may proceed.
std::optional<http_response> refuse_admin(const admin_options& admin,
                                          const http_request& req);

} // namespace oncegate::gateway
