#define CAF_SUITE api.idempotency_key
#include "caf/test/unit_test.hpp"

#include "api/idempotency_key.hpp"

#include <string>
#include <string_view>

#include "common/sha256.hpp"
#include "tests/api/take_or_fail.hpp"
#include "tests/common/checks.hpp"

using namespace oncegate::gateway;
using oncegate::sha256;
using oncegate::to_hex;
using oncegate::test::check_rows;
using oncegate::test::take_or_fail;

namespace {

// printf 'v1|BINANCE|BTCUSDT|buy|1700000000000' | sha256sum
constexpr std::string_view binance_buy_key
  = "26c2d4bdcb3f5acf7d75c8a418f85442a0fed6912d0ea988b0a3619dff156334";

// The parsed key, or the rejection type in angle brackets.
std::string header_key(std::string_view raw) {
  auto result = parse_key_header(raw);
  if (auto key = std::get_if<std::string>(&result))
    return *key;
  return "<" + std::get<rejection>(result).type + ">";
}

// Checks that each header value is refused as a key.
void check_invalid_keys(std::initializer_list<std::string_view> headers) {
  for (auto header : headers)
    CAF_CHECK_EQUAL(header_key(header), "<invalid-key>");
}

field str(std::string text) {
  return field{field::kind::string, std::move(text)};
}

field num(std::string text) {
  return field{field::kind::number, std::move(text)};
}

// -1 stands for "no value" so that checks print both sides.
int64_t ts(const field& f) {
  return parse_timestamp_ms(f).value_or(-1);
}

// The timestamp in a number member written `text`.
int64_t number_ts(std::string_view text) {
  return ts(num(std::string{text}));
}

// The timestamp in a string member holding `text`.
int64_t string_ts(std::string_view text) {
  return ts(str(std::string{text}));
}

payload body_of(std::string_view json) {
  return take_or_fail<payload>(parse_payload(json), "test body rejected");
}

std::string derived(std::string_view json) {
  auto result = derive_key(body_of(json));
  if (auto key = std::get_if<std::string>(&result))
    return *key;
  return "<" + std::get<rejection>(result).detail + ">";
}

rejection derive_failure(std::string_view json) {
  return take_or_fail<rejection>(derive_key(body_of(json)), "key derived");
}

// The inputs of a request on a route with `auth`; the raw body is `json`.
key_inputs on_route(auth_mode auth, std::optional<std::string_view> header,
                    std::string_view json,
                    std::optional<std::string_view> delivery_id
                    = std::nullopt) {
  key_inputs in;
  in.auth = auth;
  in.header = header;
  in.delivery_id = delivery_id;
  in.raw_body = json;
  return in;
}

// The inputs of a request on a route without auth.
key_inputs no_auth(std::optional<std::string_view> header,
                   std::string_view json) {
  return on_route(auth_mode::none, header, json);
}

idempotency_key selected(const key_inputs& in) {
  return take_or_fail<idempotency_key>(select_key(in, body_of(in.raw_body)),
                                 "no key selected");
}

rejection select_failure(const key_inputs& in) {
  return take_or_fail<rejection>(select_key(in, body_of(in.raw_body)),
                           "key selected");
}

std::string hashed(std::string_view key) {
  return "sha256:" + to_hex(sha256(key));
}

constexpr std::string_view trade
  = R"({"exchange":"BINANCE","symbol":"BTCUSDT","action":"buy",)"
    R"("timestamp":1700000000})";

} // namespace

// -- key sources --------------------------------------------------------------

CAF_TEST(key sources have their contract names) {
  CAF_CHECK_EQUAL(std::string{to_string(key_source::header)}, "header");
  CAF_CHECK_EQUAL(std::string{to_string(key_source::webhook_id)},
                  "webhook-id");
  CAF_CHECK_EQUAL(std::string{to_string(key_source::body)}, "body");
  CAF_CHECK_EQUAL(std::string{to_string(key_source::derived)}, "derived");
  CAF_CHECK_EQUAL(std::string{to_string(key_source::github_body)},
                  "github-body");
  CAF_CHECK_EQUAL(std::string{to_string(key_source::text_body)},
                  "text-body");
}

