#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "api/auth.hpp"
#include "api/payload.hpp"
#include "api/rejection.hpp"

namespace oncegate::gateway {

/// Where a request's idempotency key came from (`key_source` in responses).
enum class key_source {
  /// The `Idempotency-Key` header (routes without a signature).
  header,
  /// The signed `webhook-id` of a `standard-webhooks` route.
  webhook_id,
  /// A body member `idempotency_key`, `trace_id` or `id`.
  body,
  /// `derive_key` of the trading-signal members.
  derived,
  /// The hex SHA-256 of the signed body of a `github` route.
  github_body,
  /// The hex SHA-256 of the body of a `text` route without the header.
  text_body,
};

/// Returns `header`, `webhook-id`, `body`, `derived`, `github-body` or
/// `text-body`.
const char* to_string(key_source x);

struct idempotency_key {
  std::string value;
  key_source source = key_source::header;
};

/// Parses an `Idempotency-Key` header value: a Structured-Field string
/// (`"abc"`, with `\"` and `\\` escapes) or a bare token (`abc`), surrounding
/// spaces ignored. The key must be 1-255 printable ASCII characters
/// (0x20-0x7E). Failure: 400 rejection of type `invalid-key`.
std::variant<std::string, rejection>
parse_key_header(std::string_view raw);

/// Converts a timestamp field to UTC epoch milliseconds. Accepts numbers or
/// numeric strings holding epoch seconds (values below 1e11, fractions
/// allowed) or epoch milliseconds (values from 1e11), and ISO-8601 strings
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM|+HHMM|-HHMM)` (a space
/// instead of `T` is accepted; an offset is required). Returns nothing when
/// unparseable or out of range.
std::optional<int64_t> parse_timestamp_ms(const field& f);

/// Top-level member `name` of `body` when it is a string, trimmed of ASCII
/// whitespace; nothing when it is missing, not a string, or empty.
std::optional<std::string_view> trimmed_string(const payload& body,
                                               std::string_view name);

/// Derives the key `lowercase hex SHA-256(preimage)` from the top-level
/// fields `exchange`, `symbol`, `action`, `timestamp`: exchange and symbol
/// trimmed and upper-cased (ASCII), action trimmed and lower-cased,
/// timestamp via `parse_timestamp_ms` as decimal epoch milliseconds. The
/// preimage is `v1|EXCHANGE|SYMBOL|action|ms` when no field holds a `|`
/// (so such fields keep the key they always had), else
/// `v2|<len>:EXCHANGE|<len>:SYMBOL|<len>:action|<len>:ms` with each length
/// in bytes, decimal. A field that is missing, not a string (numbers
/// allowed for timestamp), empty after trimming, or unparseable gives a 422
/// rejection of type `missing-fields` whose detail names every such field,
/// e.g. `missing or invalid: symbol, timestamp`.
std::variant<std::string, rejection> derive_key(const payload& body);

/// What a request offers for its key.
struct key_inputs {
  /// The route's authentication: it decides which inputs may name the key.
  auth_mode auth = auth_mode::none;
  /// The `Idempotency-Key` header (repeated lines combined), if any.
  std::optional<std::string_view> header;
  /// The sender's delivery id, set only after the signature verified:
  /// `webhook-id` on `standard-webhooks` routes. Ignored on other routes
  /// (`X-GitHub-Delivery` is not covered by GitHub's signature).
  std::optional<std::string_view> delivery_id;
  /// The request body as received (and, on signed routes, as verified).
  std::string_view raw_body;
  /// A `text` route: the body has no members to name the key.
  bool text = false;
};

/// Picks the key from what the route's authentication vouches for:
/// - `standard-webhooks`: `delivery_id` (the signed `webhook-id`) and
///   nothing else; the header and body members are not signed, so they are
///   ignored. Same syntax as the header; absent or malformed: 400
///   `invalid-key`.
/// - `github`: the lowercase hex SHA-256 of `raw_body` (`github-body`):
///   the body is all GitHub's HMAC covers, and a redelivery resends it byte
///   for byte. The header, `X-GitHub-Delivery` and body members are ignored.
/// - `none`, `token`: by priority, the `Idempotency-Key` header (when
///   `header` is set; a malformed one is a 400, never a fallback), then the
///   first present string member of `idempotency_key`, `trace_id`, `id`
///   (1-255 bytes, else 400 `invalid-key`), then `derive_key`; on a `text`
///   route the header, then the lowercase hex SHA-256 of `raw_body`
///   (`text-body`).
std::variant<idempotency_key, rejection>
select_key(const key_inputs& in, const payload& body);

/// The `Idempotency-Key` value sent upstream for `key`: `key` itself when
/// it is 1-255 printable ASCII characters (0x20-0x7E) with no space at
/// either end and does not start with `sha256:` (in any letter case);
/// otherwise `sha256:` followed by the lowercase hex SHA-256 of `key`.
///
/// Injective (up to SHA-256 collisions): outputs of the first kind are the
/// key itself, so two of them are equal only for equal keys; outputs of the
/// second kind all start with `sha256:`, which no output of the first kind
/// does, so the two kinds never meet; and two of the second kind are equal
/// only when the keys' SHA-256 are, i.e. (barring a collision) for equal
/// keys. So keys that are distinct here (`k1`, `" k1 "`, `"k1 "`, a
/// non-ASCII body key, a header spelling out that key's hash) reach an
/// upstream as distinct keys. Every output is a valid header value of at
/// most 255 characters: printable ASCII without surrounding spaces.
std::string forwarded_key(std::string_view key);

} // namespace oncegate::gateway
