#define CAF_SUITE api.payload
#include "caf/test/unit_test.hpp"

#include "api/payload.hpp"

#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>

#include "api/json_text.hpp"
#include "common/sha256.hpp"
#include "tests/api/take_or_fail.hpp"
#include "tests/common/checks.hpp"

using namespace oncegate::gateway;
using oncegate::test::check_rows;
using oncegate::test::take_or_fail;
using oncegate::test::row;

namespace {

// The canonical text, or the rejection type in angle brackets, so that a
// failed check shows what came back instead of a bare "false".
std::string canon(std::string_view body, payload_limits limits = {}) {
  auto result = parse_payload(body, limits);
  if (auto p = std::get_if<payload>(&result))
    return p->canonical;
  return "<" + std::get<rejection>(result).type + ">";
}

rejection rejected(std::string_view body) {
  return take_or_fail<rejection>(parse_payload(body), "body was accepted");
}

// Checks that each body is refused as invalid UTF-8.
void check_invalid_utf8(std::initializer_list<std::string_view> bodies) {
  for (auto body : bodies)
    CAF_CHECK_EQUAL(canon(body), "<invalid-utf8>");
}

// Checks the canonical text (or rejection) of each body.
void check_canon(std::initializer_list<row<std::string_view>> rows) {
  check_rows([](std::string_view body) { return canon(body); }, rows);
}

std::string nested_arrays(std::size_t depth) {
  return "{\"a\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']')
         + "}";
}

} // namespace

// -- canonical form -----------------------------------------------------------

CAF_TEST(members are sorted at every depth) {
  CAF_CHECK_EQUAL(canon(R"({"b":1,"a":{"d":[{"z":1,"y":2}],"c":3}})"),
                  R"({"a":{"c":3,"d":[{"y":2,"z":1}]},"b":1})");
}

CAF_TEST(members are sorted bytewise on the UTF-8 name) {
  // "\u00e9" is 0xC3 0xA9 in UTF-8, above every ASCII byte; "B" < "a".
  CAF_CHECK_EQUAL(canon("{\"\xc3\xa9\":1,\"z\":2,\"a\":3,\"B\":4}"),
                  "{\"B\":4,\"a\":3,\"z\":2,\"\xc3\xa9\":1}");
}

CAF_TEST(array order is kept) {
  CAF_CHECK_EQUAL(canon(R"({"a":[3,1,2,"x",null,true,false,[]]})"),
                  R"({"a":[3,1,2,"x",null,true,false,[]]})");
}

CAF_TEST(insignificant whitespace is ignored) {
  CAF_CHECK_EQUAL(canon(" \r\n\t{ \"a\" : [ 1 , { \"b\" : null } ] ,\n"
                        "\"c\":\ttrue } \n"),
                  R"({"a":[1,{"b":null}],"c":true})");
  CAF_CHECK_EQUAL(canon("{}"), "{}");
  CAF_CHECK_EQUAL(canon(" { } "), "{}");
}

CAF_TEST(escapes are decoded in names and values) {
  CAF_CHECK_EQUAL(canon(R"({"\u0042":"\u0042"})"), R"({"B":"B"})");
  CAF_CHECK_EQUAL(canon(R"({"\u0042":"\u0042"})"), canon(R"({"B":"B"})"));
  CAF_CHECK_EQUAL(canon(R"({"a":"\/\u00e9"})"), "{\"a\":\"/\xc3\xa9\"}");
}

CAF_TEST(strings are re-escaped minimally) {
  CAF_CHECK_EQUAL(canon(R"({"a":"q\"b\\n\nt\tc\u0001\u001f\b\f\r\u007f"})"),
                  "{\"a\":\"q\\\"b\\\\n\\nt\\tc\\u0001\\u001f\\b\\f\\r\x7f\"}");
  CAF_CHECK_EQUAL(canon(R"({"k\n":1})"), R"({"k\n":1})");
}

CAF_TEST(a valid surrogate pair is accepted and stored as UTF-8) {
  CAF_CHECK_EQUAL(canon(R"({"a":"\ud83d\ude00"})"),
                  "{\"a\":\"\xf0\x9f\x98\x80\"}");
  CAF_CHECK_EQUAL(canon("{\"a\":\"\xf0\x9f\x98\x80\"}"),
                  "{\"a\":\"\xf0\x9f\x98\x80\"}");
}

