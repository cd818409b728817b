#include "api/auth.hpp"
#include "common/enum_text.hpp"

#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "api/url.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::size_t sha256_size = 32;

// SHA-256 works on 64-byte blocks; HMAC (RFC 2104) replaces longer keys by
// their digest, so doing that ourselves keeps every key length within the
// `int` that OpenSSL's one-shot HMAC() takes without changing the result.
constexpr std::size_t sha256_block_size = 64;

// Bounds the work a hostile `webhook-signature` header can cause.
constexpr std::size_t max_signature_entries = 32;

// Decimal digits of an epoch timestamp; 19 digits still fit `int64_t` for
// most values, and the few that overflow are rejected as stale.
constexpr std::size_t max_timestamp_digits = 19;

// Longest textual IPv6 address inet_pton can accept (INET6_ADDRSTRLEN minus
// the terminator), so longer input is refused before copying it.
constexpr std::size_t max_address_length = 45;

// OpenSSL wants non-null pointers even for empty inputs, and an empty
// string_view may carry a null data().
const unsigned char empty_bytes[1] = {0};

const unsigned char* bytes_of(std::string_view s) {
  return s.empty() ? empty_bytes
                   : reinterpret_cast<const unsigned char*>(s.data());
}

rejection unauthorized(std::string detail) {
  return rejection{401, "unauthorized", "Unauthorized", std::move(detail)};
}

// -- base64 -------------------------------------------------------------------

