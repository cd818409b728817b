#define CAF_SUITE api.auth
#include "caf/test/unit_test.hpp"

#include "api/auth.hpp"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace oncegate::gateway;
using namespace std::literals;

namespace {

std::string to_hex(std::string_view raw) {
  constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (auto c : raw) {
    auto b = static_cast<unsigned char>(c);
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0x0f]);
  }
  return out;
}

// "<none>" stands for a failed decode so that checks print both sides.
std::string decoded(std::string_view in) {
  return base64_decode(in).value_or("<none>");
}

// The test vectors of RFC 4648 (section 10), raw and encoded, and the two
// characters beyond A-Z, a-z and 0-9.
constexpr std::pair<std::string_view, std::string_view> base64_vectors[] = {
  {"", ""},
  {"f", "Zg=="},
  {"fo", "Zm8="},
  {"foo", "Zm9v"},
  {"foob", "Zm9vYg=="},
  {"fooba", "Zm9vYmE="},
  {"foobar", "Zm9vYmFy"},
  {"\xfb\xff\xbf", "+/+/"},
};

// Each of `inputs` is refused by the decoder.
void check_undecodable(std::initializer_list<std::string_view> inputs) {
  for (auto in : inputs)
    CAF_CHECK_EQUAL(decoded(in), "<none>");
}

std::string whsec_hex(std::string_view secret) {
  auto key = decode_whsec(secret);
  return key ? to_hex(*key) : "<none>";
}

// -- GitHub fixtures -----------------------------------------------------------

// The example from GitHub's "Validating webhook deliveries" page:
// printf '%s' 'Hello, World!' |
//   openssl dgst -sha256 -hmac "It's a Secret to Everybody"
constexpr std::string_view github_secret = "It's a Secret to Everybody";
constexpr std::string_view github_body = "Hello, World!";
constexpr std::string_view github_header
  = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

std::vector<std::string> secrets(std::initializer_list<std::string_view> xs) {
  return std::vector<std::string>(xs.begin(), xs.end());
}

// -- Standard Webhooks fixtures ------------------------------------------------

// The example secret from the Standard Webhooks specification. Its key:
// printf '%s' MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw | base64 -d | xxd -p
constexpr std::string_view sw_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr std::string_view sw_key_hex
  = "31f290f6bf06298aab4f08d43c3f082cf648a362da2da4b0";

constexpr std::string_view sw_id = "msg_1";
constexpr std::string_view sw_ts = "1700000000";
constexpr int64_t sw_now = 1'700'000'000;
constexpr std::string_view sw_body = R"({"a":1})";

// printf '%s' 'msg_1.1700000000.{"a":1}' |
//   openssl dgst -sha256 -mac HMAC -binary
//   -macopt hexkey:31f290f6bf06298aab4f08d43c3f082cf648a362da2da4b0 |
//   base64
constexpr std::string_view sw_signature
  = "v1,hVsFLpmw4Ib/Xm0eZLt3KqYBZdt0U8gdGeuz0EsGv78=";

// A well-formed v1 entry that matches nothing (32 zero bytes).
constexpr std::string_view sw_wrong_signature
  = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

std::vector<std::string> sw_keys() {
  return {*decode_whsec(sw_secret)};
}

standard_webhook_headers sw_headers(std::string_view signature) {
  return standard_webhook_headers{sw_id, sw_ts, signature};
}

// The rejection detail, or "<accepted>".
std::string sw_verdict(const standard_webhook_headers& hdrs,
                       std::string_view body = sw_body,
                       std::vector<std::string> keys = sw_keys(),
                       int64_t now = sw_now) {
  auto result = verify_standard_webhook(hdrs, body, keys, now);
  return result ? result->detail : "<accepted>";
}

// -- CIDR fixtures -------------------------------------------------------------

std::vector<cidr> nets(std::initializer_list<std::string_view> texts) {
  std::vector<cidr> result;
  for (auto text : texts) {
    auto net = parse_cidr(text);
    if (!net)
      CAF_FAIL("test network rejected: " << text);
    result.push_back(*net);
  }
  return result;
}

