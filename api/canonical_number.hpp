#pragma once

// The canonical text of a JSON number, a function of its exact decimal
// value (the fingerprint's number rule). Must not live here: documents,
// strings, or anything of the parser (`api/payload.*`).

#include <optional>
#include <string>
#include <string_view>

namespace oncegate::gateway {

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

/// `canonical_number`, or nothing for a literal that is not a JSON number
/// or whose exponent is out of range (which `parse_payload` refuses).
std::optional<std::string> try_canonical_number(std::string_view literal);

} // namespace oncegate::gateway
