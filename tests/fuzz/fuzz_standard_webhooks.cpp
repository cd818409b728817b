// Standard Webhooks (and GitHub) verification and the parsers under them.
//
// Input layout (see README.md):
//   byte 0      flags: bit 0 = webhook-id present, bit 1 = webhook-timestamp
//                      present, bit 2 = webhook-signature present,
//                      bit 3 = replace the timestamp by a fresh one (so the
//                      fuzzer reaches the signature check)
//   [u16be len][webhook-id]        when bit 0 is set
//   [u16be len][webhook-timestamp] when bit 1 is set and bit 3 is not
//   [u16be len][webhook-signature] when bit 2 is set
//   rest        the body
// The whole input is also fed, unsplit, to parse_signature_header,
// base64_decode, decode_whsec and verify_github.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/sha256.hpp"
#include "api/auth.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace gw = oncegate::gateway;

namespace {

constexpr int64_t now_s = 1'700'000'000;
constexpr std::string_view fresh_timestamp = "1700000000";
// The example secret of the Standard Webhooks specification.
constexpr std::string_view whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr std::string_view github_secret = "It's a Secret to Everybody";

const std::vector<std::string>& keys() {
  static const std::vector<std::string> k = [] {
    auto key = gw::decode_whsec(whsec);
    FUZZ_CHECK(key && !key->empty());
    return std::vector<std::string>{*key};
  }();
  return k;
}

void check_signature_header(std::string_view value) {
  auto sigs = gw::parse_signature_header(value);
  FUZZ_CHECK(sigs.size() <= 32); // at most 32 entries are examined
  for (const auto& sig : sigs) {
    FUZZ_CHECK(!sig.empty());
    FUZZ_CHECK(sig.size() == 32);
    // Only exact standard base64 decodes, so the entry is in the header
    // verbatim.
    auto entry = "v1," + gw::base64_encode(sig);
    FUZZ_CHECK(value.find(entry) != std::string_view::npos);
  }
}

void check_base64(std::string_view text) {
  if (auto raw = gw::base64_decode(text)) {
    // Canonical encodings only: decoding then encoding gives the input back.
    FUZZ_CHECK(gw::base64_encode(*raw) == text);
  }
  std::string_view bytes = text.substr(0, 256);
  auto encoded = gw::base64_encode(bytes);
  FUZZ_CHECK(encoded.size() % 4 == 0);
  auto decoded = gw::base64_decode(encoded);
  FUZZ_CHECK(decoded && *decoded == bytes);
  if (auto key = gw::decode_whsec(text))
    FUZZ_CHECK(!key->empty());
}

void check_github(std::string_view input) {
  static const std::vector<std::string> secrets{std::string{github_secret}};
  // A header made of input bytes (64 hex digits is the only shape that can
  // pass) never matches: that would be an HMAC forgery.
  std::string_view header = input.substr(0, 71);
  std::string_view body = input.substr(header.size());
  FUZZ_CHECK(!gw::verify_github(header, body, secrets));
  // The real signature of the same body, in either case, does match...
  auto hex = oncegate::to_hex(gw::hmac_sha256(github_secret, body));
  FUZZ_CHECK(gw::verify_github("sha256=" + hex, body, secrets));
  for (auto& c : hex)
    if (c >= 'a' && c <= 'f')
      c = static_cast<char>(c - 'a' + 'A');
  FUZZ_CHECK(gw::verify_github("sha256=" + hex, body, secrets));
  // ...but not under an empty secret, which anyone could compute.
  auto empty = oncegate::to_hex(gw::hmac_sha256("", body));
  FUZZ_CHECK(!gw::verify_github("sha256=" + empty, body, {std::string{}}));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oncegate::fuzz::check_text(data, size, check_signature_header, check_base64,
                             check_github);

  oncegate::fuzz::reader in{data, size};
  auto flags = in.byte();
  gw::standard_webhook_headers hdrs;
  if (flags & 1)
    hdrs.id = in.part();
  if (flags & 8)
    hdrs.timestamp = fresh_timestamp;
  else if (flags & 2)
    hdrs.timestamp = in.part();
  if (flags & 4)
    hdrs.signature = in.part();
  auto body = in.rest();
  if (hdrs.signature)
    check_signature_header(*hdrs.signature);

  // Input-derived signatures never verify against the fixed key.
  auto why = gw::verify_standard_webhook(hdrs, body, keys(), now_s);
  FUZZ_CHECK(why.has_value());
  FUZZ_CHECK(why->status == 401 && why->type == "unauthorized");
  FUZZ_CHECK(!why->detail.empty());
  // Nor against no key at all, or an empty (misconfigured) key.
  FUZZ_CHECK(gw::verify_standard_webhook(hdrs, body, {}, now_s).has_value());
  FUZZ_CHECK(
    gw::verify_standard_webhook(hdrs, body, {std::string{}}, now_s)
      .has_value());

  // Positive control: the genuine signature, put first in the header, does
  // verify whenever the id is present and the timestamp fresh.
  if (hdrs.id && !hdrs.id->empty() && hdrs.timestamp
      && *hdrs.timestamp == fresh_timestamp) {
    std::string content{*hdrs.id};
    content.append(".").append(*hdrs.timestamp).append(".").append(body);
    auto genuine = "v1," + gw::base64_encode(gw::hmac_sha256(keys()[0], content));
    std::string header = genuine;
    if (hdrs.signature)
      header.append(" ").append(*hdrs.signature);
    auto signed_hdrs = hdrs;
    signed_hdrs.signature = header;
    FUZZ_CHECK(!gw::verify_standard_webhook(signed_hdrs, body, keys(), now_s)
                  .has_value());
  }
  return 0;
}
