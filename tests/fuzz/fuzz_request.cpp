// The request -> key/fingerprint path: parse_payload, then select_key.
//
// Input layout (see README.md):
//   byte 0      flags: bit 0 = Idempotency-Key header present,
//                      bit 1 = signed delivery id present
//   [u16be len][header bytes]      when bit 0 is set
//   [u16be len][delivery id bytes] when bit 1 is set
//   rest        the request body
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>

#include "gateway/idempotency_key.hpp"
#include "gateway/payload.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace gw = oncegate::gateway;
using oncegate::fuzz::is_printable_ascii;

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

void check_selection(std::optional<std::string_view> header,
                     std::optional<std::string_view> delivery,
                     const gw::payload& p) {
  auto selected = gw::select_key(header, p, delivery);
  if (auto why = std::get_if<gw::rejection>(&selected)) {
    FUZZ_CHECK(why->status == 400 || why->status == 422);
    FUZZ_CHECK(!why->type.empty());
    FUZZ_CHECK(!why->title.empty());
    FUZZ_CHECK(oncegate::fuzz::is_valid_utf8(why->detail));
    if (why->status == 400)
      FUZZ_CHECK(why->type == "invalid-key");
    else
      FUZZ_CHECK(why->type == "missing-fields" && !header && !delivery
                 && body_key_field(p) == nullptr);
    return;
  }
  auto& key = std::get<gw::idempotency_key>(selected);
  FUZZ_CHECK(!key.value.empty() && key.value.size() <= 255);
  // Priority: header, then delivery id, then body member, then derived.
  if (header) {
    FUZZ_CHECK(key.source == gw::key_source::header);
  } else if (delivery) {
    FUZZ_CHECK(key.source == gw::key_source::webhook_id);
  } else if (auto f = body_key_field(p)) {
    FUZZ_CHECK(key.source == gw::key_source::body);
    FUZZ_CHECK(key.value == f->text);
  } else {
    FUZZ_CHECK(key.source == gw::key_source::derived);
    FUZZ_CHECK(key.value.size() == 64 && is_lower_hex(key.value));
  }
  if (key.source == gw::key_source::header
      || key.source == gw::key_source::webhook_id) {
    FUZZ_CHECK(is_printable_ascii(key.value));
    // Same syntax as parse_key_header, whichever field it came from.
    auto direct = gw::parse_key_header(header ? *header : *delivery);
    auto s = std::get_if<std::string>(&direct);
    FUZZ_CHECK(s != nullptr && *s == key.value);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oncegate::fuzz::reader in{data, size};
  auto flags = in.byte();
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
  check_selection(header, delivery, *p);
  return 0;
}