constexpr char base64_alphabet[]
  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The 6-bit value of a base64 digit, or -1 (padding included, which the
// decoder handles separately).
int base64_value(char c) {
  return digit_value(base64_alphabet, c);
}


std::optional<std::string> hex_decode(std::string_view in) {
  if (in.size() % 2 != 0)
    return std::nullopt;
  std::string out;
  out.reserve(in.size() / 2);
  for (std::size_t i = 0; i < in.size(); i += 2) {
    auto hi = hex_value(in[i]);
    auto lo = hex_value(in[i + 1]);
    if (hi < 0 || lo < 0)
      return std::nullopt;
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return out;
}

// -- timestamps ---------------------------------------------------------------

enum class timestamp_check { valid, malformed, stale };

timestamp_check check_timestamp(std::string_view text, int64_t now_s,
                                int64_t tolerance_s) {
  // 19 digits cannot overflow (< 10^19 < 2^64); values beyond INT64_MAX lie
  // far outside any tolerance, hence stale.
  auto digits = parse_digits(text, max_timestamp_digits);
  if (!digits)
    return timestamp_check::malformed;
  uint64_t value = *digits;
  if (value > static_cast<uint64_t>(INT64_MAX) || tolerance_s < 0)
    return timestamp_check::stale;
  auto ts = static_cast<int64_t>(value);
  // Distances via unsigned arithmetic: the difference of two int64 values
  // fits uint64 when taken from the larger, whereas signed subtraction could
  // overflow for extreme `now_s`.
  uint64_t distance = ts >= now_s ? static_cast<uint64_t>(ts)
                                      - static_cast<uint64_t>(now_s)
                                  : static_cast<uint64_t>(now_s)
                                      - static_cast<uint64_t>(ts);
  return distance <= static_cast<uint64_t>(tolerance_s)
           ? timestamp_check::valid
           : timestamp_check::stale;
}

// -- addresses ----------------------------------------------------------------

constexpr std::array<unsigned char, 12> v4_mapped_prefix
  = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool is_v4_mapped(const std::string& v6) {
  return v6.size() == 16
         && std::memcmp(v6.data(), v4_mapped_prefix.data(),
                        v4_mapped_prefix.size())
              == 0;
}

// Raw 4 or 16 bytes of a textual address, exactly as written.
std::optional<std::string> parse_address(std::string_view text) {
  // inet_pton reads a C string, so an embedded NUL would silently cut the
  // input short and accept whatever came before it.
  if (text.empty() || text.size() > max_address_length
      || text.find('\0') != std::string_view::npos)
    return std::nullopt;
  std::string buf{text};
  unsigned char raw[16];
  if (inet_pton(AF_INET, buf.c_str(), raw) == 1)
    return std::string(reinterpret_cast<char*>(raw), 4);
  if (inet_pton(AF_INET6, buf.c_str(), raw) == 1)
    return std::string(reinterpret_cast<char*>(raw), 16);
  return std::nullopt;
}

// Prefix lengths are at most 3 decimal digits, no sign or spaces.
std::optional<int> parse_prefix(std::string_view text) {
  if (auto value = parse_digits(text, 3))
    return static_cast<int>(*value);
  return std::nullopt;
}

bool prefix_matches(const std::string& address, const cidr& net) {
  // `cidr` is a plain struct, so a hand-built one may be inconsistent; it
  // must match nothing rather than read past the network bytes.
  if (address.size() != net.network.size() || net.prefix < 0
      || net.prefix > static_cast<int>(address.size()) * 8)
    return false;
  auto full = net.prefix / 8;
  auto rest = net.prefix % 8;
  if (std::memcmp(address.data(), net.network.data(),
                  static_cast<std::size_t>(full))
      != 0)
    return false;
  if (rest == 0)
    return true;
  auto mask = static_cast<unsigned char>(0xff << (8 - rest));
  auto a = static_cast<unsigned char>(address[static_cast<std::size_t>(full)]);
  auto n = static_cast<unsigned char>(
    net.network[static_cast<std::size_t>(full)]);
  return (a & mask) == (n & mask);
}

} // namespace

// -- modes --------------------------------------------------------------------

constexpr const char* auth_mode_names[] = {
  "none", "token", "github", "standard-webhooks"};
static_assert(enum_table_covers(auth_mode::standard_webhooks, auth_mode_names));

const char* to_string(auth_mode x) {
  return enum_text(x, auth_mode_names);
}

std::optional<auth_mode> parse_auth_mode(std::string_view name) {
  return enum_from_text<auth_mode>(name, auth_mode_names);
}

// -- primitives ---------------------------------------------------------------

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  if (a.empty())
    return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  std::array<unsigned char, sha256_size> hashed_key;
  if (key.size() > sha256_block_size) {
    unsigned int len = 0;
    if (EVP_Digest(key.data(), key.size(), hashed_key.data(), &len,
                   EVP_sha256(), nullptr)
          != 1
        || len != sha256_size)
      return {};
    key = std::string_view(reinterpret_cast<const char*>(hashed_key.data()),
                           hashed_key.size());
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> md;
  unsigned int md_len = 0;
  // A failure (allocation, provider) yields an empty string, which equals no
  // 32-byte signature, so verification fails closed.
  if (HMAC(EVP_sha256(), bytes_of(key), static_cast<int>(key.size()),
           bytes_of(data), data.size(), md.data(), &md_len)
        == nullptr
      || md_len != sha256_size)
    return {};
  return std::string(reinterpret_cast<const char*>(md.data()), md_len);
}

std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0)
    return std::nullopt;
  std::size_t padding = 0;
  if (!in.empty() && in.back() == '=') {
    padding = 1;
    if (in[in.size() - 2] == '=')
      padding = 2;
  }
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    // Only the final quantum may hold padding, so '=' anywhere else fails
    // base64_value below.
    std::size_t digits = last ? 4 - padding : 4;
    uint32_t bits = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      int v = 0;
      if (j < digits) {
        v = base64_value(in[i + j]);
        if (v < 0)
          return std::nullopt;
      }
      bits = (bits << 6) | static_cast<uint32_t>(v);
    }
    // Non-zero bits under the padding would let several texts decode to the
    // same bytes; only the canonical encoding is exact standard base64.
    if ((padding == 1 && last && (bits & 0xff) != 0)
        || (padding == 2 && last && (bits & 0xffff) != 0))
      return std::nullopt;
    out.push_back(static_cast<char>((bits >> 16) & 0xff));
    if (digits > 2)
      out.push_back(static_cast<char>((bits >> 8) & 0xff));
    if (digits > 3)
      out.push_back(static_cast<char>(bits & 0xff));
  }
  return out;
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto byte = [&](std::size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(in[k]));
  };
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t bits = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out.push_back(base64_alphabet[(bits >> 18) & 0x3f]);
    out.push_back(base64_alphabet[(bits >> 12) & 0x3f]);
    out.push_back(base64_alphabet[(bits >> 6) & 0x3f]);
    out.push_back(base64_alphabet[bits & 0x3f]);
  }
  auto left = in.size() - i;
  if (left == 1) {
    uint32_t bits = byte(i) << 16;
    out.push_back(base64_alphabet[(bits >> 18) & 0x3f]);
    out.push_back(base64_alphabet[(bits >> 12) & 0x3f]);
    out.append("==");
  } else if (left == 2) {
    uint32_t bits = (byte(i) << 16) | (byte(i + 1) << 8);
    out.push_back(base64_alphabet[(bits >> 18) & 0x3f]);
    out.push_back(base64_alphabet[(bits >> 12) & 0x3f]);
    out.push_back(base64_alphabet[(bits >> 6) & 0x3f]);
    out.push_back('=');
  }
  return out;
}