// -- Idempotency-Key header ---------------------------------------------------

CAF_TEST(a header key may be a structured field string with escapes) {
  check_rows(header_key, {{R"("abc")", "abc"},
                          {R"("a \"quoted\" \\ key")", R"(a "quoted" \ key)"},
                          {R"(  "abc"  )", "abc"},
                          {R"("a\b")", "<invalid-key>"},
                          {R"("abc)", "<invalid-key>"},
                          {R"("abc\")", "<invalid-key>"},
                          {R"("abc"x)", "<invalid-key>"},
                          {R"("abc";p=1)", "<invalid-key>"}});
}

CAF_TEST(a header key may be a bare token) {
  check_rows(header_key, {{"abc", "abc"},
                          {" \tabc\t ", "abc"},
                          {"550e8400-e29b-41d4-a716-446655440000",
                           "550e8400-e29b-41d4-a716-446655440000"},
                          {"a+b/c=:*", "a+b/c=:*"},
                          {"abc def", "<invalid-key>"},
                          {"abc,def", "<invalid-key>"},
                          {"a\"bc", "<invalid-key>"}});
}

CAF_TEST(a header key holds at most 255 characters) {
  CAF_CHECK_EQUAL(header_key(std::string(255, 'k')), std::string(255, 'k'));
  CAF_CHECK_EQUAL(header_key(std::string(256, 'k')), "<invalid-key>");
  CAF_CHECK_EQUAL(header_key("\"" + std::string(255, 'k') + "\""),
                  std::string(255, 'k'));
  CAF_CHECK_EQUAL(header_key("\"" + std::string(256, 'k') + "\""),
                  "<invalid-key>");
  // The limit applies to the key, after unescaping.
  CAF_CHECK_EQUAL(header_key("\"" + std::string(254, 'k') + "\\\\\""),
                  std::string(254, 'k') + "\\");
  auto result = parse_key_header(std::string(256, 'k'));
  auto r = std::get_if<rejection>(&result);
  CAF_REQUIRE(r != nullptr);
  CAF_CHECK_EQUAL(r->status, 400);
  CAF_CHECK_EQUAL(r->detail, "key longer than 255 characters");
}

CAF_TEST(an empty header key is rejected) {
  check_invalid_keys({"", "   ", R"("")"});
}

CAF_TEST(control characters in a header key are rejected) {
  check_invalid_keys({"ab\x01" "c", "\"ab\x01" "c\"", "abc\x7f", "abc\r\n",
                      "\"a\tb\""});
}

CAF_TEST(non ASCII header keys are rejected) {
  check_invalid_keys({"caf\xc3\xa9", "\"caf\xc3\xa9\""});
}

// -- timestamps ---------------------------------------------------------------

CAF_TEST(epoch seconds and milliseconds are told apart by magnitude) {
  check_rows<int64_t>(number_ts, {{"1700000000", 1700000000000},
                                  {"1700000000000", 1700000000000},
                                  {"0", 0},
                                  {"99999999999", 99999999999000},
                                  {"100000000000", 100000000000},
                                  {"1.7e9", 1700000000000},
                                  {"1.7e12", 1700000000000}});
}

CAF_TEST(fractional epoch seconds round to the nearest millisecond) {
  check_rows<int64_t>(number_ts, {{"1700000000.5", 1700000000500},
                                  {"1700000000.123", 1700000000123},
                                  {"1700000000.1234", 1700000000123},
                                  {"1700000000.1235", 1700000000124},
                                  {"1700000000.9996", 1700000001000},
                                  {"1700000000000.6", 1700000000001}});
}

CAF_TEST(numeric strings are epoch timestamps) {
  check_rows<int64_t>(string_ts, {{"1700000000", 1700000000000},
                                  {" 1700000000000 ", 1700000000000},
                                  {"1700000000.25", 1700000000250}});
}