CAF_TEST(integral numbers share one form) {
  check_canon({{R"({"a":1.0})", R"({"a":1})"},
               {R"({"a":1e0})", R"({"a":1})"},
               {R"({"a":10E-1})", R"({"a":1})"},
               {R"({"a":1e2})", R"({"a":100})"},
               {R"({"a":-0})", R"({"a":0})"},
               {R"({"a":-0.0})", R"({"a":0})"},
               {R"({"a":-1.50e1})", R"({"a":-15})"}});
}

CAF_TEST(canonical number renders integers exactly) {
  check_rows(canonical_number,
             {{"0", "0"}, {"-0", "0"}, {"1.0", "1"}, {"1e2", "100"},
              {"18446744073709551615", "18446744073709551615"},
              {"-9223372036854775808", "-9223372036854775808"},
              // Above 2^53 an integer literal must not be rounded through a
              // double.
              {"9007199254740993", "9007199254740993"},
              // Integral doubles that fit in 64 bits print as integers too.
              {"1e17", "100000000000000000"}, {"1.5e3", "1500"}});
}

CAF_TEST(canonical number uses the shortest round trip form when exact) {
  check_rows(canonical_number,
             {{"0.1", "0.1"}, {"0.10000", "0.1"}, {"-2.5", "-2.5"},
              {"1e300", "1e+300"}, {"1.5E-7", "1.5e-07"}, {"1e20", "1e+20"},
              {"100000000000000000000", "1e+20"},
              // 2^64 no longer fits; to_chars picks the fixed form as the
              // shorter one.
              {"18446744073709551616", "18446744073709551616"},
              {"5e-324", "5e-324"},
              {"1.7976931348623157e308", "1.7976931348623157e+308"}});
}

// -- exact values -------------------------------------------------------------

// Every literal whose value the double/int64/uint64 path rendered exactly
// keeps the text it had before exact comparison, so the fingerprints of
// records stored earlier do not change. (The left column is the old output
// of canonical_number for the literal in the middle.)
CAF_TEST(numbers the old form rendered exactly keep their old text) {
  struct {
    const char* literal;
    const char* old_text;
  } cases[] = {
    {"0", "0"},
    {"-0.0e5", "0"},
    {"7", "7"},
    {"-42", "-42"},
    {"1.0", "1"},
    {"10E-1", "1"},
    {"1e17", "100000000000000000"},
    {"18446744073709551615", "18446744073709551615"},
    {"-9223372036854775808", "-9223372036854775808"},
    {"9007199254740993", "9007199254740993"},
    {"0.1", "0.1"},
    {"0.10000", "0.1"},
    {"-2.5", "-2.5"},
    {"1e300", "1e+300"},
    {"1.5E-7", "1.5e-07"},
    {"100000000000000000000", "1e+20"},
    {"18446744073709551616", "18446744073709551616"},
    {"1700000000.5", "1700000000.5"},
    {"37000.25", "37000.25"},
    {"5e-324", "5e-324"},
  };
  for (auto& c : cases) {
    CAF_MESSAGE("literal " << c.literal);
    CAF_CHECK_EQUAL(canonical_number(c.literal), c.old_text);
    CAF_CHECK_EQUAL(canon(std::string{"{\"n\":"} + c.literal + "}"),
                    std::string{"{\"n\":"} + c.old_text + "}");
  }
}

CAF_TEST(integers beyond 64 bits stay distinct) {
  CAF_CHECK_NOT_EQUAL(canon(R"({"q":18446744073709551616})"),
                      canon(R"({"q":18446744073709551617})"));
  CAF_CHECK_NOT_EQUAL(canon(R"({"q":-9223372036854775808})"),
                      canon(R"({"q":-9223372036854775809})"));
  CAF_CHECK_NOT_EQUAL(canon(R"({"q":123456789012345678901234})"),
                      canon(R"({"q":123456789012345678901235})"));
}

CAF_TEST(decimals beyond 17 significant digits stay distinct) {
  CAF_CHECK_NOT_EQUAL(canon(R"({"px":0.1})"),
                      canon(R"({"px":0.10000000000000001})"));
  CAF_CHECK_NOT_EQUAL(canon(R"({"px":1.00000000000000000001})"),
                      canon(R"({"px":1})"));
  // A value too small for a double is not zero, nor its neighbour.
  CAF_CHECK_NOT_EQUAL(canon(R"({"px":1e-400})"), canon(R"({"px":0})"));
  CAF_CHECK_NOT_EQUAL(canon(R"({"px":1e-400})"), canon(R"({"px":2e-400})"));
}

