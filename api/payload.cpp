#include "api/payload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

// basic_parser is a template: its implementation is compiled here and only
// here, so the rest of the gateway never pays for it.
#include <boost/json/basic_parser_impl.hpp>

#include "common/sha256.hpp"
#include "api/json_text.hpp"

namespace oncegate::gateway {

namespace {

namespace json = boost::json;

// Member names a sender may use for a shared secret (TradingView cannot send
// headers). They must not reach the fingerprint: two deliveries that differ
// only by a rotated secret are the same signal.
constexpr std::string_view auth_members[] = {"passphrase", "secret", "token"};

// Names quoted in a rejection are cut here so that a pathological body
// cannot turn into a pathological response.
constexpr std::size_t max_name_in_detail = 64;

bool is_auth_member(std::string_view name) {
  return std::find(std::begin(auth_members), std::end(auth_members), name)
         != std::end(auth_members);
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// -- strings ------------------------------------------------------------------

// Canonical strings use the same minimal escaping as every JSON oncegate
// writes (non-ASCII stays raw: the input is validated UTF-8, and escaping it
// would give the same text two spellings again).
void append_quoted(std::string& out, std::string_view s) {
  append_json_string(out, s);
}

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
  append_quoted(out, name);
  if (cut)
    out += "...";
  return out;
}

// -- numbers ------------------------------------------------------------------

// Strict JSON number grammar. canonical_number is public, so it cannot rely
// on the parser having validated its input.
bool is_json_number(std::string_view s) {
  std::size_t i = 0;
  auto digits = [&] {
    auto start = i;
    while (i < s.size() && is_digit(s[i]))
      ++i;
    return i > start;
  };
  if (i < s.size() && s[i] == '-')
    ++i;
  if (i < s.size() && s[i] == '0')
    ++i;
  else if (!digits())
    return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits())
      return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-'))
      ++i;
    if (!digits())
      return false;
  }
  return i == s.size();
}

// The exact value of a JSON number: zero, or sign * digits * 10^exponent
// where `digits` has neither leading nor trailing zeros. Every non-zero
// value has exactly one such representation, so comparing the three members
// compares values, without ever expanding an exponent.
struct exact_decimal {
  bool negative = false;
  /// Significant digits; empty for zero.
  std::string digits;
  int64_t exponent = 0;

  bool is_zero() const {
    return digits.empty();
  }

  /// The exponent of the value in scientific notation (d.ddd * 10^n).
  int64_t scientific_exponent() const {
    return exponent + static_cast<int64_t>(digits.size()) - 1;
  }

  friend bool operator==(const exact_decimal& x, const exact_decimal& y) {
    return x.negative == y.negative && x.exponent == y.exponent
           && x.digits == y.digits;
  }
};

// Literal exponents saturate here: any such value is refused by
// max_scientific_exponent below, and the sum with the literal's length
// cannot overflow.
constexpr int64_t exponent_saturation = 1'000'000'000'000'000'000;

// Largest magnitude of the decimal exponent (in scientific notation) of a
// non-zero number. Boost.JSON stops near 2^31 anyway; this bound keeps every
// exact form re-parseable with room to spare and is far beyond any quantity
// a webhook carries. Beyond it a number is `malformed-json` ("number out of
// range"), as values beyond a double were before exact comparison.
constexpr int64_t max_scientific_exponent = 1'000'000'000;

// One pass over a literal that is_json_number accepted; linear in its
// length whatever the exponent says.
exact_decimal exact_value(std::string_view s) {
  exact_decimal x;
  std::size_t i = 0;
  if (s[i] == '-') {
    x.negative = true;
    ++i;
  }
  auto keep = [&](char c) {
    if (!x.digits.empty() || c != '0')
      x.digits += c;
  };
  for (; i < s.size() && is_digit(s[i]); ++i)
    keep(s[i]);
  int64_t fraction_digits = 0;
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && is_digit(s[i]); ++i, ++fraction_digits)
      keep(s[i]);
  int64_t exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = s[i] == '-';
    if (s[i] == '+' || s[i] == '-')
      ++i;
    for (; i < s.size(); ++i)
      exponent = exponent >= exponent_saturation / 10
                   ? exponent_saturation
                   : exponent * 10 + (s[i] - '0');
    if (negative)
      exponent = -exponent;
  }
  auto last = x.digits.find_last_not_of('0');
  if (last == std::string::npos)
    return exact_decimal{}; // zero, whatever its sign and exponent
  auto trailing_zeros = static_cast<int64_t>(x.digits.size() - 1 - last);
  x.digits.resize(last + 1);
  x.exponent = exponent - fraction_digits + trailing_zeros;
  return x;
}