CAF_TEST(negative or unparseable epoch values are refused) {
  for (const auto& f :
       {num("-1"), num("-0.5"), str("-1700000000"), str("1700000000x"),
        str("17e"), str("1."), str(""), num("1e300"),
        field{field::kind::boolean, "true"}, field{field::kind::null, ""}})
    CAF_CHECK_EQUAL(ts(f), -1);
}

CAF_TEST(ISO 8601 timestamps need an offset) {
  check_rows<int64_t>(string_ts, {{"2023-11-14T22:13:20Z", 1700000000000},
                                  {"2023-11-14t22:13:20z", 1700000000000},
                                  {"2023-11-14 22:13:20Z", 1700000000000},
                                  {"2023-11-15T00:13:20+02:00", 1700000000000},
                                  {"2023-11-15T00:13:20+0200", 1700000000000},
                                  {"2023-11-14T16:43:20-05:30", 1700000000000},
                                  {"2023-11-14T16:43:20-0530", 1700000000000},
                                  {"1970-01-01T00:00:00Z", 0},
                                  {"1969-12-31T23:00:00-01:00", 0},
                                  {"2100-03-01T00:00:00Z", 4107542400000},
                                  {"9999-12-31T23:59:59Z", 253402300799000},
                                  {"2023-11-14T22:13:20", -1},
                                  {"2023-11-14T22:13:20+02", -1},
                                  {"2023-11-14T22:13:20+2:00", -1},
                                  {"2023-11-14T22:13:20Zx", -1},
                                  {"2023-11-14", -1},
                                  {"1969-12-31T23:59:59Z", -1}});
}

CAF_TEST(ISO 8601 fractional seconds round to the nearest millisecond) {
  check_rows<int64_t>(string_ts,
                      {{"2023-11-14T22:13:20.5Z", 1700000000500},
                       {"2023-11-14T22:13:20.123Z", 1700000000123},
                       {"2023-11-14T22:13:20.123456+00:00", 1700000000123},
                       {"2023-11-14T22:13:20.1235Z", 1700000000124},
                       {"2023-11-14T22:13:20.9999Z", 1700000001000},
                       {"2023-11-14T22:13:20.Z", -1}});
}

CAF_TEST(ISO 8601 dates and times are range checked) {
  check_rows<int64_t>(string_ts,
                      {{"2024-02-29T12:00:00Z", 1709208000000},
                       {"2000-02-29T00:00:00Z", 951782400000},
                       {"2023-02-29T00:00:00Z", -1},
                       {"1900-02-29T00:00:00Z", -1},
                       {"2024-02-30T00:00:00Z", -1},
                       {"2024-04-31T00:00:00Z", -1},
                       {"2024-13-01T00:00:00Z", -1},
                       {"2024-00-01T00:00:00Z", -1},
                       {"2024-01-00T00:00:00Z", -1},
                       {"2024-01-01T24:00:00Z", -1},
                       {"2024-01-01T00:60:00Z", -1},
                       {"2024-01-01T00:00:60Z", -1},
                       {"2024-01-01T00:00:00+24:00", -1},
                       {"2024-01-01T00:00:00+23:60", -1},
                       {"2024-01-01T00:00:00+23:59", 1703980860000},
                       {"2024-01-01T00:00:00-23:59", 1704153540000}});
}

// -- derived keys -------------------------------------------------------------

CAF_TEST(the derived key is the hex sha256 of the versioned fields) {
  CAF_CHECK_EQUAL(derived(trade), binance_buy_key);
}

