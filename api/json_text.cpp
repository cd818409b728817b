#include "api/json_text.hpp"
#include "common/json_escape.hpp"

#include <cstdio>
#include <ctime>

namespace oncegate::gateway {

void append_json_string(std::string& out, std::string_view str) {
  out += '"';
  json_escape(str, [&out](std::string_view piece) { out += piece; });
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
