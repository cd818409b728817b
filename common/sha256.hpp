#pragma once

#include <string>
#include <string_view>

namespace oncegate {

/// Returns the raw 32-byte SHA-256 digest of `data` (OpenSSL).
std::string sha256(std::string_view data);

/// Returns `data` as lowercase hexadecimal.
std::string to_hex(std::string_view data);

} // namespace oncegate