CAF_TEST(trimming and case rules give the same derived key) {
  CAF_CHECK_EQUAL(derived(R"({"exchange":" binance\t","symbol":"btcUSDT ",)"
                          R"("action":" BUY","timestamp":"1700000000000"})"),
                  binance_buy_key);
  CAF_CHECK_EQUAL(derived(R"({"exchange":"Binance","symbol":"BtcUsdt",)"
                          R"("action":"Buy",)"
                          R"("timestamp":"2023-11-15T00:13:20+02:00",)"
                          R"("price":"37000"})"),
                  binance_buy_key);
  CAF_CHECK_EQUAL(derived(R"({"exchange":"BINANCE","symbol":"BTCUSDT",)"
                          R"("action":"buy","timestamp":1700000000.0004})"),
                  binance_buy_key);
  CAF_CHECK(derived(R"({"exchange":"BINANCE","symbol":"BTCUSDT",)"
                    R"("action":"sell","timestamp":1700000000})")
            != binance_buy_key);
}

CAF_TEST(a bar inside a field cannot move a field boundary) {
  // v1 joined "BINANCE|BTC","USDT" and "BINANCE","BTC|USDT" into one
  // preimage. A field holding `|` takes v2, which length-prefixes fields:
  // printf 'v2|11:BINANCE|BTC|4:USDT|3:buy|13:1700000000000' | sha256sum
  auto a = derived(R"({"exchange":"BINANCE|BTC","symbol":"USDT",)"
                   R"("action":"buy","timestamp":1700000000})");
  // printf 'v2|7:BINANCE|8:BTC|USDT|3:buy|13:1700000000000' | sha256sum
  auto b = derived(R"({"exchange":"BINANCE","symbol":"BTC|USDT",)"
                   R"("action":"buy","timestamp":1700000000})");
  CAF_CHECK_NOT_EQUAL(a, b);
  CAF_CHECK_EQUAL(
    a, "c521b81fcbe93cce248d8378d6e1fb2b9ddeb0f351eaed065e768c3987709b72");
  CAF_CHECK_EQUAL(
    b, "37ff8cbdf1dfa3c96cea05c6e14327765c37c4c669379e8c75d9f5d063c67a16");
  // printf 'v2|7:BINANCE|7:BTCUSDT|8:buy|sell|13:1700000000000' | sha256sum
  CAF_CHECK_EQUAL(
    derived(R"({"exchange":"binance","symbol":"btcusdt",)"
            R"("action":" BUY|sell ","timestamp":1700000000})"),
    "3270f8b2e701b0920a3479f8c9a05b827d8a3f5c3ea27988594440e6147cf331");
}

CAF_TEST(fields without a bar keep the v1 derivation) {
  // Every key derived before v2 existed is derived the same way still.
  CAF_CHECK_EQUAL(derived(trade), binance_buy_key);
  CAF_CHECK_EQUAL(derived(R"({"exchange":"BINANCE:X","symbol":"BTC USDT",)"
                          R"("action":"buy","timestamp":1700000000})"),
                  to_hex(sha256("v1|BINANCE:X|BTC USDT|buy|1700000000000")));
}

CAF_TEST(missing fields are all named in a fixed order) {
  auto r = derive_failure("{}");
  CAF_CHECK_EQUAL(r.status, 422);
  CAF_CHECK_EQUAL(r.type, "missing-fields");
  CAF_CHECK_EQUAL(r.detail,
                  "missing or invalid: exchange, symbol, action, timestamp");
  CAF_CHECK_EQUAL(derive_failure(R"({"timestamp":"x","exchange":"B",)"
                                 R"("action":"buy"})")
                    .detail,
                  "missing or invalid: symbol, timestamp");
}

CAF_TEST(empty non string or unparseable fields count as missing) {
  CAF_CHECK_EQUAL(derive_failure(R"({"exchange":"  ","symbol":5,)"
                                 R"("action":"buy","timestamp":-1})")
                    .detail,
                  "missing or invalid: exchange, symbol, timestamp");
  CAF_CHECK_EQUAL(derive_failure(R"({"exchange":"B","symbol":"S",)"
                                 R"("action":null,"timestamp":true})")
                    .detail,
                  "missing or invalid: action, timestamp");
  // Nested members are not top-level fields.
  CAF_CHECK_EQUAL(derive_failure(R"({"exchange":"B","symbol":"S",)"
                                 R"("action":"buy","t":{"timestamp":1}})")
                    .detail,
                  "missing or invalid: timestamp");
}

