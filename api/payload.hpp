#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <variant>

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

/// Renders a number literal in canonical form, a function of its exact
/// decimal value (`1.0`, `1e0`, `10e-1` and `1` are one text; `0.1` and
/// `0.10000000000000001` are two):
/// - zero: `0`;
/// - integers in [-2^63, 2^64) (also written `1e2`, `100.0`): plain decimal;
/// - other values whose shortest round-trip double form (`std::to_chars`,
///   e.g. `0.1`, `1e+300`, `1.5e-07`) has exactly the literal's value: that
///   form (what every number got before exact comparison, so fingerprints
///   of such payloads are unchanged);
/// - all others: `[-]d[.ddd]E<exponent>`, e.g. `1.8446744073709551617E19`,
///   `1E-400`, `1E400` (the only form with an upper-case `E`).
/// Literals that are not JSON numbers, or whose decimal exponent in
/// scientific notation exceeds 10^9 in magnitude (`parse_payload`: 400
/// `malformed-json`, "number out of range"), come back unchanged. Linear in
/// the literal's length. Exposed for tests.
std::string canonical_number(std::string_view literal);

} // namespace oncegate::gateway