CAF_TEST(numbers the old form could not render get an exact form) {
  check_rows(canonical_number,
             {{"18446744073709551617", "1.8446744073709551617E19"},
              {"-9223372036854775809", "-9.223372036854775809E18"},
              {"123456789012345678901234", "1.23456789012345678901234E23"},
              {"0.10000000000000001", "1.0000000000000001E-1"},
              {"1e-400", "1E-400"}, {"-25e-401", "-2.5E-400"},
              {"1e400", "1E400"},
              // Integral values above 2^53 written with a fraction or
              // exponent meet the plain integer, which was always rendered
              // exactly.
              {"9007199254740993.0", "9007199254740993"},
              {"9.007199254740993e15", "9007199254740993"}});
}

CAF_TEST(numbers compare by exact decimal value) {
  for (auto [a, b] : {std::pair{"1.0", "1"}, {"1e0", "10e-1"},
                      {"18446744073709551617", "1.8446744073709551617e19"},
                      {"18446744073709551617.000", "18446744073709551617"},
                      {"0.10000000000000001", "10000000000000001E-17"},
                      {"1e-400", "0.1e-399"}, {"-0.0", "0"},
                      {"1e400", "10000e396"}}) {
    CAF_MESSAGE(a << " == " << b);
    CAF_CHECK_EQUAL(canonical_number(a), canonical_number(b));
  }
}

CAF_TEST(the exact form is never an old form) {
  // Old texts (to_chars and integers) never hold an upper-case E; the
  // exact form always does, so it cannot equal an old text of any value.
  for (auto literal : {"18446744073709551617", "1e-400", "1e400",
                       "0.10000000000000001", "-9223372036854775809"}) {
    auto text = canonical_number(literal);
    CAF_CHECK_NOT_EQUAL(text.find('E'), std::string::npos);
    // Rendering is idempotent, and the text is a JSON number.
    CAF_CHECK_EQUAL(canonical_number(text), text);
    CAF_CHECK_EQUAL(canon("{\"n\":" + text + "}"), "{\"n\":" + text + "}");
  }
}

CAF_TEST(huge exponents are compared without expanding them) {
  CAF_CHECK_EQUAL(canonical_number("1e999999999"), "1E999999999");
  CAF_CHECK_EQUAL(canonical_number("-1.5e-999999999"), "-1.5E-999999999");
  CAF_CHECK_EQUAL(canon(R"({"n":1e1000000000})"), R"({"n":1E1000000000})");
  // Beyond 10^9 the decimal exponent is out of range (Boost.JSON itself
  // stops at 2^31).
  auto r = rejected(R"({"n":1e1000000001})");
  CAF_CHECK_EQUAL(r.type, "malformed-json");
  CAF_CHECK_EQUAL(r.detail, "number out of range");
  CAF_CHECK_EQUAL(canon(R"({"n":10e1000000000})"), "<malformed-json>");
  CAF_CHECK_EQUAL(canon(R"({"n":1e-1000000001})"), "<malformed-json>");
  CAF_CHECK_EQUAL(canonical_number("1e99999999999999999999999"),
                  "1e99999999999999999999999");
  // Zero is zero whatever its exponent.
  CAF_CHECK_EQUAL(canonical_number("0e99999999999999999999999"), "0");
  CAF_CHECK_EQUAL(canon(R"({"n":0.000e2000000000})"), R"({"n":0})");
}

CAF_TEST(long number literals take linear time) {
  // 60000 digits: a quadratic step would take seconds here.
  std::string big = "1" + std::string(59998, '0') + "1";
  CAF_CHECK_EQUAL(canonical_number(big),
                  "1." + std::string(59998, '0') + "1E59999");
  std::string tiny = "0." + std::string(59999, '0') + "1";
  CAF_CHECK_EQUAL(canonical_number(tiny), "1E-60000");
  std::string zeros = "1." + std::string(60000, '0');
  CAF_CHECK_EQUAL(canonical_number(zeros), "1");
  CAF_CHECK_EQUAL(canon("{\"n\":" + big + "}"),
                  "{\"n\":1." + std::string(59998, '0') + "1E59999}");
}

CAF_TEST(canonical number hands back what is not a number) {
  check_rows(canonical_number, {{"01", "01"}, {"inf", "inf"}, {"", ""}});
}