// -- key selection ------------------------------------------------------------

CAF_TEST(the header beats every body member) {
  auto key = selected(no_auth(std::string_view{"\"from-header\""},
                              R"({"idempotency_key":"k","trace_id":"t",)"
                              R"("id":"i","exchange":"B","symbol":"S",)"
                              R"("action":"buy","timestamp":1})"));
  CAF_CHECK_EQUAL(key.value, "from-header");
  CAF_CHECK(key.source == key_source::header);
}

CAF_TEST(a malformed header is rejected and never falls back) {
  auto r = select_failure(no_auth(std::string_view{"bad key"},
                                  R"({"idempotency_key":"k"})"));
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "invalid-key");
  CAF_CHECK_EQUAL(select_failure(no_auth(std::string_view{""}, trade)).type,
                  "invalid-key");
}

CAF_TEST(body members are tried in priority order) {
  auto key = selected(no_auth(std::nullopt, R"({"id":"i","trace_id":"t",)"
                                            R"("idempotency_key":"k"})"));
  CAF_CHECK_EQUAL(key.value, "k");
  CAF_CHECK(key.source == key_source::body);
  CAF_CHECK_EQUAL(
    selected(no_auth(std::nullopt, R"({"id":"i","trace_id":"t"})")).value, "t");
  CAF_CHECK_EQUAL(selected(no_auth(std::nullopt, R"({"id":"i"})")).value, "i");
}

CAF_TEST(non string body members are skipped) {
  auto key
    = selected(no_auth(std::nullopt, R"({"idempotency_key":7,"id":"i"})"));
  CAF_CHECK_EQUAL(key.value, "i");
  CAF_CHECK(key.source == key_source::body);
  std::string body = R"({"id":42,"trace_id":null,"idempotency_key":{"a":1},)";
  body += trade.substr(1);
  key = selected(no_auth(std::nullopt, body));
  CAF_CHECK_EQUAL(key.value, binance_buy_key);
  CAF_CHECK(key.source == key_source::derived);
}

CAF_TEST(body member keys must hold 1 to 255 bytes) {
  auto r = select_failure(
    no_auth(std::nullopt, R"({"idempotency_key":"","id":"i"})"));
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "invalid-key");
  std::string long_key(256, 'k');
  CAF_CHECK_EQUAL(select_failure(no_auth(std::nullopt, R"({"trace_id":")"
                                                         + long_key + R"("})"))
                    .type,
                  "invalid-key");
  long_key.pop_back();
  CAF_CHECK_EQUAL(selected(no_auth(std::nullopt, R"({"trace_id":")"
                                                   + long_key + R"("})"))
                    .value,
                  long_key);
}

CAF_TEST(the key is derived when nothing else is present) {
  auto key = selected(no_auth(std::nullopt, trade));
  CAF_CHECK_EQUAL(key.value, binance_buy_key);
  CAF_CHECK(key.source == key_source::derived);
  auto r = select_failure(no_auth(std::nullopt, R"({"symbol":"S"})"));
  CAF_CHECK_EQUAL(r.status, 422);
  CAF_CHECK_EQUAL(r.type, "missing-fields");
  CAF_CHECK_EQUAL(r.detail, "missing or invalid: exchange, action, timestamp");
}

// -- signed routes ------------------------------------------------------------