bool allowed(std::string_view address, std::string_view net) {
  return address_allowed(address, nets({net}));
}

} // namespace

// -- modes ---------------------------------------------------------------------

CAF_TEST(auth mode names round trip through parse_auth_mode) {
  for (auto mode : {auth_mode::none, auth_mode::token, auth_mode::github,
                    auth_mode::standard_webhooks}) {
    auto parsed = parse_auth_mode(to_string(mode));
    CAF_REQUIRE(parsed.has_value());
    CAF_CHECK(*parsed == mode);
  }
  CAF_CHECK_EQUAL(to_string(auth_mode::standard_webhooks),
                  "standard-webhooks"s);
}

CAF_TEST(unknown auth mode names are rejected) {
  CAF_CHECK(!parse_auth_mode(""));
  CAF_CHECK(!parse_auth_mode("hmac"));
  CAF_CHECK(!parse_auth_mode("GitHub"));
  CAF_CHECK(!parse_auth_mode("standard_webhooks"));
  CAF_CHECK(!parse_auth_mode(" none"));
}

// -- primitives ----------------------------------------------------------------

CAF_TEST(constant time equality compares contents and lengths) {
  CAF_CHECK(constant_time_equal("", ""));
  CAF_CHECK(constant_time_equal("secret", "secret"));
  CAF_CHECK(!constant_time_equal("secret", "secreT"));
  CAF_CHECK(!constant_time_equal("secret", "secret2"));
  CAF_CHECK(!constant_time_equal("", "x"));
  CAF_CHECK(constant_time_equal("a\0b"sv, "a\0b"sv));
  CAF_CHECK(!constant_time_equal("a\0b"sv, "a\0c"sv));
}

