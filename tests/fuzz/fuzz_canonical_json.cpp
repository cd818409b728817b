// parse_payload on the raw input (the whole input is the body), plus
// canonical_number on the numeric-looking runs of the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "api/payload.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace gw = oncegate::gateway;

namespace {

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.'
         || c == 'e' || c == 'E';
}

// Longest run of number characters starting at `pos`, capped: the run only
// has to look like a number, not be one.
std::string_view number_run(std::string_view s, std::size_t pos) {
  constexpr std::size_t cap = 512;
  auto end = pos;
  while (end < s.size() && end - pos < cap && is_number_char(s[end]))
    ++end;
  return s.substr(pos, end - pos);
}

void check_number(std::string_view literal) {
  if (literal.empty())
    return;
  auto canonical = gw::canonical_number(literal);
  FUZZ_CHECK(!canonical.empty());
  // Rendering is idempotent (text it cannot render comes back unchanged).
  FUZZ_CHECK(gw::canonical_number(canonical) == canonical);

  // The body parser agrees with canonical_number on any literal it accepts.
  std::string body = "{\"n\":";
  body.append(literal);
  body += '}';
  auto parsed = gw::parse_payload(body);
  if (auto p = std::get_if<gw::payload>(&parsed)) {
    FUZZ_CHECK(p->canonical == "{\"n\":" + canonical + "}");
    auto f = p->fields.find("n");
    FUZZ_CHECK(f != p->fields.end()
               && f->second.type == gw::field::kind::number
               && f->second.text == literal);
  } else {
    auto& why = std::get<gw::rejection>(parsed);
    FUZZ_CHECK(why.status == 400 && why.type == "malformed-json");
    // A refused literal is handed back unchanged by canonical_number, save
    // one known difference: Boost.JSON refuses exponents beyond 32 bits
    // ("exponent overflow"), even where the value is plainly 0 or tiny and
    // canonical_number renders it.
    FUZZ_CHECK(canonical == literal
               || why.detail.rfind("exponent overflow", 0) == 0);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto input = oncegate::fuzz::as_text(data, size);
  oncegate::fuzz::parse_and_check(input);

  check_number(number_run(input, 0));
  auto first = input.find_first_of("-0123456789");
  if (first != std::string_view::npos && first != 0)
    check_number(number_run(input, first));
  return 0;
}
