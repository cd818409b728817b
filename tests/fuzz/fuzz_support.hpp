// Helpers shared by the libFuzzer targets in this directory. Header-only so
// that scripts/fuzz.sh can build each target from one .cpp file plus the
// product sources it exercises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <openssl/sha.h>

#include "api/payload.hpp"
#include "api/rejection.hpp"

// Aborts the run (libFuzzer records the input as a crash) when an invariant
// does not hold. The message names the invariant so that a crash log says
// which one failed without a debugger.
#define FUZZ_CHECK(cond)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "fuzz invariant violated: %s (%s:%d)\n", #cond,    \
                   __FILE__, __LINE__);                                       \
      std::fflush(stderr);                                                    \
      __builtin_trap();                                                       \
    }                                                                         \
  } while (false)

namespace oncegate::fuzz {

/// Splits a fuzz input into parts. A part is a 2-byte big-endian length
/// followed by that many bytes (cut short at the end of the input); the
/// rest of the input is whatever `rest()` returns. Running out of input
/// yields empty parts, so every byte string is a valid input.
class reader {
public:
  reader(const uint8_t* data, std::size_t size)
    : data_(reinterpret_cast<const char*>(data)), size_(size) {
  }

  uint8_t byte() {
    if (pos_ >= size_)
      return 0;
    return static_cast<uint8_t>(data_[pos_++]);
  }

  std::string_view part() {
    std::size_t n = static_cast<std::size_t>(byte()) << 8;
    n |= byte();
    return take(n);
  }

  std::string_view rest() {
    return take(size_ - pos_);
  }

private:
  std::string_view take(std::size_t n) {
    if (n > size_ - pos_)
      n = size_ - pos_;
    std::string_view out{data_ + pos_, n};
    pos_ += n;
    return out;
  }

  const char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// The fuzz input as text.
inline std::string_view as_text(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Hands the whole input, as text, to each of `checks` in turn.
template <class... Checks>
void check_text(const uint8_t* data, std::size_t size, Checks... checks) {
  auto input = as_text(data, size);
  (checks(input), ...);
}

/// Strict UTF-8: no overlong forms, no encoded surrogates, nothing above
/// U+10FFFF. Written independently of the product's own validator.
inline bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size())
      return false;
    for (std::size_t k = 1; k < n; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_length[n] || cp > 0x10FFFF
        || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n;
  }
  return true;
}

inline bool is_printable_ascii(std::string_view s) {
  for (char c : s)
    if (c < 0x20 || c > 0x7E)
      return false;
  return true;
}

inline std::string sha256_of(std::string_view s) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  return std::string(reinterpret_cast<const char*>(md), sizeof(md));
}

inline bool is_auth_member(std::string_view name) {
  return name == "passphrase" || name == "secret" || name == "token";
}

/// Invariants of a `parse_payload` rejection.
inline void check_payload_rejection(const gateway::rejection& r) {
  FUZZ_CHECK(r.status == 400);
  FUZZ_CHECK(!r.type.empty());
  FUZZ_CHECK(r.type == "malformed-json" || r.type == "invalid-utf8"
             || r.type == "duplicate-member" || r.type == "not-an-object"
             || r.type == "too-deep");
  FUZZ_CHECK(!r.title.empty());
  // The detail ends up in an RFC 9457 JSON body: it must be valid UTF-8 and
  // must not grow with the request body (names are cut at 64 bytes).
  FUZZ_CHECK(is_valid_utf8(r.detail));
  FUZZ_CHECK(r.detail.size() <= 1024);
}

/// No insignificant whitespace outside strings and no raw control
/// characters inside them.
inline bool is_compact_json(std::string_view s) {
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (in_string) {
      if (c < 0x20)
        return false;
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      return false;
    } else if (c == '"') {
      in_string = true;
    }
  }
  return !in_string;
}

/// Invariants of an accepted body: the fingerprint is the SHA-256 of the
/// canonical text, the canonical text is compact valid UTF-8 JSON, and it
/// re-parses to itself with the same fingerprint and the same top-level
/// scalars (auth members gone, numbers in canonical form).
inline void check_payload(const gateway::payload& p) {
  FUZZ_CHECK(p.fingerprint.size() == 32);
  FUZZ_CHECK(p.fingerprint == sha256_of(p.canonical));
  FUZZ_CHECK(p.canonical.size() >= 2);
  FUZZ_CHECK(p.canonical.front() == '{' && p.canonical.back() == '}');
  FUZZ_CHECK(is_valid_utf8(p.canonical));
  FUZZ_CHECK(is_compact_json(p.canonical));

  auto again = gateway::parse_payload(p.canonical);
  auto q = std::get_if<gateway::payload>(&again);
  FUZZ_CHECK(q != nullptr); // the canonical text is itself acceptable
  FUZZ_CHECK(q->canonical == p.canonical); // canonicalisation is idempotent
  FUZZ_CHECK(q->fingerprint == p.fingerprint);

  std::size_t kept = 0;
  for (const auto& [name, f] : p.fields) {
    auto i = q->fields.find(name);
    if (is_auth_member(name)) {
      FUZZ_CHECK(i == q->fields.end()); // secrets never reach the canonical
      continue;
    }
    ++kept;
    FUZZ_CHECK(i != q->fields.end());
    FUZZ_CHECK(i->second.type == f.type);
    if (f.type == gateway::field::kind::number)
      FUZZ_CHECK(i->second.text == gateway::canonical_number(f.text));
    else
      FUZZ_CHECK(i->second.text == f.text);
    if (f.type == gateway::field::kind::string)
      FUZZ_CHECK(is_valid_utf8(f.text));
  }
  FUZZ_CHECK(q->fields.size() == kept);
}

/// Runs `parse_payload` and checks whichever outcome it gives. Returns the
/// payload when accepted.
inline std::optional<gateway::payload> parse_and_check(std::string_view body) {
  auto parsed = gateway::parse_payload(body);
  if (auto why = std::get_if<gateway::rejection>(&parsed)) {
    check_payload_rejection(*why);
    return std::nullopt;
  }
  auto& p = std::get<gateway::payload>(parsed);
  check_payload(p);
  return std::move(p);
}

} // namespace oncegate::fuzz