CAF_TEST(hmac sha256 matches the RFC 4231 known answers) {
  // Test case 2.
  CAF_CHECK_EQUAL(
    to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block size is hashed first.
  CAF_CHECK_EQUAL(
    to_hex(hmac_sha256(std::string(131, '\xaa'),
                       "Test Using Larger Than Block-Size Key - Hash Key "
                       "First")),
    "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // printf '' | openssl dgst -sha256 -hmac ''
  CAF_CHECK_EQUAL(
    to_hex(hmac_sha256("", "")),
    "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

CAF_TEST(base64 encodes the RFC 4648 test vectors) {
  for (auto [raw, encoded] : base64_vectors)
    CAF_CHECK_EQUAL(base64_encode(raw), encoded);
}

CAF_TEST(base64 decodes the RFC 4648 test vectors) {
  for (auto [raw, encoded] : base64_vectors)
    CAF_CHECK_EQUAL(decoded(encoded), raw);
}

CAF_TEST(base64 round trips every byte value and length) {
  std::string all;
  for (int i = 0; i < 256; ++i)
    all.push_back(static_cast<char>(i));
  for (std::size_t len = 0; len <= all.size(); ++len) {
    auto in = all.substr(all.size() - len);
    auto out = base64_decode(base64_encode(in));
    CAF_REQUIRE(out.has_value());
    CAF_CHECK_EQUAL(*out, in);
  }
}

CAF_TEST(base64 rejects wrong lengths) {
  check_undecodable({"Z", "Zg", "Zg=", "Zm9vY", "Zg==="});
}

CAF_TEST(base64 rejects invalid characters) {
  check_undecodable({"Zm9!", "Zm9 ", "Zm\n9v",
                     "-_-_", // base64url is not base64
                     "Zm9\0"sv, "Zm9\xc3"});
}

CAF_TEST(base64 rejects misplaced padding) {
  check_undecodable({"====", "Z===", "Zg=a", "=Zm9", "Zg==Zm9v", "Zm=v"});
}

CAF_TEST(base64 rejects non-canonical bits under the padding) {
  // "Zh==" and "Zm9=" would decode to "f" and "fo" with stray low bits.
  check_undecodable({"Zh==", "Zm9="});
}

// -- whsec ---------------------------------------------------------------------

CAF_TEST(whsec secrets decode with and without the prefix) {
  CAF_CHECK_EQUAL(whsec_hex(sw_secret), sw_key_hex);
  CAF_CHECK_EQUAL(whsec_hex(sw_secret.substr(6)), sw_key_hex);
}

CAF_TEST(whsec secrets with invalid base64 or an empty key are rejected) {
  for (auto secret : {"whsec_", "", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS",
                      "whsec_MfKQ9r8GKYqrTwjU!D8ILPZIo2LaLaSw",
                      "WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                      "whsec_whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
    CAF_CHECK_EQUAL(whsec_hex(secret), "<none>");
}

// -- GitHub --------------------------------------------------------------------

CAF_TEST(github signatures match the documented known answer) {
  CAF_CHECK(verify_github(github_header, github_body, secrets({github_secret})));
}

CAF_TEST(github signatures accept uppercase hex) {
  std::string upper{github_header};
  for (auto i = 7u; i < upper.size(); ++i)
    if (upper[i] >= 'a' && upper[i] <= 'f')
      upper[i] = static_cast<char>(upper[i] - 'a' + 'A');
  CAF_CHECK(verify_github(upper, github_body, secrets({github_secret})));
}

CAF_TEST(github signatures fail under a wrong secret) {
  CAF_CHECK(!verify_github(github_header, github_body,
                           secrets({"It's a Secret to Everybody!"})));
  CAF_CHECK(!verify_github(github_header, github_body, {}));
}

CAF_TEST(github signatures fail for a tampered body) {
  CAF_CHECK(
    !verify_github(github_header, "Hello, World?", secrets({github_secret})));
  CAF_CHECK(
    !verify_github(github_header, "Hello, World! ", secrets({github_secret})));
  CAF_CHECK(!verify_github(github_header, "", secrets({github_secret})));
}

CAF_TEST(github signatures accept any of several rotated secrets) {
  CAF_CHECK(verify_github(github_header, github_body,
                          secrets({"old secret", github_secret})));
  CAF_CHECK(verify_github(github_header, github_body,
                          secrets({github_secret, "new secret"})));
}

CAF_TEST(github signatures with a malformed prefix or digest fail) {
  auto hex = github_header.substr(7);
  auto check = [&](std::string header) {
    CAF_CHECK(!verify_github(header, github_body, secrets({github_secret})));
  };
  check(std::string{hex});
  check("sha1=" + std::string{hex});
  check("SHA256=" + std::string{hex});
  check("sha256:" + std::string{hex});
  check(" sha256=" + std::string{hex});
  check("sha256= " + std::string{hex});
  check(std::string{github_header} + " ");
  check(std::string{github_header} + "00");
  check(std::string{github_header.substr(0, github_header.size() - 1)});
  check(std::string{github_header.substr(0, github_header.size() - 1)} + "g");
  check("sha256=");
  check("");
}

CAF_TEST(github signatures under an empty secret never authenticate) {
  // Anyone can compute this one, so a misconfigured empty secret must not
  // let it through.
  auto forged = "sha256=" + to_hex(hmac_sha256("", github_body));
  CAF_CHECK(!verify_github(forged, github_body, secrets({""})));
}

// -- Standard Webhooks ---------------------------------------------------------

CAF_TEST(standard webhooks accept the known answer) {
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(sw_signature)), "<accepted>");
}

CAF_TEST(standard webhooks accept the signature of a rotated key) {
  auto keys = std::vector<std::string>{"other key", *decode_whsec(sw_secret)};
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(sw_signature), sw_body, keys),
                  "<accepted>");
}

CAF_TEST(standard webhooks accept when only the second signature is valid) {
  auto header = std::string{sw_wrong_signature} + " "
                + std::string{sw_signature};
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(header)), "<accepted>");
  header = std::string{sw_wrong_signature} + "  v1,!!! "
           + std::string{sw_signature} + " ";
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(header)), "<accepted>");
}

CAF_TEST(standard webhooks ignore signatures of other versions) {
  auto v2 = "v2," + std::string{sw_signature.substr(3)};
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(v2)), "no valid signature");
  auto v1a = "v1a," + std::string{sw_signature.substr(3)};
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(v1a)), "no valid signature");
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(v2 + " " + std::string{sw_signature})),
                  "<accepted>");
}

