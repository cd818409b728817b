#include "api/json_text.hpp"
#include "common/json_escape.hpp"

#include <cstdio>

namespace oncegate::gateway {

void append_json_string(std::string& out, std::string_view str) {
  out += '"';
  json_escape(str, [&out](std::string_view piece) { out += piece; });
  out += '"';
}

namespace {

// Days since 1970-01-01 to a proleptic Gregorian date (the inverse of the
// usual days-from-civil computation, in 400-year eras of 146 097 days).
// `gmtime_r` and `snprintf` did this per duplicate answer before: glibc's
// gmtime takes the time zone lock, and the pair cost 2.8 % of a duplicate.
void civil_from_days(int64_t days, int64_t& year, unsigned& month,
                     unsigned& day) {
  days += 719468; // 0000-03-01 to 1970-01-01
  int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  auto doe = static_cast<unsigned>(days - era * 146097);
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  unsigned mp = (5 * doy + 2) / 153;
  day = doy - (153 * mp + 2) / 5 + 1;
  month = mp < 10 ? mp + 3 : mp - 9;
  year = static_cast<int64_t>(yoe) + era * 400 + (month <= 2 ? 1 : 0);
}

char* put_digits(char* out, unsigned value, int width) {
  for (int i = width - 1; i >= 0; --i) {
    out[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  return out + width;
}

} // namespace

std::string format_timestamp(int64_t epoch_ms) {
  std::string out;
  append_timestamp(out, epoch_ms);
  return out;
}

void append_timestamp(std::string& out, int64_t epoch_ms) {
  auto ms = epoch_ms % 1000;
  auto secs = epoch_ms / 1000;
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  auto days = secs / 86400;
  auto sod = secs % 86400;
  if (sod < 0) {
    sod += 86400;
    --days;
  }
  int64_t year = 0;
  unsigned month = 0;
  unsigned day = 0;
  civil_from_days(days, year, month, day);
  if (year < 0 || year > 9999) {
    // Outside what four digits hold: the slow, general way.
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%04lld-%02u-%02uT%02u:%02u:%02u.%03uZ",
                  static_cast<long long>(year), month, day,
                  static_cast<unsigned>(sod / 3600),
                  static_cast<unsigned>(sod / 60 % 60),
                  static_cast<unsigned>(sod % 60), static_cast<unsigned>(ms));
    out += buf;
    return;
  }
  char buf[24];
  char* p = put_digits(buf, static_cast<unsigned>(year), 4);
  *p++ = '-';
  p = put_digits(p, month, 2);
  *p++ = '-';
  p = put_digits(p, day, 2);
  *p++ = 'T';
  p = put_digits(p, static_cast<unsigned>(sod / 3600), 2);
  *p++ = ':';
  p = put_digits(p, static_cast<unsigned>(sod / 60 % 60), 2);
  *p++ = ':';
  p = put_digits(p, static_cast<unsigned>(sod % 60), 2);
  *p++ = '.';
  p = put_digits(p, static_cast<unsigned>(ms), 3);
  *p++ = 'Z';
  out.append(buf, static_cast<std::size_t>(p - buf));
}

} // namespace oncegate::gateway
