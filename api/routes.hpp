#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/settings.hpp>

#include "api/auth.hpp"
#include "api/delivery_policy.hpp"
#include "api/guardrails.hpp"
#include "http/upstream_client.hpp"

namespace oncegate::gateway {

/// How a route reads its bodies (`body = "json"` or `"text"`).
enum class body_format {
  /// One JSON object, canonicalised: its members may name the key and the
  /// token, and equal JSON in another spelling is the same signal.
  json,
  /// Any bytes (TradingView's plain-text alert messages): the key is the
  /// `Idempotency-Key` header or the hex SHA-256 of the body, the
  /// fingerprint is the body itself, forwarded byte for byte.
  text,
};

/// What a duplicate of a completed request gets.
enum class duplicate_policy {
  /// 409 problem with `first_seen` and `original_status`.
  conflict,
  /// The stored status and body, byte for byte.
  replay,
};

/// One webhook route: its own key namespace, auth, TTL, duplicate policy.
struct route_config {
  /// `default` is served at `/v1/webhook`, others at `/v1/webhook/NAME`.
  std::string name;
  std::string path;
  auth_mode auth = auth_mode::none;
  /// Tokens (token), HMAC secrets (github) or raw keys decoded from
  /// `whsec_` secrets (standard-webhooks); several allow rotation.
  std::vector<std::string> secrets;
  int64_t ttl_ms = 24LL * 3600 * 1000;
  duplicate_policy on_duplicate = duplicate_policy::conflict;
  body_format body = body_format::json;
  std::size_t body_limit = 64 * 1024;
  /// Allowed source networks; empty: any source.
  std::vector<cidr> allow;
  /// Accepted clock difference of signed timestamps (standard-webhooks).
  int64_t tolerance_s = 300;
  /// Where the first request of a key is forwarded; none: record the
  /// signal and answer 200 accepted. An https upstream carries its TLS
  /// context, made when the table is built.
  std::optional<upstream_target> upstream;
  /// Answer 202 in_progress when the upstream has not answered by then
  /// (TradingView gives up after about 3 s); 0: wait for the upstream.
  std::chrono::milliseconds respond_after{0};
  /// Once or durably (`delivery*` options; durable with `respond-after`).
  delivery_policy delivery;
  /// Settling in-doubt records by asking the upstream (`reconcile*`).
  reconcile_policy reconcile;
  /// Stale signals and the cap of new ones (`max-age`, `max-new-per-minute`
  /// and their options).
  guardrails guards;
};

/// Defaults that routes inherit from the node's options.
struct route_defaults {
  int64_t ttl_ms = 24LL * 3600 * 1000;
  std::size_t body_limit = 64 * 1024;
  /// The default route's upstream (`--upstream=URL`), empty for none.
  std::string default_upstream;
};

/// The node's routes. Index 0 is always the default route.
class route_table {
public:
  std::vector<route_config> routes;

  /// The route served at `path` (no query), if any.
  const route_config* by_path(std::string_view path) const;

  /// The route named `name`, if any.
  const route_config* by_name(std::string_view name) const;

  /// Position of `r` in `routes` (for per-route metrics).
  std::size_t index_of(const route_config& r) const {
    return static_cast<std::size_t>(&r - routes.data());
  }
};

/// Reads environment variables; tests inject their own.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;

/// Returns `getenv(name)`.
std::optional<std::string> process_env(const std::string& name);

/// Builds the route table from the `route` section of the config (`[route.NAME]`
/// in the INI file; may be null). Per route: `auth`, `secret` / `secret-env`
/// / `secret-file` (a string or a list each), `ttl`, `on-duplicate`
/// (`conflict` | `replay`), `body-limit` (at most the node's
/// `http.body-limit`), `allow` (list of CIDRs), `tolerance`, `upstream`
/// (`http://` or `https://`) and its `upstream-*` options, the guardrails
/// (`max-age`, `max-ahead`, `signal-time`, `max-new-per-minute`, `cap-by`),
/// the delivery and reconcile options, and among the upstream's the
/// TLS files of an https upstream (`upstream-ca-file`, and
/// `upstream-client-cert` with `upstream-client-key`): their contexts are
/// loaded here, one per distinct set of files (an https `--upstream` gets
/// the system CA store).
/// On a bad entry returns nothing and sets `error` to a message naming the
/// key, e.g. `route.tv.auth: unknown mode "tokn"` or
/// `route.orders.upstream-ca-file: cannot read /etc/ca.pem: No such file or
/// directory`.
std::optional<route_table> make_routes(const caf::settings* section,
                                       const route_defaults& defaults,
                                       const env_lookup& env,
                                       std::string& error);

} // namespace oncegate::gateway