// -- GitHub -------------------------------------------------------------------

bool verify_github(std::string_view header, std::string_view body,
                   const std::vector<std::string>& secrets) {
  constexpr std::string_view prefix = "sha256=";
  if (header.size() != prefix.size() + 2 * sha256_size
      || header.substr(0, prefix.size()) != prefix)
    return false;
  auto digest = hex_decode(header.substr(prefix.size()));
  if (!digest)
    return false;
  bool ok = false;
  // No early exit: the time taken should not tell which secret matched.
  for (const auto& secret : secrets) {
    // Anyone can compute an HMAC under the empty key, so an empty (that is,
    // misconfigured) secret must never authenticate a request.
    if (secret.empty())
      continue;
    ok |= constant_time_equal(hmac_sha256(secret, body), *digest);
  }
  return ok;
}

// -- Standard Webhooks --------------------------------------------------------

std::optional<std::string> decode_whsec(std::string_view secret) {
  constexpr std::string_view prefix = "whsec_";
  if (secret.substr(0, prefix.size()) == prefix)
    secret.remove_prefix(prefix.size());
  auto key = base64_decode(secret);
  if (!key || key->empty())
    return std::nullopt;
  return key;
}

std::vector<std::string> parse_signature_header(std::string_view value) {
  std::vector<std::string> result;
  std::size_t examined = 0;
  while (!value.empty() && examined < max_signature_entries) {
    auto end = value.find(' ');
    auto entry = value.substr(0, end);
    value.remove_prefix(end == std::string_view::npos ? value.size()
                                                      : end + 1);
    // Runs of spaces separate entries; they are not entries themselves.
    if (entry.empty())
      continue;
    ++examined;
    auto comma = entry.find(',');
    if (comma == std::string_view::npos || entry.substr(0, comma) != "v1")
      continue;
    // An HMAC-SHA256 is 32 bytes (44 base64 characters); anything else can
    // never match, so it is malformed and not worth decoding.
    auto encoded = entry.substr(comma + 1);
    if (encoded.size() != (sha256_size + 2) / 3 * 4)
      continue;
    if (auto sig = base64_decode(encoded); sig && sig->size() == sha256_size)
      result.push_back(std::move(*sig));
  }
  return result;
}

namespace {

// Whether any `v1` signature of `hdrs` (id, timestamp and signature
// present) is the HMAC of id.timestamp.body under any of `keys`.
bool signed_by(const standard_webhook_headers& hdrs, std::string_view body,
               const std::vector<std::string>& keys) {
  auto signatures = parse_signature_header(*hdrs.signature);
  if (signatures.empty())
    return false;
  std::string content;
  content.reserve(hdrs.id->size() + hdrs.timestamp->size() + body.size() + 2);
  content.append(*hdrs.id).append(".").append(*hdrs.timestamp).append(".");
  content.append(body);
  bool ok = false;
  // No early exit: the time taken should not tell which key or signature
  // matched.
  for (const auto& key : keys) {
    // As for GitHub: the empty key is public knowledge.
    if (key.empty())
      continue;
    auto expected = hmac_sha256(key, content);
    for (const auto& sig : signatures)
      ok |= constant_time_equal(expected, sig);
  }
  return ok;
}

} // namespace

