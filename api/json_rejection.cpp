#include "api/json_rejection.hpp"

#include <optional>
#include <utility>

#include "api/json_text.hpp"

namespace oncegate::gateway {

namespace {

namespace json = boost::json;

// Names quoted in a rejection are cut here so that a pathological body
// cannot turn into a pathological response.
constexpr std::size_t max_name_in_detail = 64;

std::string quote_for_detail(std::string_view name) {
  bool cut = name.size() > max_name_in_detail;
  if (cut) {
    auto n = max_name_in_detail;
    // Back up to a code point boundary so the detail stays valid UTF-8.
    while (n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80)
      --n;
    name = name.substr(0, n);
  }
  std::string out;
  append_json_string(out, name);
  if (cut)
    out += "...";
  return out;
}

// Length of the well-formed UTF-8 sequence at the start of `s`, or 0. Rejects
// overlong forms, encoded surrogates and code points above U+10FFFF.
std::size_t utf8_sequence_length(std::string_view s) {
  auto at = [&](std::size_t i) {
    return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u;
  };
  auto cont = [&](std::size_t i) { return (at(i) & 0xC0) == 0x80; };
  auto c = at(0);
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    auto lo = c == 0xE0 ? 0xA0u : 0x80u;
    auto hi = c == 0xED ? 0x9Fu : 0xBFu;
    return at(1) >= lo && at(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    auto lo = c == 0xF0 ? 0x90u : 0x80u;
    auto hi = c == 0xF4 ? 0x8Fu : 0xBFu;
    return at(1) >= lo && at(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

std::optional<unsigned> hex4(std::string_view s, std::size_t pos) {
  if (pos + 4 > s.size())
    return std::nullopt;
  unsigned value = 0;
  for (auto i = pos; i < pos + 4; ++i) {
    char c = s[i];
    unsigned digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      digit = c - 'A' + 10;
    else
      return std::nullopt;
    value = value * 16 + digit;
  }
  return value;
}

struct encoding_error {
  std::size_t offset;
  const char* what;
};

// Boost 1.81 reports invalid UTF-8 and several lone-surrogate cases as plain
// `syntax` errors (and names surrogate errors inconsistently between its fast
// and slow paths), so the error code alone cannot say `invalid-utf8`. After a
// failure this scans the body up to the failure offset for the first
// encoding problem. The bytes before that offset are a valid JSON prefix, so
// tracking string boundaries by quotes and backslashes is exact there.
std::optional<encoding_error> find_encoding_error(std::string_view body,
                                                  std::size_t limit) {
  bool in_string = false;
  std::size_t i = 0;
  while (i < body.size() && i <= limit) {
    auto c = static_cast<unsigned char>(body[i]);
    if (c >= 0x80) {
      auto n = utf8_sequence_length(body.substr(i));
      if (n == 0)
        return encoding_error{i, "invalid UTF-8 sequence"};
      i += n;
    } else if (!in_string || c != '\\') {
      if (c == '"')
        in_string = !in_string;
      ++i;
    } else if (i + 1 >= body.size() || body[i + 1] != 'u') {
      i += 2;
    } else if (auto unit = hex4(body, i + 2); !unit) {
      i += 2; // a broken escape is a syntax error, not an encoding one
    } else if (*unit >= 0xDC00 && *unit <= 0xDFFF) {
      return encoding_error{i, "unpaired low surrogate escape"};
    } else if (*unit >= 0xD800 && *unit <= 0xDBFF) {
      if (body.substr(i + 6, 2) != "\\u")
        return encoding_error{i, "unpaired high surrogate escape"};
      auto low = hex4(body, i + 8);
      if (!low) {
        i += 8;
      } else if (*low < 0xDC00 || *low > 0xDFFF) {
        return encoding_error{i, "unpaired high surrogate escape"};
      } else {
        i += 12;
      }
    } else {
      i += 6;
    }
  }
  return std::nullopt;
}

rejection reject(std::string type, std::string title, std::string detail) {
  return rejection{400, std::move(type), std::move(title), std::move(detail)};
}

} // namespace

std::string at_byte(std::size_t offset) {
  return " at byte " + std::to_string(offset);
}

rejection malformed_json(std::string detail) {
  return reject("malformed-json", "Malformed JSON", std::move(detail));
}

rejection duplicate_member(std::string_view name) {
  return reject("duplicate-member", "Duplicate member name",
                "duplicate member " + quote_for_detail(name));
}

rejection not_an_object() {
  return reject("not-an-object", "Body is not a JSON object",
                "the top-level value must be an object");
}

rejection diagnose_parse_error(std::string_view body, std::size_t offset,
                               const json::error_code& ec,
                               std::size_t max_depth) {
  if (auto bad = find_encoding_error(body, offset))
    return reject("invalid-utf8", "Invalid UTF-8",
                  bad->what + at_byte(bad->offset));
  if (ec == json::error::too_deep)
    return reject("too-deep", "JSON nested too deeply",
                  "nesting deeper than " + std::to_string(max_depth)
                    + " levels" + at_byte(offset));
  if (ec == json::error::illegal_leading_surrogate
      || ec == json::error::illegal_trailing_surrogate)
    return reject("invalid-utf8", "Invalid UTF-8",
                  "unpaired surrogate escape" + at_byte(offset));
  if (ec == json::error::incomplete) {
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
      return malformed_json("empty body");
    return malformed_json("body ends inside the JSON document");
  }
  return malformed_json(ec.message() + at_byte(offset));
}

} // namespace oncegate::gateway
