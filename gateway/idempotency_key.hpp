#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/payload.hpp"
#include "gateway/rejection.hpp"

namespace oncegate::gateway {

/// Where a request's idempotency key came from (`key_source` in responses).
enum class key_source { header, webhook_id, body, derived };

/// Returns `header`, `webhook-id`, `body` or `derived`.
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

/// Derives the key `lowercase hex SHA-256("v1|EXCHANGE|SYMBOL|action|ms")`
/// from the top-level fields `exchange`, `symbol`, `action`, `timestamp`:
/// exchange and symbol trimmed and upper-cased (ASCII), action trimmed and
/// lower-cased, timestamp via `parse_timestamp_ms`. A field that is missing,
/// not a string (numbers allowed for timestamp), empty after trimming, or
/// unparseable gives a 422 rejection of type `missing-fields` whose detail
/// names every such field, e.g. `missing or invalid: symbol, timestamp`.
std::variant<std::string, rejection> derive_key(const payload& body);

/// Picks the key by priority: the `Idempotency-Key` header (when `header`
/// is set; a malformed one is a 400, never a fallback), then the sender's
/// signed delivery id (`webhook-id`, `X-GitHub-Delivery`; set by the caller
/// only after the signature verified; same syntax as the header), then the
/// first present string member of `idempotency_key`, `trace_id`, `id`
/// (1-255 bytes, else 400 `invalid-key`), then `derive_key`.
std::variant<idempotency_key, rejection>
select_key(std::optional<std::string_view> header, const payload& body,
           std::optional<std::string_view> delivery_id = std::nullopt);

} // namespace oncegate::gateway