template <class Integer>
std::string print_integer(Integer x) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, res.ptr);
}

// The integer text of `x` when it is an integer in [-2^63, 2^64), the range
// the integer path has always rendered exactly.
std::optional<std::string> as_64_bit_integer(const exact_decimal& x) {
  if (x.exponent < 0
      || static_cast<int64_t>(x.digits.size()) + x.exponent > 20)
    return std::nullopt;
  std::string text = x.negative ? "-" : "";
  text += x.digits;
  text.append(static_cast<std::size_t>(x.exponent), '0');
  auto first = text.data();
  auto last = first + text.size();
  if (x.negative) {
    int64_t value = 0;
    auto res = std::from_chars(first, last, value);
    if (res.ec == std::errc{} && res.ptr == last)
      return print_integer(value);
  } else {
    uint64_t value = 0;
    auto res = std::from_chars(first, last, value);
    if (res.ec == std::errc{} && res.ptr == last)
      return print_integer(value);
  }
  return std::nullopt;
}

// The form every number had before exact comparison (and still has when it
// is exact): the nearest double printed by print_double.
std::string print_double(double x) {
  // Every integral double below 2^64 in magnitude converts exactly, so
  // `1e2`, `100.0` and `100` all meet here as the same integer. `-0.0`
  // takes the unsigned branch (it compares equal to zero) and loses its sign.
  if (x == std::trunc(x)) {
    if (x < 0 && x >= -9223372036854775808.0)
      return print_integer(static_cast<int64_t>(x));
    if (x >= 0 && x < 18446744073709551616.0)
      return print_integer(static_cast<uint64_t>(x));
  }
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, res.ptr);
}

// Nothing when the literal has no finite nearest double.
std::optional<std::string> double_form(std::string_view literal) {
  auto first = literal.data();
  auto last = first + literal.size();
  double value = 0;
  auto res = std::from_chars(first, last, value);
  if (res.ec != std::errc{} || res.ptr != last || !std::isfinite(value))
    return std::nullopt;
  return print_double(value);
}

// `[-]d[.ddd]E<n>`: the exact value in scientific notation with an
// upper-case `E` and no `+` (a form the old renderer never produced).
std::string exact_form(const exact_decimal& x) {
  std::string out = x.negative ? "-" : "";
  out += x.digits.front();
  if (x.digits.size() > 1) {
    out += '.';
    out.append(x.digits, 1, std::string::npos);
  }
  out += 'E';
  out += print_integer(x.scientific_exponent());
  return out;
}

// The canonical text of a number is a function of its exact value v:
//
//   1. zero: `0`;
//   2. an integer in [-2^63, 2^64): its decimal digits (the int64/uint64
//      path, also taken by `1e2`, `100.0`);
//   3. otherwise, when print_double of the nearest double D(v) has exactly
//      the value v (`0.1`, `1e+300`, `1.5e-07`, `1e+20`): that text;
//   4. otherwise: exact_form(v), e.g. `1.8446744073709551617E19`,
//      `1.0000000000000001E-1`, `1E-400`, `1E400`.
//
// Equal values give equal texts: each case depends on v alone (D(v) is
// correctly rounded, so it depends only on v, not on how v was written).
// Distinct values give distinct texts: every text this emits denotes
// exactly v, so a text names one value. Hence canonical texts are equal
// exactly when values are equal.
//
// Compatibility: the old renderer emitted the int64/uint64 text for integer
// literals that fit, and print_double(D(literal)) for everything else. For
// every literal whose old text had the literal's exact value, this emits the
// same text: an integer literal that fit is case 2 with the same digits; a
// double-path literal whose text was exact either printed an integral
// double in [-2^63, 2^64) equal to v (case 2, same digits) or printed a text
// of value v outside that range (case 3, the same D(v)). So fingerprints of
// stored records change only for payloads holding a number the old form
// could not tell from its neighbours, and such a payload gets case 4, whose
// upper-case `E` no old text contains: a new fingerprint can never equal an
// old fingerprint of a payload with other values.
//
// Work is linear in the literal's length: one pass to normalise, one
// from_chars, short compares; exponents are compared, never expanded.
std::optional<std::string> try_canonical_number(std::string_view literal) {
  if (!is_json_number(literal))
    return std::nullopt;
  auto value = exact_value(literal);
  if (value.is_zero())
    return std::string{"0"};
  auto magnitude = value.scientific_exponent();
  if (magnitude > max_scientific_exponent
      || magnitude < -max_scientific_exponent)
    return std::nullopt;
  if (auto text = as_64_bit_integer(value))
    return text;
  if (auto text = double_form(literal);
      text && exact_value(*text) == value)
    return text;
  return exact_form(value);
}

