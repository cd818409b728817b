#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api/rejection.hpp"

namespace oncegate::gateway {

/// How a route authenticates its senders.
enum class auth_mode {
  /// No authentication.
  none,
  /// A shared secret as `?token=` query parameter or `passphrase` body
  /// member (TradingView cannot send custom headers).
  token,
  /// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`.
  github,
  /// Standard Webhooks: `webhook-id`, `webhook-timestamp`,
  /// `webhook-signature` (`v1,<base64 HMAC-SHA256(key, id.ts.body)>`
  /// entries separated by spaces); secrets `whsec_<base64 key>`.
  standard_webhooks,
};

/// Parses `none`, `token`, `github`, `standard-webhooks`.
std::optional<auth_mode> parse_auth_mode(std::string_view name);

/// Returns the name `parse_auth_mode` accepts.
const char* to_string(auth_mode x);

/// Compares in time independent of where the inputs differ (CRYPTO_memcmp);
/// different lengths compare unequal.
bool constant_time_equal(std::string_view a, std::string_view b);

/// Raw HMAC-SHA256 of `data` under `key` (32 bytes).
std::string hmac_sha256(std::string_view key, std::string_view data);

/// Standard base64 (with padding) decoding; nothing on invalid input.
std::optional<std::string> base64_decode(std::string_view in);

/// Standard base64 encoding with padding.
std::string base64_encode(std::string_view in);

/// Decodes a Standard Webhooks secret: `whsec_<base64>` (the prefix is
/// optional) into the raw HMAC key. Nothing when the base64 is invalid or
/// the key is empty.
std::optional<std::string> decode_whsec(std::string_view secret);

/// Parses a `webhook-signature` header: space-separated `version,base64`
/// entries. Returns the decoded raw signatures of the `v1` entries (other
/// versions are skipped); entries that are malformed are skipped too. At
/// most 32 entries are examined.
std::vector<std::string> parse_signature_header(std::string_view value);

/// Checks a GitHub signature header value (`sha256=<64 hex>`, hex case
/// insensitive) against `body` for any of `secrets`.
bool verify_github(std::string_view header, std::string_view body,
                   const std::vector<std::string>& secrets);

/// The inputs of a Standard Webhooks verification.
struct standard_webhook_headers {
  std::optional<std::string_view> id;
  std::optional<std::string_view> timestamp;
  std::optional<std::string_view> signature;
};

/// The detail of the rejection `verify_standard_webhook` gives when
/// everything but the timestamp's age may be right.
inline constexpr std::string_view stale_timestamp_detail = "stale timestamp";

/// Verifies a Standard Webhooks request: all three headers present,
/// `timestamp` decimal epoch seconds within `tolerance_s` of `now_s` (either
/// direction), and at least one `v1` signature equal to
/// HMAC-SHA256(key, id + "." + timestamp + "." + body) for any of the
/// `keys` (raw keys, as from `decode_whsec`). Returns nothing on success,
/// else a 401 rejection of type `unauthorized` whose detail says which part
/// failed (`missing webhook-id`, `stale timestamp`, `no valid signature`).
std::optional<rejection>
verify_standard_webhook(const standard_webhook_headers& hdrs,
                        std::string_view body,
                        const std::vector<std::string>& keys, int64_t now_s,
                        int64_t tolerance_s = 300);

/// Whether a Standard Webhooks request is signed by any of `keys`, its
/// timestamp's age aside (the timestamp must still be well-formed decimal
/// epoch seconds): what a request `verify_standard_webhook` refused as
/// stale is checked with, when this node's own clock may be what is wrong.
bool standard_webhook_signed(const standard_webhook_headers& hdrs,
                             std::string_view body,
                             const std::vector<std::string>& keys);

/// An IPv4 or IPv6 network, e.g. `10.0.0.0/8`, `::1/128`, or a single
/// address (full-length prefix).
struct cidr {
  /// 4 or 16 bytes, network order, host bits cleared.
  std::string network;
  int prefix = 0;
};

/// Parses a network; nothing when malformed (bad address, prefix out of
/// range).
std::optional<cidr> parse_cidr(std::string_view text);

/// Returns whether `address` (textual IPv4/IPv6, IPv4-mapped IPv6 counts as
/// IPv4) lies in any of `nets`. An unparseable address is never allowed.
bool address_allowed(std::string_view address, const std::vector<cidr>& nets);

/// Returns whether `text` is one textual IPv4 or IPv6 address, strictly
/// (inet_pton: dotted quad without leading zeros, no zone, no port, no
/// brackets, at most 45 characters).
bool is_address(std::string_view text);

/// Returns whether `address` is a loopback address: `127.0.0.0/8` or
/// `::1` (`::ffff:127.0.0.1` counts as IPv4). An unparseable address (a
/// host name such as `localhost` included) is not.
bool is_loopback_address(std::string_view address);

} // namespace oncegate::gateway
