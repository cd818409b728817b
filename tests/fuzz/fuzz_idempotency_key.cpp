// The small text parsers on the request path: Idempotency-Key header
// values, timestamp fields, percent-decoding and query parameters, CIDR
// allowlists. Every parser gets the whole input.
#include <arpa/inet.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api/auth.hpp"
#include "api/idempotency_key.hpp"
#include "api/json_text.hpp"
#include "api/url.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace gw = oncegate::gateway;
using oncegate::fuzz::is_printable_ascii;

namespace {

// 9999-12-31T23:59:59.999Z.
constexpr int64_t max_timestamp_ms = 253'402'300'799'999;

bool is_ows(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back()))
    s.remove_suffix(1);
  return s;
}

// -- Idempotency-Key ----------------------------------------------------------

void check_key_header(std::string_view raw) {
  auto parsed = gw::parse_key_header(raw);
  if (auto why = std::get_if<gw::rejection>(&parsed)) {
    FUZZ_CHECK(why->status == 400 && why->type == "invalid-key");
    FUZZ_CHECK(is_printable_ascii(why->detail)); // never echoes the key
    return;
  }
  auto& key = std::get<std::string>(parsed);
  FUZZ_CHECK(!key.empty() && key.size() <= 255);
  FUZZ_CHECK(is_printable_ascii(key));
  auto trimmed = trim_ows(raw);
  if (trimmed.front() != '"')
    FUZZ_CHECK(key == trimmed); // a bare token is taken as is
  // Written as a Structured-Field string, the key reads back unchanged.
  std::string quoted = "\"";
  for (char c : key) {
    if (c == '"' || c == '\\')
      quoted += '\\';
    quoted += c;
  }
  quoted += '"';
  auto again = gw::parse_key_header(quoted);
  auto s = std::get_if<std::string>(&again);
  FUZZ_CHECK(s != nullptr && *s == key);
}

// -- timestamps ---------------------------------------------------------------

std::optional<int64_t> timestamp_of(gw::field::kind kind, std::string text) {
  auto ms = gw::parse_timestamp_ms(gw::field{kind, std::move(text)});
  if (ms)
    FUZZ_CHECK(*ms >= 0 && *ms <= max_timestamp_ms);
  return ms;
}

void check_timestamps(std::string_view input) {
  using kind = gw::field::kind;
  std::string text{input};
  auto as_number = timestamp_of(kind::number, text);
  auto as_string = timestamp_of(kind::string, text);
  if (as_number) {
    // A numeric string means what the number means.
    FUZZ_CHECK(as_string == as_number);
  }
  FUZZ_CHECK(!timestamp_of(kind::boolean, text));
  FUZZ_CHECK(!timestamp_of(kind::null, text));
  if (!as_string)
    return;
  auto ms = *as_string;
  // Round trips: the same instant as ISO-8601 UTC, as epoch milliseconds,
  // and (where unambiguous: below 1e11 s) as fractional epoch seconds.
  FUZZ_CHECK(timestamp_of(kind::string, gw::format_timestamp(ms)) == ms);
  if (ms >= 100'000'000'000)
    FUZZ_CHECK(timestamp_of(kind::number, std::to_string(ms)) == ms);
  if (ms < 100'000'000'000'000) {
    auto frac = std::to_string(ms % 1000);
    auto secs = std::to_string(ms / 1000) + "."
                + std::string(3 - frac.size(), '0') + frac;
    FUZZ_CHECK(timestamp_of(kind::number, secs) == ms);
  }
}

// -- URLs ---------------------------------------------------------------------

std::string percent_encode_all(std::string_view in) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : in) {
    auto c = static_cast<unsigned char>(ch);
    out += '%';
    out += hex[c >> 4];
    out += hex[c & 0x0F];
  }
  return out;
}