CAF_TEST(large unsigned integers survive in the body) {
  CAF_CHECK_EQUAL(canon(R"({"a":18446744073709551615})"),
                  R"({"a":18446744073709551615})");
  CAF_CHECK_EQUAL(canon(R"({"a":0.1,"b":1e300})"), R"({"a":0.1,"b":1e+300})");
}

CAF_TEST(numbers too large for a double keep their exact value) {
  CAF_CHECK_EQUAL(canon(R"({"a":1e400})"), R"({"a":1E400})");
  CAF_CHECK_EQUAL(canon(R"({"a":[-1e400]})"), R"({"a":[-1E400]})");
}

// -- auth members and fields --------------------------------------------------

CAF_TEST(top level auth members are removed from the canonical form) {
  CAF_CHECK_EQUAL(
    canon(R"({"passphrase":"p","secret":1,"token":{"x":1},"a":1})"),
    R"({"a":1})");
  CAF_CHECK_EQUAL(canon(R"({"a":1,"passphrase":"one"})"),
                  canon(R"({"passphrase":"two","a":1})"));
}

CAF_TEST(nested auth members are kept) {
  CAF_CHECK_EQUAL(canon(R"({"a":{"token":"t","secret":"s"},)"
                        R"("b":[{"passphrase":1}]})"),
                  R"({"a":{"secret":"s","token":"t"},"b":[{"passphrase":1}]})");
}

CAF_TEST(auth members are matched after decoding escapes) {
  CAF_CHECK_EQUAL(canon(R"({"\u0074oken":"t","a":1})"), R"({"a":1})");
}

CAF_TEST(fingerprint is the sha256 of the canonical form) {
  auto result = parse_payload(R"({ "b" : 2, "a" : 1 })");
  auto p = std::get_if<payload>(&result);
  CAF_REQUIRE(p != nullptr);
  CAF_CHECK_EQUAL(p->canonical, R"({"a":1,"b":2})");
  CAF_CHECK_EQUAL(p->fingerprint.size(), 32u);
  CAF_CHECK_EQUAL(p->fingerprint, oncegate::sha256(p->canonical));
}

CAF_TEST(top level scalars are listed as fields) {
  auto result = parse_payload(
    R"({"s":"x\u0041","n":1700000000.50,"t":true,"z":null,"o":{"i":1},)"
    R"("l":[1],"passphrase":"pw"})");
  auto p = std::get_if<payload>(&result);
  CAF_REQUIRE(p != nullptr);
  CAF_CHECK_EQUAL(p->fields.size(), 5u);
  CAF_REQUIRE(p->fields.count("s") == 1);
  CAF_CHECK(p->fields.at("s").type == field::kind::string);
  CAF_CHECK_EQUAL(p->fields.at("s").text, "xA");
  CAF_REQUIRE(p->fields.count("n") == 1);
  CAF_CHECK(p->fields.at("n").type == field::kind::number);
  CAF_CHECK_EQUAL(p->fields.at("n").text, "1700000000.50");
  CAF_REQUIRE(p->fields.count("t") == 1);
  CAF_CHECK(p->fields.at("t").type == field::kind::boolean);
  CAF_REQUIRE(p->fields.count("z") == 1);
  CAF_CHECK(p->fields.at("z").type == field::kind::null);
  CAF_CHECK_EQUAL(p->fields.count("o"), 0u);
  CAF_CHECK_EQUAL(p->fields.count("l"), 0u);
  CAF_CHECK_EQUAL(p->fields.count("i"), 0u);
  // Auth members are listed (the gateway checks them) though not hashed.
  CAF_REQUIRE(p->fields.count("passphrase") == 1);
  CAF_CHECK_EQUAL(p->fields.at("passphrase").text, "pw");
}

// -- rejections ---------------------------------------------------------------

CAF_TEST(duplicate member names are rejected) {
  auto r = rejected(R"({"a":1,"b":2,"a":3})");
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "duplicate-member");
  CAF_CHECK_EQUAL(r.detail, R"(duplicate member "a")");
  CAF_CHECK_EQUAL(canon(R"({"x":{"a":1,"a":1}})"), "<duplicate-member>");
  CAF_CHECK_EQUAL(canon(R"({"x":[{"a":1,"a":1}]})"), "<duplicate-member>");
  CAF_CHECK_EQUAL(canon(R"({"token":1,"token":2})"), "<duplicate-member>");
}