std::optional<rejection>
verify_standard_webhook(const standard_webhook_headers& hdrs,
                        std::string_view body,
                        const std::vector<std::string>& keys, int64_t now_s,
                        int64_t tolerance_s) {
  // An empty value carries no more information than an absent header.
  if (!hdrs.id || hdrs.id->empty())
    return unauthorized("missing webhook-id");
  if (!hdrs.timestamp || hdrs.timestamp->empty())
    return unauthorized("missing webhook-timestamp");
  if (!hdrs.signature || hdrs.signature->empty())
    return unauthorized("missing webhook-signature");
  switch (check_timestamp(*hdrs.timestamp, now_s, tolerance_s)) {
    case timestamp_check::malformed:
      return unauthorized("invalid timestamp");
    case timestamp_check::stale:
      return unauthorized(std::string{stale_timestamp_detail});
    case timestamp_check::valid:
      break;
  }
  if (!signed_by(hdrs, body, keys))
    return unauthorized("no valid signature");
  return std::nullopt;
}

bool standard_webhook_signed(const standard_webhook_headers& hdrs,
                             std::string_view body,
                             const std::vector<std::string>& keys) {
  if (!hdrs.id || hdrs.id->empty() || !hdrs.timestamp || !hdrs.signature
      || parse_digits(*hdrs.timestamp, max_timestamp_digits) == std::nullopt)
    return false;
  return signed_by(hdrs, body, keys);
}

// -- allowlists ---------------------------------------------------------------

std::optional<cidr> parse_cidr(std::string_view text) {
  auto slash = text.find('/');
  auto address = parse_address(text.substr(0, slash));
  if (!address)
    return std::nullopt;
  int max_prefix = static_cast<int>(address->size()) * 8;
  int prefix = max_prefix;
  if (slash != std::string_view::npos) {
    auto parsed = parse_prefix(text.substr(slash + 1));
    if (!parsed || *parsed > max_prefix)
      return std::nullopt;
    prefix = *parsed;
  }
  // Mapped addresses count as IPv4 (see address_allowed), so a network
  // inside the mapped range becomes the IPv4 network it stands for; written
  // as IPv6 it would never meet a single address. A shorter prefix reaches
  // beyond the mapped range and stays an IPv6 network.
  if (is_v4_mapped(*address) && prefix >= 96) {
    address->erase(0, v4_mapped_prefix.size());
    prefix -= 96;
  }
  // Clear the host bits so that equal networks compare equal.
  for (std::size_t i = 0; i < address->size(); ++i) {
    int bit = static_cast<int>(i) * 8;
    if (bit >= prefix)
      (*address)[i] = 0;
    else if (bit + 8 > prefix)
      (*address)[i] = static_cast<char>(
        static_cast<unsigned char>((*address)[i])
        & static_cast<unsigned char>(0xff << (8 - (prefix - bit))));
  }
  return cidr{std::move(*address), prefix};
}

bool address_allowed(std::string_view address, const std::vector<cidr>& nets) {
  auto raw = parse_address(address);
  if (!raw)
    return false;
  if (is_v4_mapped(*raw))
    raw->erase(0, v4_mapped_prefix.size());
  for (const auto& net : nets)
    if (prefix_matches(*raw, net))
      return true;
  return false;
}

bool is_address(std::string_view text) {
  return parse_address(text).has_value();
}

bool is_loopback_address(std::string_view address) {
  static const std::vector<cidr> loopback = {*parse_cidr("127.0.0.0/8"),
                                             *parse_cidr("::1/128")};
  return address_allowed(address, loopback);
}

} // namespace oncegate::gateway
