#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace oncegate::gateway {

/// Appends `str` as a JSON string literal: `"` `\` and control characters
/// escaped, everything else (valid UTF-8 is assumed) copied.
void append_json_string(std::string& out, std::string_view str);

/// Formats wall-clock milliseconds as `2026-11-30T05:39:41.123Z`.
std::string format_timestamp(int64_t epoch_ms);

/// Appends `format_timestamp(epoch_ms)` to `out` (no string of its own:
/// the 24 characters are past the small-string buffer).
void append_timestamp(std::string& out, int64_t epoch_ms);

} // namespace oncegate::gateway