// -- diagnosis of parse errors ------------------------------------------------

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

rejection malformed(std::string detail) {
  return reject("malformed-json", "Malformed JSON", std::move(detail));
}

std::string at_byte(std::size_t offset) {
  return " at byte " + std::to_string(offset);
}

// -- the handler --------------------------------------------------------------

// Builds the canonical text bottom-up while the parser walks the body: each
// open container collects the canonical text of its children, and a closing
// object sorts its members once it knows them all.
class canonical_handler {
public:
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

  bool on_document_begin(json::error_code&) {
    return true;
  }

  bool on_document_end(json::error_code&) {
    return true;
  }

  bool on_object_begin(json::error_code&) {
    if (stack_.empty())
      root_is_object_ = true;
    stack_.push_back(container{true, {}, {}, {}});
    return true;
  }

  bool on_object_end(std::size_t, json::error_code& ec) {
    auto& members = stack_.back().members;
    auto by_name = [](const member& x, const member& y) {
      // std::string compares through char_traits<char>, i.e. as unsigned
      // bytes: the bytewise order the contract asks for.
      return x.first < y.first;
    };
    std::sort(members.begin(), members.end(), by_name);
    auto same_name = [](const member& x, const member& y) {
      return x.first == y.first;
    };
    auto dup = std::adjacent_find(members.begin(), members.end(), same_name);
    if (dup != members.end()) {
      auto detail = "duplicate member " + quote_for_detail(dup->first);
      return fail(ec, reject("duplicate-member", "Duplicate member name",
                             std::move(detail)));
    }
    bool top_level = stack_.size() == 1;
    std::string text = "{";
    for (auto& [name, value] : members) {
      if (top_level && is_auth_member(name))
        continue;
      if (text.size() > 1)
        text += ',';
      append_quoted(text, name);
      text += ':';
      text += value;
    }
    text += '}';
    stack_.pop_back();
    return emit(std::move(text), std::nullopt);
  }

  bool on_array_begin(json::error_code&) {
    stack_.push_back(container{false, "[", {}, {}});
    return true;
  }

  bool on_array_end(std::size_t, json::error_code&) {
    auto text = std::move(stack_.back().text);
    text += ']';
    stack_.pop_back();
    return emit(std::move(text), std::nullopt);
  }

  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    return true;
  }

  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    stack_.back().key = take_part();
    return true;
  }

  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    return true;
  }

  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    field f{field::kind::string, take_part()};
    std::string text;
    append_quoted(text, f.text);
    return emit(std::move(text), std::move(f));
  }

  bool on_number_part(json::string_view s, json::error_code&) {
    part_.append(s.data(), s.size());
    return true;
  }

  bool on_int64(int64_t, json::string_view s, json::error_code& ec) {
    return on_number(s, ec);
  }

  bool on_uint64(uint64_t, json::string_view s, json::error_code& ec) {
    return on_number(s, ec);
  }

  bool on_double(double, json::string_view s, json::error_code& ec) {
    // Boost turns 1e400 into infinity; the literal still has its exact
    // value, which is what the canonical form keeps.
    return on_number(s, ec);
  }

  bool on_bool(bool b, json::error_code&) {
    std::string text = b ? "true" : "false";
    field f{field::kind::boolean, text};
    return emit(std::move(text), std::move(f));
  }

  bool on_null(json::error_code&) {
    return emit("null", field{field::kind::null, {}});
  }

  // Comments are never enabled; the parser still needs the callbacks.
  bool on_comment_part(json::string_view, json::error_code&) {
    return true;
  }

  bool on_comment(json::string_view, json::error_code&) {
    return true;
  }

  const std::optional<rejection>& failure() const {
    return failure_;
  }

  bool root_is_object() const {
    return root_is_object_;
  }

  std::string take_canonical() {
    return std::move(canonical_);
  }

  std::map<std::string, field, std::less<>> take_fields() {
    return std::move(fields_);
  }

