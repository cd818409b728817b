#include "api/idempotency_key.hpp"
#include "common/enum_text.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/sha256.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::size_t max_key_length = 255;

// Forwarded keys of this prefix (any letter case) are always hashes.
constexpr std::string_view hashed_key_prefix = "sha256:";

// 9999-12-31T23:59:59.999Z: ISO-8601 strings cannot name a later instant, and
// numeric timestamps get the same ceiling so that both forms agree on what
// "out of range" means.
constexpr int64_t max_timestamp_ms = 253'402'300'799'999;

// Epoch values from 1e11 are milliseconds: 1e11 seconds lies in the year
// 5138, 1e11 milliseconds in 1973, so the two ranges of plausible values do
// not overlap.
constexpr int64_t max_seconds_digits = 11;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
         || c == '\v';
}

std::string_view trim(std::string_view s, bool (*is_space)(char)) {
  while (!s.empty() && is_space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_space(s.back()))
    s.remove_suffix(1);
  return s;
}

std::string_view trim_ascii(std::string_view s) {
  return trim(s, is_ascii_space);
}

// HTTP optional whitespace: only these can surround a field value, so
// anything else at the edges (a stray CR or LF) is refused as a control
// character instead of being silently dropped.
bool is_ows(char c) {
  return c == ' ' || c == '\t';
}

bool is_printable_ascii(char c) {
  return c >= 0x20 && c <= 0x7E;
}

rejection invalid_key(std::string detail) {
  return rejection{400, "invalid-key", "Invalid idempotency key",
                   std::move(detail)};
}

// -- timestamps ---------------------------------------------------------------

// Epoch seconds or milliseconds written as a decimal number, evaluated
// exactly on the digits (a double would blur the last millisecond of
// fractional seconds). Grammar: digits ['.' digits] [('e'|'E') [sign]
// digits]; no sign, so negative values never parse.
std::optional<int64_t> parse_epoch(std::string_view s) {
  std::size_t i = 0;
  std::string digits;
  int64_t scale = 0;
  auto read_digits = [&](auto&& sink) {
    auto start = i;
    for (; i < s.size() && is_digit(s[i]); ++i)
      sink(s[i]);
    return i > start;
  };
  auto keep = [&](char c) {
    if (!digits.empty() || c != '0')
      digits += c;
  };
  if (!read_digits(keep))
    return std::nullopt;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!read_digits([&](char c) {
          keep(c);
          --scale;
        }))
      return std::nullopt;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = i < s.size() && s[i] == '-';
    if (i < s.size() && (s[i] == '+' || s[i] == '-'))
      ++i;
    int64_t exponent = 0;
    // Saturates: anything this large is out of range either way.
    if (!read_digits([&](char c) {
          exponent = std::min<int64_t>(exponent * 10 + (c - '0'), 1'000'000);
        }))
      return std::nullopt;
    scale += negative ? -exponent : exponent;
  }
  if (i != s.size())
    return std::nullopt;
  if (digits.empty())
    return 0;
  // The value is digits * 10^scale with a non-zero leading digit.
  auto size = static_cast<int64_t>(digits.size());
  bool seconds = size + scale <= max_seconds_digits;
  auto shift = scale + (seconds ? 3 : 0);
  // Number of digits of the value in milliseconds before the decimal point.
  auto ms_digits = size + shift;
  if (ms_digits > 18)
    return std::nullopt;
  int64_t ms = 0;
  for (int64_t k = 0; k < ms_digits; ++k)
    ms = ms * 10 + (k < size ? digits[k] - '0' : 0);
  // Nearest millisecond, halves rounded up.
  if (ms_digits >= 0 && ms_digits < size && digits[ms_digits] >= '5')
    ++ms;
  if (ms > max_timestamp_ms)
    return std::nullopt;
  return ms;
}