CAF_TEST(duplicate member names are detected after decoding escapes) {
  auto r = rejected(R"({"a":1,"\u0061":2})");
  CAF_CHECK_EQUAL(r.type, "duplicate-member");
  CAF_CHECK_EQUAL(r.detail, R"(duplicate member "a")");
}

CAF_TEST(long duplicate names are cut in the detail) {
  std::string name(100, 'n');
  auto r = rejected("{\"" + name + "\":1,\"" + name + "\":2}");
  CAF_CHECK_EQUAL(r.type, "duplicate-member");
  CAF_CHECK_EQUAL(r.detail,
                  "duplicate member \"" + std::string(64, 'n') + "\"...");
}

CAF_TEST(invalid UTF-8 bytes are rejected) {
  auto r = rejected("{\"a\":\"\xff\"}");
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "invalid-utf8");
  CAF_CHECK_EQUAL(r.detail, "invalid UTF-8 sequence at byte 6");
  // Truncated, overlong, an encoded surrogate, above U+10FFFF.
  check_invalid_utf8({"{\"\xc3\":1}", "{\"a\":\"\xc0\x80\"}",
                      "{\"a\":\"\xed\xa0\x80\"}",
                      "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xe2\x82",
                      "{\xff}"});
}

CAF_TEST(lone surrogate escapes are rejected as invalid UTF-8) {
  check_invalid_utf8({
    // High (leading) surrogates without a low one.
    R"({"a":"\ud800"})",
    R"({"a":"\ud800x"})",
    R"({"a":"\uD800\u0041"})",
    R"({"a":"\ud800\ud800"})",
    R"({"\ud800":1})",
    // Low (trailing) surrogates on their own.
    R"({"a":"\udc00"})",
    R"({"a":"x\uDFFF"})",
    // Short bodies take Boost's slow path; padding takes the fast one.
    R"({"a":"\ud800"}                    )",
    R"({"a":"\udc00"}                    )",
    R"({"a":"\ud800\u0041"}              )",
    R"({"a":"\ud800\u0041"})",
  });
  auto r = rejected(R"({"a":"\ud800"})");
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.detail, "unpaired high surrogate escape at byte 6");
}

CAF_TEST(an escaped backslash before u is not a surrogate escape) {
  CAF_CHECK_EQUAL(canon(R"({"a":"\\ud800"})"), R"({"a":"\\ud800"})");
  CAF_CHECK_EQUAL(canon(R"({"a":"\\ud800",})"), "<malformed-json>");
}

CAF_TEST(a body that is not an object is rejected) {
  for (auto body : {"[]", "[1,2]", "\"x\"", "1", "null", "true"}) {
    auto r = rejected(body);
    CAF_CHECK_EQUAL(r.status, 400);
    CAF_CHECK_EQUAL(r.type, "not-an-object");
  }
}

CAF_TEST(an empty body is malformed) {
  auto r = rejected("");
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "malformed-json");
  CAF_CHECK_EQUAL(r.detail, "empty body");
  CAF_CHECK_EQUAL(rejected(" \r\n").detail, "empty body");
}

CAF_TEST(trailing data after the document is malformed) {
  auto r = rejected("{} x");
  CAF_CHECK_EQUAL(r.type, "malformed-json");
  CAF_CHECK_EQUAL(r.detail, "trailing data after the JSON document at byte 3");
  CAF_CHECK_EQUAL(canon("{}{}"), "<malformed-json>");
  CAF_CHECK_EQUAL(canon(R"({"a":1}])"), "<malformed-json>");
}

CAF_TEST(syntax errors are malformed) {
  for (auto body : {"{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{'a':1}",
                    "{\"a\":01}", "{\"a\":tru}", "{\"a\":\"\x01\"}",
                    "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}", "{/*c*/}",
                    "{\"a\":1e99999999999999999999}", "\xef\xbb\xbf{}"}) {
    auto r = rejected(body);
    CAF_CHECK_EQUAL(r.status, 400);
    CAF_CHECK_EQUAL(r.type, "malformed-json");
  }
  CAF_CHECK_EQUAL(rejected("{\"a\" 1}").detail, "syntax error at byte 5");
  CAF_CHECK_EQUAL(rejected("{\"a\":1").detail,
                  "body ends inside the JSON document");
}

