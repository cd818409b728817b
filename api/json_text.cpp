#include "api/json_text.hpp"

#include <cstdio>
#include <ctime>

namespace oncegate::gateway {

void append_json_string(std::string& out, std::string_view str) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (char ch : str) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0x0F];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string format_timestamp(int64_t epoch_ms) {
  auto secs = static_cast<std::time_t>(epoch_ms / 1000);
  auto ms = static_cast<int>(epoch_ms % 1000);
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, ms);
  return buf;
}

} // namespace oncegate::gateway