CAF_TEST(a standard webhooks route keys on the webhook id alone) {
  constexpr std::string_view body = R"({"idempotency_key":"k","id":"i"})";
  auto key = selected(on_route(auth_mode::standard_webhooks,
                               std::string_view{"\"from-header\""}, body,
                               std::string_view{"msg_1"}));
  CAF_CHECK_EQUAL(key.value, "msg_1");
  CAF_CHECK(key.source == key_source::webhook_id);
  // The header is not signed: not even a malformed one is looked at.
  key = selected(on_route(auth_mode::standard_webhooks,
                          std::string_view{"bad key"}, body,
                          std::string_view{"msg_1"}));
  CAF_CHECK_EQUAL(key.value, "msg_1");
  key = selected(on_route(auth_mode::standard_webhooks, std::nullopt, trade,
                          std::string_view{"msg_2"}));
  CAF_CHECK_EQUAL(key.value, "msg_2");
  CAF_CHECK(key.source == key_source::webhook_id);
}

CAF_TEST(a standard webhooks route without a valid webhook id is refused) {
  auto r = select_failure(on_route(auth_mode::standard_webhooks,
                                   std::string_view{"k"}, trade));
  CAF_CHECK_EQUAL(r.status, 400);
  CAF_CHECK_EQUAL(r.type, "invalid-key");
  CAF_CHECK_EQUAL(select_failure(on_route(auth_mode::standard_webhooks,
                                          std::nullopt, trade,
                                          std::string_view{"a b"}))
                    .type,
                  "invalid-key");
}

CAF_TEST(a text route keys on the header or the hash of its bytes) {
  // A TradingView alert message: not JSON, no members.
  constexpr std::string_view alert = "BTCUSDT buy 42000 {{timenow}}";
  auto in = on_route(auth_mode::token, std::nullopt, alert);
  in.text = true;
  auto body = text_payload(alert);
  CAF_CHECK_EQUAL(body.canonical, alert);
  CAF_CHECK(body.fields.empty());
  auto key = take_or_fail<idempotency_key>(select_key(in, body), "no key");
  CAF_CHECK_EQUAL(key.value, to_hex(sha256(alert)));
  CAF_CHECK(key.source == key_source::text_body);
  // The header wins, and a malformed one is refused (never the hash).
  in.header = std::string_view{"tv-1"};
  key = take_or_fail<idempotency_key>(select_key(in, body), "no key");
  CAF_CHECK_EQUAL(key.value, "tv-1");
  CAF_CHECK(key.source == key_source::header);
  in.header = std::string_view{"bad key"};
  CAF_CHECK_EQUAL(take_or_fail<rejection>(select_key(in, body), "a key").type,
                  "invalid-key");
  // A JSON body on a text route is bytes too: members name nothing.
  constexpr std::string_view json = R"({"idempotency_key":"k"})";
  auto as_text = on_route(auth_mode::none, std::nullopt, json);
  as_text.text = true;
  key = take_or_fail<idempotency_key>(select_key(as_text, text_payload(json)),
                                "no key");
  CAF_CHECK_EQUAL(key.value, to_hex(sha256(json)));
}

CAF_TEST(a github route keys on the hash of the signed body) {
  constexpr std::string_view body = R"({"a":1})";
  // printf '{"a":1}' | sha256sum
  constexpr std::string_view body_hash
    = "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862";
  auto key = selected(on_route(auth_mode::github, std::nullopt, body,
                               std::string_view{"delivery-1"}));
  CAF_CHECK_EQUAL(key.value, body_hash);
  CAF_CHECK(key.source == key_source::github_body);
  // Neither the unsigned delivery id nor an Idempotency-Key header nor a
  // body member changes it.
  CAF_CHECK_EQUAL(selected(on_route(auth_mode::github,
                                    std::string_view{"other"}, body,
                                    std::string_view{"delivery-2"}))
                    .value,
                  body_hash);
  CAF_CHECK_EQUAL(selected(on_route(auth_mode::github,
                                    std::string_view{"bad key"}, body))
                    .value,
                  body_hash);
  auto with_member = std::string{R"({"idempotency_key":"k"})"};
  CAF_CHECK_EQUAL(selected(on_route(auth_mode::github, std::nullopt,
                                    with_member))
                    .value,
                  to_hex(sha256(with_member)));
  // Another byte string is another signed body, hence another key.
  CAF_CHECK_NOT_EQUAL(selected(on_route(auth_mode::github, std::nullopt,
                                        R"({ "a":1})"))
                        .value,
                      body_hash);
}