CAF_TEST(standard webhooks reject a wrong key or tampered content) {
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(sw_wrong_signature)),
                  "no valid signature");
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(sw_signature), sw_body,
                             {"not the key"}),
                  "no valid signature");
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(sw_signature), sw_body, {}),
                  "no valid signature");
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(sw_signature), R"({"a":2})"),
                  "no valid signature");
  CAF_CHECK_EQUAL(sw_verdict({"msg_2"sv, sw_ts, sw_signature}),
                  "no valid signature");
  CAF_CHECK_EQUAL(sw_verdict({sw_id, "1700000001"sv, sw_signature}),
                  "no valid signature");
}

CAF_TEST(standard webhooks reject timestamps beyond the tolerance) {
  auto sig = sw_headers(sw_signature);
  CAF_CHECK_EQUAL(sw_verdict(sig, sw_body, sw_keys(), sw_now + 300),
                  "<accepted>");
  CAF_CHECK_EQUAL(sw_verdict(sig, sw_body, sw_keys(), sw_now - 300),
                  "<accepted>");
  CAF_CHECK_EQUAL(sw_verdict(sig, sw_body, sw_keys(), sw_now + 301),
                  "stale timestamp");
  CAF_CHECK_EQUAL(sw_verdict(sig, sw_body, sw_keys(), sw_now - 301),
                  "stale timestamp");
  auto custom = verify_standard_webhook(sig, sw_body, sw_keys(), sw_now + 10,
                                        5);
  CAF_REQUIRE(custom.has_value());
  CAF_CHECK_EQUAL(custom->detail, "stale timestamp");
}

CAF_TEST(the signature of a stale request is judged apart from its timestamp) {
  // What a node whose own clock is off asks: would it pass, clock aside?
  auto sig = sw_headers(sw_signature);
  CAF_CHECK_EQUAL(sw_verdict(sig, sw_body, sw_keys(), sw_now + 7200),
                  "stale timestamp");
  CAF_CHECK(standard_webhook_signed(sig, sw_body, sw_keys()));
  CAF_CHECK(!standard_webhook_signed(sw_headers(sw_wrong_signature), sw_body,
                                     sw_keys()));
  CAF_CHECK(!standard_webhook_signed(sig, sw_body, {"not the key"}));
  CAF_CHECK(!standard_webhook_signed(sig, sw_body, {""}));
  CAF_CHECK(!standard_webhook_signed(sig, R"({"a":2})", sw_keys()));
  CAF_CHECK(!standard_webhook_signed({sw_id, "1700000001"sv, sw_signature},
                                     sw_body, sw_keys()));
  CAF_CHECK(!standard_webhook_signed({sw_id, "+1700000000"sv, sw_signature},
                                     sw_body, sw_keys()));
  CAF_CHECK(!standard_webhook_signed({std::nullopt, sw_ts, sw_signature},
                                     sw_body, sw_keys()));
  CAF_CHECK(!standard_webhook_signed({sw_id, std::nullopt, sw_signature},
                                     sw_body, sw_keys()));
  CAF_CHECK(!standard_webhook_signed({sw_id, sw_ts, std::nullopt}, sw_body,
                                     sw_keys()));
}

CAF_TEST(standard webhooks reject timestamps that overflow or meet odd clocks) {
  CAF_CHECK_EQUAL(sw_verdict({sw_id, "9999999999999999999"sv, sw_signature}),
                  "stale timestamp");
  CAF_CHECK_EQUAL(sw_verdict({sw_id, "9223372036854775807"sv, sw_signature},
                             sw_body, sw_keys(), INT64_MIN),
                  "stale timestamp");
  CAF_CHECK_EQUAL(sw_verdict({sw_id, "0"sv, sw_signature}, sw_body, sw_keys(),
                             INT64_MAX),
                  "stale timestamp");
}

CAF_TEST(standard webhooks reject timestamps that are not plain digits) {
  for (auto ts : {"+1700000000"sv, "-1700000000"sv, " 1700000000"sv,
                  "1700000000 "sv, "1700000000.0"sv, "17e8"sv, "0x6553f100"sv,
                  "1700000000\0"sv, "12345678901234567890"sv})
    CAF_CHECK_EQUAL(sw_verdict({sw_id, ts, sw_signature}),
                    "invalid timestamp");
}

