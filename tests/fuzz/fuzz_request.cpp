// The request -> key/fingerprint path: parse_payload, then select_key.
//
// Input layout (see README.md):
//   byte 0      flags: bit 0 = Idempotency-Key header present,
//                      bit 1 = signed delivery id present,
//                      bits 2-3 = route auth: 0 none, 1 token, 2 github,
//                                 3 standard-webhooks
//   [u16be len][header bytes]      when bit 0 is set
//   [u16be len][delivery id bytes] when bit 1 is set
//   rest        the request body
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>

#include "common/sha256.hpp"
#include "api/idempotency_key.hpp"
#include "api/payload.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace gw = oncegate::gateway;
using oncegate::fuzz::is_printable_ascii;

constexpr gw::auth_mode auth_modes[] = {gw::auth_mode::none,
                                        gw::auth_mode::token,
                                        gw::auth_mode::github,
                                        gw::auth_mode::standard_webhooks};

namespace {

bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

// The first string member of idempotency_key, trace_id, id, if any.
const gw::field* body_key_field(const gw::payload& p) {
  for (std::string_view name : {"idempotency_key", "trace_id", "id"}) {
    auto i = p.fields.find(name);
    if (i != p.fields.end() && i->second.type == gw::field::kind::string)
      return &i->second;
  }
  return nullptr;
}

// Forwarded keys are header values, and equal only for equal keys.
void check_forwarded(std::string_view key, std::string_view other) {
  auto out = gw::forwarded_key(key);
  FUZZ_CHECK(!out.empty() && out.size() <= 255 && is_printable_ascii(out));
  FUZZ_CHECK(out.front() != ' ' && out.back() != ' ');
  bool hashed = out.rfind("sha256:", 0) == 0;
  FUZZ_CHECK(hashed || out == key);
  FUZZ_CHECK((gw::forwarded_key(other) == out) == (other == key));
}

void check_selection(gw::auth_mode auth,
                     std::optional<std::string_view> header,
                     std::optional<std::string_view> delivery,
                     std::string_view raw_body, const gw::payload& p) {
  gw::key_inputs in;
  in.auth = auth;
  in.header = header;
  in.delivery_id = delivery;
  in.raw_body = raw_body;
  auto selected = gw::select_key(in, p);
  bool signed_id = auth == gw::auth_mode::standard_webhooks;
  bool open = auth == gw::auth_mode::none || auth == gw::auth_mode::token;
  if (auto why = std::get_if<gw::rejection>(&selected)) {
    FUZZ_CHECK(auth != gw::auth_mode::github); // a body always has a hash
    FUZZ_CHECK(why->status == 400 || why->status == 422);
    FUZZ_CHECK(!why->type.empty());
    FUZZ_CHECK(!why->title.empty());
    FUZZ_CHECK(oncegate::fuzz::is_valid_utf8(why->detail));
    if (why->status == 400)
      FUZZ_CHECK(why->type == "invalid-key");
    else
      FUZZ_CHECK(why->type == "missing-fields" && open && !header
                 && body_key_field(p) == nullptr);
    return;
  }
  auto& key = std::get<gw::idempotency_key>(selected);
  FUZZ_CHECK(!key.value.empty() && key.value.size() <= 255);
  // Signed routes: only what the signature covers. Others: header, then
  // body member, then derived; a delivery id is never looked at there.
  if (auth == gw::auth_mode::github) {
    FUZZ_CHECK(key.source == gw::key_source::github_body);
    FUZZ_CHECK(key.value == oncegate::to_hex(oncegate::sha256(raw_body)));
  } else if (signed_id) {
    FUZZ_CHECK(delivery && key.source == gw::key_source::webhook_id);
  } else if (header) {
    FUZZ_CHECK(key.source == gw::key_source::header);
  } else if (auto f = body_key_field(p)) {
    FUZZ_CHECK(key.source == gw::key_source::body);
    FUZZ_CHECK(key.value == f->text);
  } else {
    FUZZ_CHECK(key.source == gw::key_source::derived);
  }
  if (key.source == gw::key_source::derived
      || key.source == gw::key_source::github_body)
    FUZZ_CHECK(key.value.size() == 64 && is_lower_hex(key.value));
  if (key.source == gw::key_source::header
      || key.source == gw::key_source::webhook_id) {
    FUZZ_CHECK(is_printable_ascii(key.value));
    // Same syntax as parse_key_header, whichever field it came from.
    auto direct = gw::parse_key_header(signed_id ? *delivery : *header);
    auto s = std::get_if<std::string>(&direct);
    FUZZ_CHECK(s != nullptr && *s == key.value);
  }
  check_forwarded(key.value, header ? *header : raw_body);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oncegate::fuzz::reader in{data, size};
  auto flags = in.byte();
  auto auth = auth_modes[(flags >> 2) & 3];
  std::optional<std::string_view> header;
  std::optional<std::string_view> delivery;
  if (flags & 1)
    header = in.part();
  if (flags & 2)
    delivery = in.part();
  auto body = in.rest();

  auto p = oncegate::fuzz::parse_and_check(body);
  if (!p)
    return 0;
  check_selection(auth, header, delivery, body, *p);
  return 0;
}