void check_url(std::string_view input) {
  for (bool plus : {false, true}) {
    auto decoded = gw::percent_decode(input, plus);
    if (decoded) {
      FUZZ_CHECK(decoded->size() <= input.size());
      if (input.find('%') == std::string_view::npos) {
        std::string expected{input};
        if (plus)
          for (auto& c : expected)
            if (c == '+')
              c = ' ';
        FUZZ_CHECK(*decoded == expected);
      }
    }
  }
  auto bytes = input.substr(0, 1024);
  auto encoded = percent_encode_all(bytes);
  auto decoded = gw::percent_decode(encoded, true);
  FUZZ_CHECK(decoded && *decoded == bytes);

  // An encoded value after other parameters is found and decoded.
  auto target = "/hook?a=1&tok=2&token=" + encoded + "&token=other";
  auto value = gw::query_param(target, "token");
  FUZZ_CHECK(value && *value == bytes);

  // Arbitrary targets and names: the result is the decoded raw value.
  gw::query_param(input, "token");
  auto nl = input.find('\n');
  if (nl != std::string_view::npos) {
    auto name = input.substr(0, nl);
    auto raw_target = input.substr(nl + 1);
    if (auto v = gw::query_param(raw_target, name))
      FUZZ_CHECK(v->size() <= raw_target.size());
  }
}

// -- CIDR ---------------------------------------------------------------------

std::string address_text(const std::string& raw) {
  char buf[INET6_ADDRSTRLEN];
  int family = raw.size() == 4 ? AF_INET : AF_INET6;
  FUZZ_CHECK(inet_ntop(family, raw.data(), buf, sizeof(buf)) != nullptr);
  return buf;
}

bool is_v4_mapped(std::string_view address) {
  std::string buf{address};
  unsigned char raw[16];
  if (buf.find('\0') != std::string::npos
      || inet_pton(AF_INET6, buf.c_str(), raw) != 1)
    return false;
  static constexpr unsigned char prefix[12]
    = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::equal(prefix, prefix + 12, raw);
}

void check_cidr(std::string_view input) {
  static const std::vector<gw::cidr> fixed = [] {
    std::vector<gw::cidr> nets;
    for (auto text : {"10.0.0.0/8", "192.168.1.0/24", "::1/128", "fd00::/8",
                      "52.89.214.238/32"}) {
      auto net = gw::parse_cidr(text);
      FUZZ_CHECK(net.has_value());
      nets.push_back(*net);
    }
    return nets;
  }();
  gw::address_allowed(input, fixed);
  FUZZ_CHECK(!gw::address_allowed(input, {}));

  // A hand-built, possibly inconsistent network matches safely.
  if (!input.empty()) {
    gw::cidr odd{std::string{input.substr(1, 20)},
                 static_cast<int8_t>(input[0]) * 3};
    gw::address_allowed("10.1.2.3", {odd});
    gw::address_allowed("::ffff:10.1.2.3", {odd});
    gw::address_allowed("2001:db8::1", {odd});
  }

  auto net = gw::parse_cidr(input);
  if (!net)
    return;
  auto bits = static_cast<int>(net->network.size()) * 8;
  FUZZ_CHECK(net->network.size() == 4 || net->network.size() == 16);
  FUZZ_CHECK(net->prefix >= 0 && net->prefix <= bits);
  for (int bit = net->prefix; bit < bits; ++bit) // host bits are clear
    FUZZ_CHECK(
      (static_cast<unsigned char>(net->network[static_cast<std::size_t>(bit / 8)])
       & (0x80 >> (bit % 8)))
      == 0);
  // The network's own text parses to the same network.
  auto text = address_text(net->network) + "/" + std::to_string(net->prefix);
  auto again = gw::parse_cidr(text);
  FUZZ_CHECK(again && again->network == net->network
             && again->prefix == net->prefix);
  FUZZ_CHECK(gw::address_allowed(address_text(net->network), {*net}));
  // The address the network was written with lies inside it (except a
  // mapped address under a prefix shorter than /96: such a network stays
  // IPv6, while the address counts as IPv4).
  auto address = input.substr(0, input.find('/'));
  if (net->network.size() == 4 || !is_v4_mapped(address))
    FUZZ_CHECK(gw::address_allowed(address, {*net}));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oncegate::fuzz::check_text(data, size, check_key_header, check_timestamps,
                             check_url, check_cidr);
  return 0;
}