CAF_TEST(standard webhooks name each missing header) {
  standard_webhook_headers hdrs = sw_headers(sw_signature);
  hdrs.id.reset();
  CAF_CHECK_EQUAL(sw_verdict(hdrs), "missing webhook-id");
  hdrs = sw_headers(sw_signature);
  hdrs.timestamp.reset();
  CAF_CHECK_EQUAL(sw_verdict(hdrs), "missing webhook-timestamp");
  hdrs = sw_headers(sw_signature);
  hdrs.signature.reset();
  CAF_CHECK_EQUAL(sw_verdict(hdrs), "missing webhook-signature");
  CAF_CHECK_EQUAL(sw_verdict({""sv, sw_ts, sw_signature}),
                  "missing webhook-id");
  CAF_CHECK_EQUAL(sw_verdict({std::nullopt, std::nullopt, std::nullopt}),
                  "missing webhook-id");
}

CAF_TEST(standard webhook rejections are 401 unauthorized without secrets) {
  auto result = verify_standard_webhook(sw_headers(sw_wrong_signature),
                                        sw_body, sw_keys(), sw_now);
  CAF_REQUIRE(result.has_value());
  CAF_CHECK_EQUAL(result->status, 401);
  CAF_CHECK_EQUAL(result->type, "unauthorized");
  CAF_CHECK_EQUAL(result->title, "Unauthorized");
  CAF_CHECK_EQUAL(result->detail.find("AAAA"), std::string::npos);
  CAF_CHECK_EQUAL(result->detail.find("whsec"), std::string::npos);
}

CAF_TEST(standard webhooks with an empty key never authenticate) {
  auto content = std::string{sw_id} + "." + std::string{sw_ts} + "."
                 + std::string{sw_body};
  auto forged = "v1," + base64_encode(hmac_sha256("", content));
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(forged), sw_body, {""}),
                  "no valid signature");
}

// -- signature header parsing --------------------------------------------------

CAF_TEST(signature headers yield the decoded v1 signatures) {
  auto sigs = parse_signature_header(std::string{sw_signature} + " "
                                     + std::string{sw_wrong_signature});
  CAF_REQUIRE_EQUAL(sigs.size(), 2u);
  CAF_CHECK_EQUAL(base64_encode(sigs[0]), sw_signature.substr(3));
  CAF_CHECK_EQUAL(sigs[1], std::string(32, '\0'));
}

CAF_TEST(signature headers made of garbage yield nothing) {
  for (auto garbage :
       {""sv, " "sv, "      "sv, "v1"sv, "v1,"sv, "v1,!!!"sv, ","sv, ",,,"sv,
        "v1,,"sv, "v1=abc"sv, "v1;hVsFLpmw4Ib/Xm0eZLt3KqYBZdt0U8gdGeuz0EsGv78="sv,
        "v1,hVsFLpmw4Ib/Xm0eZLt3KqYBZdt0U8gdGeuz0EsGv78"sv,
        "v1,hVsFLpmw4Ib/Xm0eZLt3KqYBZdt0U8gdGeuz0EsGv78=="sv,
        "v1,hVsFLpmw4Ib_Xm0eZLt3KqYBZdt0U8gdGeuz0EsGv78="sv,
        "v1,Zm9vYmFy"sv, "\0\0\0"sv, "\t\r\n"sv})
    CAF_CHECK(parse_signature_header(garbage).empty());
}

CAF_TEST(signature headers with a thousand entries stay bounded) {
  std::string header;
  for (int i = 0; i < 1000; ++i)
    header.append(sw_signature).append(" ");
  CAF_CHECK_EQUAL(parse_signature_header(header).size(), 32u);
  header.clear();
  for (int i = 0; i < 1000; ++i)
    header.append("v1,!!! ");
  CAF_CHECK(parse_signature_header(header).empty());
  CAF_CHECK(parse_signature_header(std::string(100000, ' ')).empty());
  CAF_CHECK(parse_signature_header(std::string(100000, ',')).empty());
  CAF_CHECK(parse_signature_header("v1," + std::string(100000, 'A')).empty());
}

