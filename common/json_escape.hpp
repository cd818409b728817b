#pragma once

#include <cstddef>
#include <string_view>

namespace oncegate {

/// The one JSON string escaper (HTTP bodies and JSON log lines): hands
/// `in` to `put` (called with `std::string_view` pieces) with `"`, `\` and
/// every control character escaped (the short forms where JSON has one);
/// everything else (valid UTF-8 is assumed) is copied. No quotes are added.
/// Canonical payloads are written with it, so their fingerprints depend on
/// this exact output: never change it for a stored byte.
template <class Put>
void json_escape(std::string_view in, Put&& put) {
  static constexpr char hex[] = "0123456789abcdef";
  std::size_t copied = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    auto c = static_cast<unsigned char>(in[i]);
    if (c >= 0x20 && c != '"' && c != '\\')
      continue; // the common case: copied as it is
    char u[] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    std::string_view esc;
    switch (c) {
      case '"':
        esc = "\\\"";
        break;
      case '\\':
        esc = "\\\\";
        break;
      case '\b':
        esc = "\\b";
        break;
      case '\f':
        esc = "\\f";
        break;
      case '\n':
        esc = "\\n";
        break;
      case '\r':
        esc = "\\r";
        break;
      case '\t':
        esc = "\\t";
        break;
      default: // another control character
        esc = std::string_view{u, sizeof(u)};
    }
    put(in.substr(copied, i - copied));
    put(esc);
    copied = i + 1;
  }
  put(in.substr(copied));
}

} // namespace oncegate