private:
  using member = std::pair<std::string, std::string>;

  struct container {
    bool is_object;
    // Arrays: canonical text so far, starting with '['.
    std::string text;
    // Objects: (decoded name, canonical value) in arrival order.
    std::vector<member> members;
    // Objects: the name waiting for its value.
    std::string key;
  };

  std::string take_part() {
    auto result = std::move(part_);
    part_.clear();
    return result;
  }

  bool on_number(json::string_view last, json::error_code& ec) {
    part_.append(last.data(), last.size());
    auto text = try_canonical_number(part_);
    if (!text)
      return fail(ec, malformed("number out of range"));
    return emit(std::move(*text), field{field::kind::number, take_part()});
  }

  bool emit(std::string text, std::optional<field> scalar) {
    if (stack_.empty()) {
      canonical_ = std::move(text);
      return true;
    }
    auto& top = stack_.back();
    if (top.is_object) {
      if (scalar && stack_.size() == 1)
        fields_.insert_or_assign(top.key, std::move(*scalar));
      top.members.emplace_back(std::move(top.key), std::move(text));
      top.key.clear();
    } else {
      if (top.text.size() > 1)
        top.text += ',';
      top.text += text;
    }
    return true;
  }

  bool fail(json::error_code& ec, rejection why) {
    failure_ = std::move(why);
    // Any error stops the parser; failure_ carries the actual reason.
    ec = json::error::exception;
    return false;
  }

  std::vector<container> stack_;
  std::string part_;
  std::string canonical_;
  std::map<std::string, field, std::less<>> fields_;
  bool root_is_object_ = false;
  std::optional<rejection> failure_;
};

rejection diagnose(std::string_view body, std::size_t offset,
                   const json::error_code& ec, const payload_limits& limits) {
  if (auto bad = find_encoding_error(body, offset))
    return reject("invalid-utf8", "Invalid UTF-8",
                  bad->what + at_byte(bad->offset));
  if (ec == json::error::too_deep)
    return reject("too-deep", "JSON nested too deeply",
                  "nesting deeper than " + std::to_string(limits.max_depth)
                    + " levels" + at_byte(offset));
  if (ec == json::error::illegal_leading_surrogate
      || ec == json::error::illegal_trailing_surrogate)
    return reject("invalid-utf8", "Invalid UTF-8",
                  "unpaired surrogate escape" + at_byte(offset));
  if (ec == json::error::incomplete) {
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
      return malformed("empty body");
    return malformed("body ends inside the JSON document");
  }
  return malformed(ec.message() + at_byte(offset));
}

} // namespace

std::variant<payload, rejection> parse_payload(std::string_view body,
                                               const payload_limits& limits) {
  json::parse_options options;
  options.max_depth = limits.max_depth;
  json::basic_parser<canonical_handler> parser{options};
  json::error_code ec;
  auto consumed = parser.write_some(false, body.data(), body.size(), ec);
  auto& handler = parser.handler();
  if (handler.failure())
    return *handler.failure();
  if (ec)
    return diagnose(body, consumed, ec, limits);
  if (consumed != body.size())
    return malformed("trailing data after the JSON document"
                     + at_byte(consumed));
  if (!handler.root_is_object())
    return reject("not-an-object", "Body is not a JSON object",
                  "the top-level value must be an object");
  payload result;
  result.canonical = handler.take_canonical();
  result.fingerprint = sha256(result.canonical);
  result.fields = handler.take_fields();
  return result;
}

std::string canonical_number(std::string_view literal) {
  // parse_payload refuses what try_canonical_number cannot render; this
  // test-facing wrapper hands such input back unchanged.
  if (auto text = try_canonical_number(literal))
    return std::move(*text);
  return std::string{literal};
}

} // namespace oncegate::gateway