CAF_TEST(signature entries past the thirty second are not examined) {
  std::string header;
  for (int i = 0; i < 31; ++i)
    header.append("v2,x ");
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(header + std::string{sw_signature})),
                  "<accepted>");
  header.append("v2,x ");
  CAF_CHECK_EQUAL(sw_verdict(sw_headers(header + std::string{sw_signature})),
                  "no valid signature");
}

// -- CIDR ----------------------------------------------------------------------

CAF_TEST(ipv4 networks contain exactly their addresses) {
  CAF_CHECK(allowed("10.1.2.3", "10.0.0.0/8"));
  CAF_CHECK(allowed("10.255.255.255", "10.0.0.0/8"));
  CAF_CHECK(!allowed("11.0.0.1", "10.0.0.0/8"));
  CAF_CHECK(!allowed("9.255.255.255", "10.0.0.0/8"));
  CAF_CHECK(allowed("192.168.1.77", "192.168.1.64/27"));
  CAF_CHECK(!allowed("192.168.1.96", "192.168.1.64/27"));
}

CAF_TEST(the zero prefix matches every ipv4 address) {
  CAF_CHECK(allowed("0.0.0.0", "0.0.0.0/0"));
  CAF_CHECK(allowed("255.255.255.255", "0.0.0.0/0"));
  CAF_CHECK(allowed("8.8.8.8", "1.2.3.4/0"));
  CAF_CHECK(!allowed("::1", "0.0.0.0/0"));
}

CAF_TEST(a full prefix or plain address matches a single host) {
  CAF_CHECK(allowed("203.0.113.7", "203.0.113.7/32"));
  CAF_CHECK(!allowed("203.0.113.8", "203.0.113.7/32"));
  CAF_CHECK(allowed("127.0.0.1", "127.0.0.1"));
  CAF_CHECK(!allowed("127.0.0.2", "127.0.0.1"));
  auto net = parse_cidr("127.0.0.1");
  CAF_REQUIRE(net.has_value());
  CAF_CHECK_EQUAL(net->prefix, 32);
  CAF_CHECK_EQUAL(net->network, "\x7f\0\0\x01"s);
}

CAF_TEST(ipv6 networks contain exactly their addresses) {
  CAF_CHECK(allowed("::1", "::1/128"));
  CAF_CHECK(allowed("0:0::1", "::1/128"));
  CAF_CHECK(!allowed("::2", "::1/128"));
  CAF_CHECK(allowed("2001:db8::1", "2001:db8::/32"));
  CAF_CHECK(allowed("2001:db8:ffff:ffff::", "2001:db8::/32"));
  CAF_CHECK(allowed("2001:DB8::42", "2001:db8::/32"));
  CAF_CHECK(!allowed("2001:db9::1", "2001:db8::/32"));
  CAF_CHECK(!allowed("10.0.0.1", "::/0"));
  CAF_CHECK(allowed("fe80::1", "::/0"));
  auto net = parse_cidr("::1");
  CAF_REQUIRE(net.has_value());
  CAF_CHECK_EQUAL(net->prefix, 128);
  CAF_CHECK_EQUAL(net->network.size(), 16u);
}

CAF_TEST(ipv4 mapped ipv6 addresses match ipv4 networks) {
  CAF_CHECK(allowed("::ffff:10.1.2.3", "10.0.0.0/8"));
  CAF_CHECK(allowed("::FFFF:10.1.2.3", "10.0.0.0/8"));
  CAF_CHECK(allowed("::ffff:a01:203", "10.0.0.0/8"));
  CAF_CHECK(!allowed("::ffff:11.0.0.1", "10.0.0.0/8"));
  CAF_CHECK(allowed("::ffff:127.0.0.1", "127.0.0.1"));
  // Not mapped: the IPv4-compatible and NAT64 forms are ordinary IPv6.
  CAF_CHECK(!allowed("::10.1.2.3", "10.0.0.0/8"));
  CAF_CHECK(!allowed("64:ff9b::10.1.2.3", "10.0.0.0/8"));
}

