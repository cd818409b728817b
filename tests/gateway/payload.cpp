#define CAF_SUITE gateway.payload
#include "caf/test/unit_test.hpp"

#include "gateway/payload.hpp"

#include <string>
#include <string_view>

#include "common/sha256.hpp"

using namespace oncegate::gateway;

namespace {

// The canonical text, or the rejection type in angle brackets, so that a
// failed check shows what came back instead of a bare "false".
std::string canon(std::string_view body, payload_limits limits = {}) {
  auto result = parse_payload(body, limits);
  if (auto p = std::get_if<payload>(&result))
    return p->canonical;
  return "<" + std::get<rejection>(result).type + ">";
}

rejection rejected(std::string_view body, payload_limits limits = {}) {
  auto result = parse_payload(body, limits);
  if (auto r = std::get_if<rejection>(&result))
    return *r;
  CAF_FAIL("body was accepted: " << std::get<payload>(result).canonical);
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
  CAF_CHECK_EQUAL(canon(R"({"a":1.0})"), R"({"a":1})");
  CAF_CHECK_EQUAL(canon(R"({"a":1e0})"), R"({"a":1})");
  CAF_CHECK_EQUAL(canon(R"({"a":10E-1})"), R"({"a":1})");
  CAF_CHECK_EQUAL(canon(R"({"a":1e2})"), R"({"a":100})");
  CAF_CHECK_EQUAL(canon(R"({"a":-0})"), R"({"a":0})");
  CAF_CHECK_EQUAL(canon(R"({"a":-0.0})"), R"({"a":0})");
  CAF_CHECK_EQUAL(canon(R"({"a":-1.50e1})"), R"({"a":-15})");
}

CAF_TEST(canonical number renders integers exactly) {
  CAF_CHECK_EQUAL(canonical_number("0"), "0");
  CAF_CHECK_EQUAL(canonical_number("-0"), "0");
  CAF_CHECK_EQUAL(canonical_number("1.0"), "1");
  CAF_CHECK_EQUAL(canonical_number("1e2"), "100");
  CAF_CHECK_EQUAL(canonical_number("18446744073709551615"),
                  "18446744073709551615");
  CAF_CHECK_EQUAL(canonical_number("-9223372036854775808"),
                  "-9223372036854775808");
  // Above 2^53 an integer literal must not be rounded through a double.
  CAF_CHECK_EQUAL(canonical_number("9007199254740993"), "9007199254740993");
  // Integral doubles that fit in 64 bits print as integers too.
  CAF_CHECK_EQUAL(canonical_number("1e17"), "100000000000000000");
  CAF_CHECK_EQUAL(canonical_number("1.5e3"), "1500");
}

CAF_TEST(canonical number uses the shortest round trip form otherwise) {
  CAF_CHECK_EQUAL(canonical_number("0.1"), "0.1");
  CAF_CHECK_EQUAL(canonical_number("0.10000"), "0.1");
  CAF_CHECK_EQUAL(canonical_number("-2.5"), "-2.5");
  CAF_CHECK_EQUAL(canonical_number("1e300"), "1e+300");
  CAF_CHECK_EQUAL(canonical_number("1.5E-7"), "1.5e-07");
  CAF_CHECK_EQUAL(canonical_number("1e20"), "1e+20");
  CAF_CHECK_EQUAL(canonical_number("100000000000000000000"), "1e+20");
  CAF_CHECK_EQUAL(canonical_number("123456789012345678901234"),
                  "1.2345678901234569e+23");
  // 2^64 no longer fits; to_chars picks the fixed form as the shorter one.
  CAF_CHECK_EQUAL(canonical_number("18446744073709551616"),
                  "18446744073709551616");
  // Below the smallest subnormal the value is zero, as the parser sees it.
  CAF_CHECK_EQUAL(canonical_number("1e-400"), "0");
}

CAF_TEST(canonical number hands back what is not a finite number) {
  CAF_CHECK_EQUAL(canonical_number("1e400"), "1e400");
  CAF_CHECK_EQUAL(canonical_number("01"), "01");
  CAF_CHECK_EQUAL(canonical_number("inf"), "inf");
  CAF_CHECK_EQUAL(canonical_number(""), "");
}

CAF_TEST(large unsigned integers survive in the body) {
  CAF_CHECK_EQUAL(canon(R"({"a":18446744073709551615})"),
                  R"({"a":18446744073709551615})");
  CAF_CHECK_EQUAL(canon(R"({"a":0.1,"b":1e300})"), R"({"a":0.1,"b":1e+300})");
}

CAF_TEST(numbers too large for a double are malformed) {
  auto r = rejected(R"({"a":1e400})");
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "malformed-json");
  CAF_CHECK_EQUAL(r.detail, "number out of range");
  CAF_CHECK_EQUAL(canon(R"({"a":[-1e400]})"), "<malformed-json>");
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
  CAF_CHECK_EQUAL(canon("{\"\xc3\":1}"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon("{\"a\":\"\xc0\x80\"}"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon("{\"a\":\"\xed\xa0\x80\"}"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon("{\"a\":\"\xf4\x90\x80\x80\"}"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon("{\"a\":\"\xe2\x82"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon("{\xff}"), "<invalid-utf8>");
}

CAF_TEST(lone surrogate escapes are rejected as invalid UTF-8) {
  // High (leading) surrogates without a low one.
  CAF_CHECK_EQUAL(canon(R"({"a":"\ud800"})"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"a":"\ud800x"})"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"a":"\uD800\u0041"})"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"a":"\ud800\ud800"})"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"\ud800":1})"), "<invalid-utf8>");
  // Low (trailing) surrogates on their own.
  CAF_CHECK_EQUAL(canon(R"({"a":"\udc00"})"), "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"a":"x\uDFFF"})"), "<invalid-utf8>");
  // Short bodies take Boost's slow path; padding takes the fast one.
  CAF_CHECK_EQUAL(canon(R"({"a":"\ud800"}                    )"),
                  "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"a":"\udc00"}                    )"),
                  "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"a":"\ud800\u0041"}              )"),
                  "<invalid-utf8>");
  CAF_CHECK_EQUAL(canon(R"({"a":"\ud800\u0041"})"), "<invalid-utf8>");
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
