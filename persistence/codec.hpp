// The command codec's primitives: what the log's entries (command.cpp) and
// the node link's frames (link/frames.cpp) are written with. Integers are
// little-endian of their type's width, strings a u32 length and the bytes.
// The reader never reads past its input and never allocates more than the
// input holds; the record types' field lists are written here once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/record.hpp"

namespace oncegate::persistence::codec {

class writer {
public:
  // Every integer is little-endian, of its type's width.
  template <class T>
  void num(T x) {
    auto v = static_cast<uint64_t>(x);
    for (std::size_t i = 0; i < sizeof(T); ++i)
      out_.push_back(static_cast<char>(static_cast<uint8_t>(v >> (8 * i))));
  }

  void u8(uint8_t x) { num(x); }
  void u16(uint16_t x) { num(x); }
  void u32(uint32_t x) { num(x); }
  void i32(int32_t x) { num(x); }
  void u64(uint64_t x) { num(x); }
  void i64(int64_t x) { num(x); }

  void str(std::string_view x) {
    u32(static_cast<uint32_t>(x.size()));
    out_ += x;
  }

  /// The bytes written, zero-padded to a multiple of 8 (a log entry).
  std::string finish() {
    while (out_.size() % 8 != 0)
      out_.push_back('\0');
    return std::move(out_);
  }

  /// The bytes written as they are (a link frame's payload).
  std::string take() {
    return std::move(out_);
  }

private:
  std::string out_;
};

class reader {
public:
  explicit reader(std::string_view in) : in_(in) {
    // nop
  }

  template <class T>
  bool num(T& x) {
    uint64_t v = 0;
    if (!le(static_cast<int>(sizeof(T)), v))
      return false;
    x = static_cast<T>(v);
    return true;
  }

  bool u8(uint8_t& x) { return num(x); }
  bool u16(uint16_t& x) { return num(x); }
  bool u32(uint32_t& x) { return num(x); }
  bool i32(int32_t& x) { return num(x); }
  bool u64(uint64_t& x) { return num(x); }
  bool i64(int64_t& x) { return num(x); }

  /// A u8 that must be 0 or 1: one encoding per value, so that what
  /// decodes re-encodes to the same bytes.
  bool flag(bool& x) {
    uint8_t v = 0;
    if (!u8(v))
      return false;
    if (v > 1)
      return fail("flag");
    x = v == 1;
    return true;
  }

  /// An enum whose values run from 0 to `last` without gaps.
  template <class E>
  bool enumeration(E& x, E last, const char* what) {
    uint8_t v = 0;
    if (!u8(v))
      return false;
    if (v > static_cast<uint8_t>(last))
      return fail(what);
    x = static_cast<E>(v);
    return true;
  }

  /// A string; its length is checked against the bytes left before
  /// anything is allocated.
  bool str(std::string& x) {
    uint32_t len = 0;
    if (!u32(len))
      return false;
    if (len > in_.size() - pos_)
      return fail("truncated");
    x.assign(in_.substr(pos_, len));
    pos_ += len;
    return true;
  }

  /// A string of at most `max` bytes (`what` names it when it is longer).
  bool str(std::string& x, std::size_t max, const char* what) {
    uint32_t len = 0;
    if (!peek_u32(len))
      return false;
    if (len > max)
      return fail(what);
    return str(x);
  }

  std::size_t remaining() const {
    return in_.size() - pos_;
  }

  /// Nothing follows (a link payload has no padding).
  bool at_end() const {
    return pos_ == in_.size();
  }

  // Only zero padding (less than 8 bytes) may follow the last command.
  bool at_padding() const {
    if (in_.size() - pos_ >= 8)
      return false;
    for (auto i = pos_; i < in_.size(); ++i)
      if (in_[i] != '\0')
        return false;
    return true;
  }

  /// Records why decoding stopped (the first reason wins) and returns
  /// false, so that a check reads `ok || r.fail("why")`.
  bool fail(const char* why) {
    if (why_ == nullptr)
      why_ = why;
    return false;
  }

  /// Why the first failed read failed ("truncated", or what a check
  /// named); nullptr while none did.
  const char* why() const {
    return why_;
  }

private:
  bool le(int n, uint64_t& x) {
    if (static_cast<size_t>(n) > in_.size() - pos_)
      return fail("truncated");
    x = 0;
    for (int i = 0; i < n; ++i)
      x |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return true;
  }

  bool peek_u32(uint32_t& x) {
    auto pos = pos_;
    uint64_t v = 0;
    if (!le(4, v))
      return false;
    pos_ = pos;
    x = static_cast<uint32_t>(v);
    return true;
  }

  std::string_view in_;
  size_t pos_ = 0;
  const char* why_ = nullptr;
};

/// Whether a claim's encoding carries its guards (`claim_guards`).
enum class guard_fields : uint8_t {
  /// No (the log's OGC3 and OGC4; the link's `claim` op).
  none,
  /// Yes, after the other fields (the log's OGC5; the link's guarded
  /// claim, link/frames.hpp).
  present,
};

/// Which fields a record type's encoding has and how strictly they are read.
struct format {
  /// The durable-delivery fields follow the others (the log's OGC4 and the
  /// link; OGC3 entries lack them, and their updates' transitions end at
  /// `release_settled`).
  bool delivery = true;
  /// Strings are held to `record_bounds` (bytes from another node). The
  /// log's decoder does not hold them: every entry passed `malformed` before
  /// it was proposed, and a log a node wrote must stay readable.
  bool bounded = true;
  guard_fields guards = guard_fields::none;
};

/// The link's: every field, every bound (a claim's guards: see
/// link/frames.hpp).
constexpr format link_format{true, true, guard_fields::none};

/// A claim's fields. A claim's initial state is never queued or failed
/// (those come from transitions): the reader refuses them.
void write(writer& w, const claim_request& x, format f = link_format);
bool read(reader& r, claim_request& x, format f = link_format);

/// An update's fields.
void write(writer& w, const record_update& x, format f = link_format);
bool read(reader& r, record_update& x, format f = link_format);

/// A whole record (the log never holds one; always every field).
void write(writer& w, const record& x);
bool read(reader& r, record& x, bool bounded = true);

/// The bytes of the shortest record (all strings empty): a count of
/// records is checked against the bytes left divided by it before any
/// vector is reserved.
constexpr std::size_t min_record_size = 7 * 4 + 1 + 8 + 8 + 2 + 8 + 8 + 4 + 8
                                        + 8 + 4;

} // namespace oncegate::persistence::codec