CAF_TEST(networks written in the mapped range are ipv4 networks) {
  auto net = parse_cidr("::ffff:10.0.0.0/104");
  CAF_REQUIRE(net.has_value());
  CAF_CHECK_EQUAL(net->prefix, 8);
  CAF_CHECK_EQUAL(net->network, "\x0a\0\0\0"s);
  CAF_CHECK(allowed("10.1.2.3", "::ffff:10.0.0.0/104"));
  CAF_CHECK(allowed("::ffff:10.1.2.3", "::ffff:10.0.0.0/104"));
  CAF_CHECK(allowed("10.1.2.3", "::ffff:10.1.2.3"));
  CAF_CHECK(!allowed("11.1.2.3", "::ffff:10.0.0.0/104"));
}

CAF_TEST(host bits are cleared from networks) {
  auto net = parse_cidr("10.1.2.3/8");
  CAF_REQUIRE(net.has_value());
  CAF_CHECK_EQUAL(net->network, "\x0a\0\0\0"s);
  CAF_CHECK_EQUAL(net->prefix, 8);
  CAF_CHECK(allowed("10.9.9.9", "10.1.2.3/8"));
  auto odd = parse_cidr("192.168.1.77/27");
  CAF_REQUIRE(odd.has_value());
  CAF_CHECK_EQUAL(odd->network, "\xc0\xa8\x01\x40"s);
  auto v6 = parse_cidr("2001:db8:1234::1/28");
  CAF_REQUIRE(v6.has_value());
  CAF_CHECK_EQUAL(to_hex(v6->network), "20010db0000000000000000000000000");
}

CAF_TEST(networks with bad prefixes are rejected) {
  for (auto text :
       {"10.0.0.0/33"sv, "::/129"sv, "10.0.0.0/-1"sv, "10.0.0.0/x"sv,
        "10.0.0.0/"sv, "10.0.0.0/+8"sv, "10.0.0.0/ 8"sv, "10.0.0.0/8 "sv,
        "10.0.0.0/8/8"sv, "10.0.0.0/0008"sv, "10.0.0.0/99999999999"sv,
        "::ffff:10.0.0.0/129"sv})
    CAF_CHECK(!parse_cidr(text));
}

CAF_TEST(networks with bad addresses are rejected) {
  for (auto text :
       {""sv, "/8"sv, "10.0.0/8"sv, "10.0.0.256/8"sv, "10.0.0.0.0/8"sv,
        " 10.0.0.0/8"sv, "localhost/8"sv, "[::1]/128"sv, "fe80::1%eth0/64"sv,
        "10.0.0.1\0/8"sv, "2001:db8:::/32"sv})
    CAF_CHECK(!parse_cidr(text));
}

CAF_TEST(garbage addresses are never allowed) {
  auto everything = nets({"0.0.0.0/0", "::/0"});
  for (auto address :
       {""sv, " "sv, "10.1.2.3 "sv, "10.1.2.3\0"sv, "10.1.2"sv, "localhost"sv,
        "10.1.2.3/8"sv, "[::1]"sv, "::1%lo"sv, "::ffff:10.1.2.3.4"sv,
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"sv})
    CAF_CHECK(!address_allowed(address, everything));
  CAF_CHECK(!address_allowed(std::string(10000, '1'), everything));
  CAF_CHECK(address_allowed("10.1.2.3", everything));
  CAF_CHECK(address_allowed("2001:db8::1", everything));
}

CAF_TEST(no networks allow no addresses) {
  CAF_CHECK(!address_allowed("127.0.0.1", {}));
}

CAF_TEST(inconsistent hand built networks match nothing) {
  CAF_CHECK(!address_allowed("10.0.0.1", {cidr{"\x0a\0\0\0"s, 40}}));
  CAF_CHECK(!address_allowed("10.0.0.1", {cidr{"\x0a\0\0\0"s, -1}}));
  CAF_CHECK(!address_allowed("10.0.0.1", {cidr{"", 0}}));
}
