#pragma once

// A webhook body: one pass over the JSON that validates it, builds its
// canonical text and fingerprint, and lists its top-level scalar members.
// Must not live here: number canonicalisation (`api/canonical_number.hpp`),
// the wording of parse errors (`api/json_rejection.hpp`), key selection.

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include "api/canonical_number.hpp"
#include "api/rejection.hpp"

namespace oncegate::gateway {

/// A top-level scalar member of the body.
struct field {
  enum class kind { string, number, boolean, null };
  kind type = kind::null;
  /// Strings: the decoded value (escapes resolved, UTF-8). Numbers: the
  /// literal as it appeared in the body (e.g. `1700000000.5`).
  std::string text;
};

/// A parsed and canonicalised webhook body.
struct payload {
  /// Canonical JSON: object members sorted by key (bytewise on the UTF-8
  /// key), no insignificant whitespace, strings with escapes decoded and
  /// re-escaped minimally, numbers as `canonical_number`, and the top-level
  /// auth members `passphrase`, `secret` and `token` removed.
  std::string canonical;
  /// Raw SHA-256 (32 bytes) of `canonical`.
  std::string fingerprint;
  /// Top-level scalar members, by name (auth members included, so that the
  /// gateway can check a `passphrase`). Nested values are not listed.
  std::map<std::string, field, std::less<>> fields;
};

/// A `text` route's body (`body_format::text`): `canonical` is the body
/// itself, byte for byte, `fingerprint` its SHA-256, no members.
payload text_payload(std::string_view body);

/// Limits of the parser.
struct payload_limits {
  /// Deepest nesting of objects and arrays accepted.
  std::size_t max_depth = 32;
};

/// Parses `body` as one JSON object and canonicalises it in a single pass.
/// Returns a 400 rejection with one of these types:
/// - `malformed-json`: not JSON (syntax error, trailing data, empty body);
/// - `invalid-utf8`: invalid UTF-8, or an escape that encodes a lone
///   surrogate;
/// - `duplicate-member`: an object holds the same member name twice (after
///   decoding escapes: `{"a":1,"\u0061":2}` is a duplicate);
/// - `not-an-object`: valid JSON whose top level is not an object;
/// - `too-deep`: nesting beyond `limits.max_depth`.
std::variant<payload, rejection> parse_payload(std::string_view body,
                                               const payload_limits& limits
                                               = {});

} // namespace oncegate::gateway