CAF_TEST(routes without signatures ignore a delivery id) {
  for (auto auth : {auth_mode::none, auth_mode::token}) {
    auto key = selected(on_route(auth, std::nullopt, R"({"id":"i"})",
                                 std::string_view{"msg_1"}));
    CAF_CHECK_EQUAL(key.value, "i");
    CAF_CHECK(key.source == key_source::body);
    key = selected(on_route(auth, std::string_view{"h"}, R"({"id":"i"})",
                            std::string_view{"msg_1"}));
    CAF_CHECK_EQUAL(key.value, "h");
    CAF_CHECK(key.source == key_source::header);
  }
}

// -- forwarded keys -----------------------------------------------------------

CAF_TEST(a bare printable key is forwarded as it is) {
  for (std::string_view key :
       {"k1", "a+b/c=:*", "550e8400-e29b-41d4-a716-446655440000",
        "a b", "x sha256:y",
        "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"})
    CAF_CHECK_EQUAL(forwarded_key(key), key);
  std::string longest(255, 'k');
  CAF_CHECK_EQUAL(forwarded_key(longest), longest);
}

CAF_TEST(keys with spaces at either end are forwarded as their hash) {
  // printf ' k1 ' | sha256sum
  CAF_CHECK_EQUAL(forwarded_key(" k1 "),
                  "sha256:86e7020aa427ddb7850a0166a78db3290cf9faf923ba36ff4aa"
                  "9071b591143cd");
  CAF_CHECK_EQUAL(forwarded_key("k1 "), hashed("k1 "));
  CAF_CHECK_EQUAL(forwarded_key(" k1"), hashed(" k1"));
  CAF_CHECK_EQUAL(forwarded_key(" "), hashed(" "));
  // `k1`, `" k1 "` and `"k1 "` are three keys here, and three upstream.
  CAF_CHECK_NOT_EQUAL(forwarded_key("k1"), forwarded_key(" k1 "));
  CAF_CHECK_NOT_EQUAL(forwarded_key("k1"), forwarded_key("k1 "));
  CAF_CHECK_NOT_EQUAL(forwarded_key(" k1 "), forwarded_key("k1 "));
}

CAF_TEST(keys that are not printable ASCII are forwarded as their hash) {
  for (std::string_view key : {"caf\xc3\xa9", "a\tb", "a\nb", "\x7f", ""})
    CAF_CHECK_EQUAL(forwarded_key(key), hashed(key));
}

CAF_TEST(keys with the reserved prefix are forwarded as their hash) {
  // Else a sender could name the forwarded form of another key.
  auto other = forwarded_key("caf\xc3\xa9");
  CAF_CHECK_EQUAL(forwarded_key(other), hashed(other));
  CAF_CHECK_NOT_EQUAL(forwarded_key(other), other);
  CAF_CHECK_EQUAL(forwarded_key("sha256:"), hashed("sha256:"));
  CAF_CHECK_EQUAL(forwarded_key("SHA256:x"), hashed("SHA256:x"));
  CAF_CHECK_EQUAL(forwarded_key("Sha256:x"), hashed("Sha256:x"));
  CAF_CHECK_EQUAL(forwarded_key("sha256"), "sha256");
  CAF_CHECK_EQUAL(forwarded_key("sha25:x"), "sha25:x");
}

CAF_TEST(forwarded keys are header values of at most 255 characters) {
  std::string longest(255, '\xff');
  for (std::string_view key : {std::string_view{"k1"}, std::string_view{" k"},
                               std::string_view{"\x01"},
                               std::string_view{longest}}) {
    auto out = forwarded_key(key);
    CAF_CHECK(!out.empty() && out.size() <= 255);
    CAF_CHECK(out.front() != ' ' && out.back() != ' ');
    for (char c : out)
      CAF_CHECK(c >= 0x20 && c <= 0x7E);
  }
}