bool is_leap_year(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int days_in_month(int64_t y, int m) {
  static constexpr int days[] = {31, 28, 31, 30, 31, 30,
                                 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap_year(y) ? 29 : days[m - 1];
}

// Leap years in [1, y] for y >= 0.
int64_t leap_years_through(int64_t y) {
  return y / 4 - y / 100 + y / 400;
}

// Days from 1970-01-01 to the given proleptic Gregorian date (y >= 1).
int64_t days_from_civil(int64_t y, int m, int d) {
  static constexpr int days_before_month[] = {0,   31,  59,  90,  120, 151,
                                              181, 212, 243, 273, 304, 334};
  int64_t days = 365 * (y - 1970) + leap_years_through(y - 1)
                 - leap_years_through(1969);
  days += days_before_month[m - 1];
  if (m > 2 && is_leap_year(y))
    ++days;
  return days + d - 1;
}

// Reads exactly `n` digits at `pos`.
std::optional<int> read_fixed(std::string_view s, std::size_t pos,
                              std::size_t n) {
  if (pos + n > s.size())
    return std::nullopt;
  int value = 0;
  for (auto i = pos; i < pos + n; ++i) {
    if (!is_digit(s[i]))
      return std::nullopt;
    value = value * 10 + (s[i] - '0');
  }
  return value;
}

// YYYY-MM-DD(T|t| )HH:MM:SS[.fraction](Z|z|+HH:MM|-HH:MM|+HHMM|-HHMM)
std::optional<int64_t> parse_iso8601(std::string_view s) {
  auto expect = [&](std::size_t pos, char c) {
    return pos < s.size() && s[pos] == c;
  };
  auto year = read_fixed(s, 0, 4);
  auto month = read_fixed(s, 5, 2);
  auto day = read_fixed(s, 8, 2);
  auto hour = read_fixed(s, 11, 2);
  auto minute = read_fixed(s, 14, 2);
  auto second = read_fixed(s, 17, 2);
  if (!year || !month || !day || !hour || !minute || !second
      || !expect(4, '-') || !expect(7, '-') || !expect(13, ':')
      || !expect(16, ':')
      || !(expect(10, 'T') || expect(10, 't') || expect(10, ' ')))
    return std::nullopt;
  if (*year < 1 || *month < 1 || *month > 12 || *day < 1
      || *day > days_in_month(*year, *month) || *hour > 23 || *minute > 59
      || *second > 59)
    return std::nullopt;
  std::size_t pos = 19;
  int64_t fraction_ms = 0;
  if (expect(pos, '.')) {
    auto start = ++pos;
    while (pos < s.size() && is_digit(s[pos]))
      ++pos;
    if (pos == start)
      return std::nullopt;
    // First three digits are milliseconds, the fourth rounds (halves up);
    // a carry into the next second is handled by the arithmetic below.
    for (std::size_t i = 0; i < 3; ++i)
      fraction_ms = fraction_ms * 10
                    + (start + i < pos ? s[start + i] - '0' : 0);
    if (start + 3 < pos && s[start + 3] >= '5')
      ++fraction_ms;
  }
  int64_t offset_minutes = 0;
  if (expect(pos, 'Z') || expect(pos, 'z')) {
    ++pos;
  } else if (expect(pos, '+') || expect(pos, '-')) {
    int sign = s[pos] == '-' ? -1 : 1;
    auto offset_hours = read_fixed(s, pos + 1, 2);
    pos += 3;
    if (expect(pos, ':'))
      ++pos;
    auto offset_mins = read_fixed(s, pos, 2);
    pos += 2;
    if (!offset_hours || !offset_mins || *offset_hours > 23
        || *offset_mins > 59)
      return std::nullopt;
    offset_minutes = sign * (*offset_hours * 60 + *offset_mins);
  } else {
    // A local time without offset names no single instant.
    return std::nullopt;
  }
  if (pos != s.size())
    return std::nullopt;
  int64_t seconds = ((days_from_civil(*year, *month, *day) * 24 + *hour) * 60
                     + *minute - offset_minutes)
                      * 60
                    + *second;
  int64_t ms = seconds * 1000 + fraction_ms;
  if (ms < 0 || ms > max_timestamp_ms)
    return std::nullopt;
  return ms;
}

// -- derivation ---------------------------------------------------------------

} // namespace

std::optional<std::string_view> trimmed_string(const payload& body,
                                               std::string_view name) {
  auto i = body.fields.find(name);
  if (i == body.fields.end() || i->second.type != field::kind::string)
    return std::nullopt;
  auto text = trim_ascii(i->second.text);
  if (text.empty())
    return std::nullopt;
  return text;
}

namespace {

// `s` with the ASCII letters from `first` to `last` moved by `shift`.
std::string shift_ascii(std::string_view s, char first, char last, int shift) {
  std::string out{s};
  for (auto& c : out)
    if (c >= first && c <= last)
      c = static_cast<char>(c + shift);
  return out;
}

std::string to_upper_ascii(std::string_view s) {
  return shift_ascii(s, 'a', 'z', 'A' - 'a');
}

std::string to_lower_ascii(std::string_view s) {
  return shift_ascii(s, 'A', 'Z', 'a' - 'A');
}

// The preimage of a derived key, from the normalised fields.
//
// v1 (`v1|F1|F2|F3|F4`) joins the fields with an unescaped `|`. It is
// taken exactly when no field holds a `|`, and there it is injective:
// splitting at the bars gives back the four fields. It is byte for byte
// the only derivation there was before v2, so every key derived before
// from such fields is derived the same way still. (Fields with a `|` were
// the ambiguous case, `BINANCE|BTC`,`USDT` = `BINANCE`,`BTC|USDT`; those
// signals now get v2 keys.)
//
// v2 (`v2|<n1>:F1|<n2>:F2|<n3>:F3|<n4>:F4`, each n the decimal byte length
// of its field) is taken exactly when some field holds a `|`. It decodes
// from the left without looking inside the fields (read digits up to `:`,
// take that many bytes, then `|` starts the next field), so it is
// injective.
//
// The two never meet: a v1 preimage starts with `v1|`, a v2 preimage with
// `v2|`. Hence distinct field tuples have distinct preimages, and (barring
// a SHA-256 collision) distinct derived keys.
std::string derivation_preimage(const std::string_view (&fields)[4]) {
  bool has_bar = false;
  for (auto f : fields)
    has_bar = has_bar || f.find('|') != std::string_view::npos;
  std::string out = has_bar ? "v2" : "v1";
  for (auto f : fields) {
    out += '|';
    if (has_bar) {
      out += std::to_string(f.size());
      out += ':';
    }
    out += f;
  }
  return out;
}

// Keys on routes whose requests are not signed: header, body member,
// derived.
std::variant<idempotency_key, rejection>
unsigned_route_key(std::optional<std::string_view> header,
                   const payload& body) {
  if (header) {
    auto parsed = parse_key_header(*header);
    if (auto why = std::get_if<rejection>(&parsed))
      return std::move(*why);
    return idempotency_key{std::move(std::get<std::string>(parsed)),
                           key_source::header};
  }
  for (std::string_view name : {"idempotency_key", "trace_id", "id"}) {
    auto i = body.fields.find(name);
    if (i == body.fields.end() || i->second.type != field::kind::string)
      continue;
    const auto& value = i->second.text;
    if (value.empty() || value.size() > max_key_length)
      return invalid_key("member \"" + std::string{name}
                         + "\" must be 1-255 bytes");
    return idempotency_key{value, key_source::body};
  }
  auto derived = derive_key(body);
  if (auto why = std::get_if<rejection>(&derived))
    return std::move(*why);
  return idempotency_key{std::move(std::get<std::string>(derived)),
                         key_source::derived};
}

std::variant<idempotency_key, rejection>
delivery_id_key(std::string_view delivery_id) {
  // Signed by the sender: any printable ASCII id of 1-255 characters.
  auto parsed = parse_key_header(delivery_id);
  if (auto why = std::get_if<rejection>(&parsed))
    return std::move(*why);
  return idempotency_key{std::move(std::get<std::string>(parsed)),
                         key_source::webhook_id};
}

bool starts_with_hashed_prefix(std::string_view key) {
  if (key.size() < hashed_key_prefix.size())
    return false;
  for (std::size_t i = 0; i < hashed_key_prefix.size(); ++i) {
    char c = key[i];
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
    if (c != hashed_key_prefix[i])
      return false;
  }
  return true;
}

} // namespace

constexpr const char* key_source_names[] = {
  "header", "webhook-id", "body", "derived", "github-body", "text-body"};
static_assert(enum_table_covers(key_source::text_body, key_source_names));

const char* to_string(key_source x) {
  return enum_text(x, key_source_names);
}

std::variant<std::string, rejection> parse_key_header(std::string_view raw) {
  auto s = trim(raw, is_ows);
  if (s.empty())
    return invalid_key("empty key");
  std::string key;
  if (s.front() == '"') {
    std::size_t i = 1;
    for (; i < s.size() && s[i] != '"'; ++i) {
      char c = s[i];
      if (c == '\\') {
        if (++i == s.size())
          break;
        c = s[i];
        if (c != '"' && c != '\\')
          return invalid_key("only \\\" and \\\\ may be escaped in a quoted "
                             "key");
      } else if (!is_printable_ascii(c)) {
        return invalid_key("key must be printable ASCII (0x20-0x7E)");
      }
      key += c;
    }
    if (i >= s.size())
      return invalid_key("unterminated quoted key");
    if (i + 1 != s.size())
      return invalid_key("unexpected characters after the quoted key");
  } else {
    for (char c : s) {
      if (!is_printable_ascii(c))
        return invalid_key("key must be printable ASCII (0x20-0x7E)");
      // With any of these the value is not one bare item under RFC 8941
      // (a list, a parameterised item, a broken string): refusing is safer
      // than guessing which part the sender meant.
      if (c == ' ' || c == '"' || c == '\\' || c == ',' || c == ';')
        return invalid_key("an unquoted key must not contain spaces, "
                           "quotes, backslashes, commas or semicolons");
    }
    key = s;
  }
  if (key.empty())
    return invalid_key("empty key");
  if (key.size() > max_key_length)
    return invalid_key("key longer than 255 characters");
  return key;
}

std::optional<int64_t> parse_timestamp_ms(const field& f) {
  switch (f.type) {
    case field::kind::number:
      return parse_epoch(f.text);
    case field::kind::string: {
      auto s = trim_ascii(f.text);
      if (auto ms = parse_epoch(s))
        return ms;
      return parse_iso8601(s);
    }
    default:
      return std::nullopt;
  }
}

std::variant<std::string, rejection> derive_key(const payload& body) {
  std::vector<std::string_view> missing;
  auto exchange = trimmed_string(body, "exchange");
  if (!exchange)
    missing.emplace_back("exchange");
  auto symbol = trimmed_string(body, "symbol");
  if (!symbol)
    missing.emplace_back("symbol");
  auto action = trimmed_string(body, "action");
  if (!action)
    missing.emplace_back("action");
  std::optional<int64_t> ms;
  if (auto i = body.fields.find("timestamp"); i != body.fields.end())
    ms = parse_timestamp_ms(i->second);
  if (!ms)
    missing.emplace_back("timestamp");
  if (!missing.empty()) {
    std::string detail = "missing or invalid: ";
    for (std::size_t i = 0; i < missing.size(); ++i) {
      if (i > 0)
        detail += ", ";
      detail += missing[i];
    }
    return rejection{422, "missing-fields", "Cannot derive an idempotency key",
                     std::move(detail)};
  }
  auto upper_exchange = to_upper_ascii(*exchange);
  auto upper_symbol = to_upper_ascii(*symbol);
  auto lower_action = to_lower_ascii(*action);
  auto millis = std::to_string(*ms);
  const std::string_view fields[4] = {upper_exchange, upper_symbol,
                                      lower_action, millis};
  return to_hex(sha256(derivation_preimage(fields)));
}

std::variant<idempotency_key, rejection>
select_key(const key_inputs& in, const payload& body) {
  switch (in.auth) {
    case auth_mode::standard_webhooks:
      // The signature covers id, timestamp and body; nothing else may
      // name the key, or a captured delivery with a fresh header would be
      // a new key.
      if (!in.delivery_id)
        return invalid_key("missing webhook-id");
      return delivery_id_key(*in.delivery_id);
    case auth_mode::github:
      // GitHub signs the body only; X-GitHub-Delivery can be changed by
      // anyone who saw the delivery.
      return idempotency_key{to_hex(sha256(in.raw_body)),
                             key_source::github_body};
    case auth_mode::none:
    case auth_mode::token:
      break;
  }
  if (in.text && !in.header)
    return idempotency_key{to_hex(sha256(in.raw_body)), key_source::text_body};
  return unsigned_route_key(in.header, body);
}

std::string forwarded_key(std::string_view key) {
  bool as_is = !key.empty() && key.size() <= max_key_length
               && key.front() != ' ' && key.back() != ' '
               && !starts_with_hashed_prefix(key);
  for (std::size_t i = 0; as_is && i < key.size(); ++i)
    as_is = is_printable_ascii(key[i]);
  if (as_is)
    return std::string{key};
  std::string out{hashed_key_prefix};
  out += to_hex(sha256(key));
  return out;
}

} // namespace oncegate::gateway
