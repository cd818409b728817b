#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace oncegate::gateway {

/// The position of `c` in `alphabet` (its value as a digit), or -1.
int digit_value(std::string_view alphabet, char c);

/// The value of one hexadecimal digit (either case), or -1.
int hex_value(char c);

/// Decodes `%XX` escapes (and `+` as space when `plus_is_space`); nothing
/// when an escape is malformed.
std::optional<std::string> percent_decode(std::string_view in,
                                          bool plus_is_space = false);

/// `key` as one path segment that no URL normaliser on the way can turn
/// into another path: the key percent-encoded (RFC 3986 unreserved
/// characters stay), or nothing for a key that is not safe in a path
/// whatever its encoding. Those are keys made of dots only (`.` and `..`
/// are dot segments, and `%2E` is normalised to `.` first: RFC 3986
/// 6.2.2.2, WHATWG, nginx), and keys holding `/`, `\`, `%`, `;`, `?` or
/// `#` (a proxy or framework that decodes before routing makes them a
/// separator, a second decoding, a path parameter, a query or a fragment).
/// A changed path answers 404, which a reconcile URL means as "absent".
std::optional<std::string> stable_path_segment(std::string_view key);

/// Returns the decoded value of the first query parameter `name` in
/// `target` (`/path?a=1&name=v`); nothing when absent or malformed.
std::optional<std::string> query_param(std::string_view target,
                                       std::string_view name);

/// The value of 1 to `max_digits` (at most 19) ASCII digits, with no sign
/// or spaces (a node id in a path, a CIDR prefix length); nothing else.
std::optional<uint64_t> parse_digits(std::string_view text,
                                     std::size_t max_digits);

} // namespace oncegate::gateway