CAF_TEST(nesting up to the depth limit is accepted) {
  // The top-level object counts as one level.
  CAF_CHECK_EQUAL(canon(nested_arrays(32)),
                  "{\"a\":" + std::string(31, '[') + std::string(31, ']')
                    + "}");
  CAF_CHECK_EQUAL(canon(nested_arrays(4), payload_limits{4}),
                  R"({"a":[[[]]]})");
}

CAF_TEST(nesting beyond the depth limit is rejected) {
  auto r = rejected(nested_arrays(33));
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "too-deep");
  CAF_CHECK_EQUAL(r.detail, "nesting deeper than 32 levels at byte 36");
  CAF_CHECK_EQUAL(canon(nested_arrays(5), payload_limits{4}), "<too-deep>");
  CAF_CHECK_EQUAL(canon(R"({"a":{"b":{"c":{"d":{}}}}})", payload_limits{4}),
                  "<too-deep>");
  CAF_CHECK_EQUAL(canon(R"({"a":{"b":{"c":{}}}})", payload_limits{4}),
                  R"({"a":{"b":{"c":{}}}})");
}

CAF_TEST(rejection details never echo the body) {
  std::string secret = "hunter2-very-secret-value";
  for (auto body : {"{\"passphrase\":\"" + secret + "\",}",
                    "{\"passphrase\":\"" + secret + "\"} trailing",
                    "{\"passphrase\":\"" + secret + "\xff\"}"}) {
    auto r = rejected(body);
    CAF_CHECK_EQUAL(r.detail.find(secret), std::string::npos);
    CAF_CHECK_EQUAL(r.title.find(secret), std::string::npos);
  }
}

// -- digests and timestamps ---------------------------------------------------

CAF_TEST(fingerprints are SHA-256 with the FIPS 180-2 known answers) {
  using oncegate::sha256;
  using oncegate::to_hex;
  CAF_CHECK_EQUAL(to_hex(sha256("abc")),
                  "ba7816bf8f01cfea414140de5dae2223"
                  "b00361a396177a9cb410ff61f20015ad");
  CAF_CHECK_EQUAL(to_hex(sha256("")),
                  "e3b0c44298fc1c149afbf4c8996fb924"
                  "27ae41e4649b934ca495991b7852b855");
  CAF_CHECK_EQUAL(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmn"
                                "lmnomnopnopq")),
                  "248d6a61d20638b8e5c026930c3e6039"
                  "a33ce45964ff2167f6ecedd419db06c1");
  // The per-thread context is reused: the same input, the same digest.
  CAF_CHECK_EQUAL(sha256("abc"), sha256("abc"));
  CAF_CHECK_EQUAL(sha256(std::string(1000000, 'a')).size(), 32u);
  CAF_CHECK_EQUAL(to_hex(sha256(std::string(1000000, 'a'))),
                  "cdc76e5c9914fb9281a1c7e284d73e67"
                  "f1809a48a497200e046d39ccc7112cd0");
}

CAF_TEST(timestamps are formatted as gmtime does before and after 1970) {
  CAF_CHECK_EQUAL(format_timestamp(0), "1970-01-01T00:00:00.000Z");
  CAF_CHECK_EQUAL(format_timestamp(-1), "1969-12-31T23:59:59.999Z");
  CAF_CHECK_EQUAL(format_timestamp(951782400123), "2000-02-29T00:00:00.123Z");
  CAF_CHECK_EQUAL(format_timestamp(253402300799999),
                  "9999-12-31T23:59:59.999Z");
  // Every day's boundaries over 1900-2400 (leap years and centuries
  // included) against the C library's calendar.
  std::size_t compared = 0;
  std::size_t differ = 0;
  for (int64_t day = -25567; day <= 157054; day += 1) {
    for (int64_t ms : {int64_t{0}, int64_t{86399999}}) {
      auto t = day * 86400000 + ms;
      auto secs = static_cast<std::time_t>(t / 1000);
      if (t < 0 && t % 1000 != 0)
        --secs;
      std::tm tm{};
      gmtime_r(&secs, &tm);
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                    tm.tm_min, tm.tm_sec,
                    static_cast<int>(((t % 1000) + 1000) % 1000));
      ++compared;
      if (format_timestamp(t) != buf && differ++ == 0)
        CAF_CHECK_EQUAL(format_timestamp(t), buf); // the first one shown
    }
  }
  CAF_CHECK_EQUAL(compared, 2u * (157054 + 25567 + 1));
  CAF_CHECK_EQUAL(differ, 0u);
}
