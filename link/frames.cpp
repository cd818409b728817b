#include "link/frames.hpp"

#include <algorithm>

#include "common/enum_text.hpp"
#include "persistence/codec.hpp"

namespace oncegate::link {

using persistence::codec::reader;
using persistence::codec::writer;
namespace codec = persistence::codec;

namespace {

constexpr const char* header_error_names[] = {"none", "unknown_type",
                                              "reserved", "too_large"};
static_assert(enum_table_covers(header_error::too_large, header_error_names));

// Requests count from 1: 0 is no op.
constexpr const char* op_names[] = {"unknown", "claim",  "update",
                                    "lookup", "list",   "doubt",
                                    "add",    "remove", "transfer",
                                    "pause"};
static_assert(sizeof(op_names) / sizeof(op_names[0]) == max_op + 1);

// The last `errc` this build knows: an answer with a later one comes from a
// newer build and is refused rather than misread (the unit test checks that
// the value after it has no name, i.e. that this stays the last).
constexpr errc last_errc = errc::wal_damaged;

// Ends a decode: everything read, nothing left over; `why` says otherwise.
bool finish(reader& r, bool ok, std::string& why) {
  if (ok && !r.at_end())
    ok = r.fail("trailing bytes");
  if (!ok)
    why = r.why() != nullptr ? r.why() : "malformed";
  return ok;
}

bool read_op(reader& r, op& x) {
  uint8_t v = 0;
  if (!r.u8(v))
    return false;
  if (v == 0 || v > max_op)
    return r.fail("unknown op");
  x = static_cast<op>(v);
  return true;
}

bool read_address(reader& r, std::string& x) {
  if (!r.str(x, max_address, "address size"))
    return false;
  return !x.empty() || r.fail("address size");
}

} // namespace

// -- header -------------------------------------------------------------------

namespace {

// Little-endian, `n` bytes, straight into the caller's buffer: a header is
// written per frame, without an allocation.
void put_le(char*& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    *out++ = static_cast<char>(static_cast<uint8_t>(v >> (8 * i)));
}

} // namespace

void encode_header(const frame_header& h, char* out) {
  put_le(out, h.length, 4);
  put_le(out, static_cast<uint8_t>(h.type), 1);
  put_le(out, 0, 1);
  put_le(out, h.group, 2);
  put_le(out, h.id, 8);
}

const char* to_string(header_error x) {
  return enum_text(x, header_error_names);
}

header_error decode_header(const char* in, uint32_t max_payload,
                           frame_header& out) {
  reader r{std::string_view{in, header_size}};
  uint8_t type = 0;
  uint8_t reserved = 0;
  frame_header h;
  // 16 bytes are there: these reads cannot fail.
  r.u32(h.length);
  r.u8(type);
  r.u8(reserved);
  r.u16(h.group);
  r.u64(h.id);
  if (type == 0 || type > max_frame_type)
    return header_error::unknown_type;
  if (reserved != 0)
    return header_error::reserved;
  if (h.length > max_payload)
    return header_error::too_large;
  h.type = static_cast<frame_type>(type);
  out = h;
  return header_error::none;
}

// -- hello --------------------------------------------------------------------

std::string encode_hello(const hello& x) {
  writer w;
  w.u32(hello_magic);
  w.u16(x.min_version);
  w.u16(x.max_version);
  w.u64(x.node_id);
  w.str(x.address);
  if (x.groups != 1)
    w.u16(x.groups);
  return w.take();
}

bool decode_hello(std::string_view in, hello& out, std::string& why) {
  reader r{in};
  hello x;
  uint32_t magic = 0;
  bool ok = r.u32(magic) && (magic == hello_magic || r.fail("bad magic"))
            && r.u16(x.min_version) && r.u16(x.max_version)
            && (x.min_version <= x.max_version
                || r.fail("empty version range"))
            && r.u64(x.node_id) && read_address(r, x.address);
  if (ok && r.remaining() == 2) // else: trailing bytes (below)
    ok = r.u16(x.groups)
         && ((x.groups >= 2 && x.groups <= max_groups)
             || r.fail("group count"));
  if (!finish(r, ok, why))
    return false;
  out = std::move(x);
  return true;
}

uint16_t common_version(const hello& a, const hello& b) {
  auto lo = std::max(a.min_version, b.min_version);
  auto hi = std::min(a.max_version, b.max_version);
  return lo <= hi ? hi : 0;
}

// -- requests -----------------------------------------------------------------

const char* to_string(op x) {
  return enum_text(x, op_names);
}

std::string encode_request(const request& x) {
  writer w;
  bool guarded = x.kind == op::claim && used(x.claim.guards);
  w.u8(guarded ? guarded_claim_op : static_cast<uint8_t>(x.kind));
  switch (x.kind) {
    case op::claim: {
      auto f = codec::link_format;
      if (guarded)
        f.guards = codec::guard_fields::present;
      codec::write(w, x.claim, f);
      break;
    }
    case op::update:
      codec::write(w, x.update);
      break;
    case op::lookup:
      w.str(x.route);
      w.str(x.key);
      break;
    case op::list:
      w.str(x.route);
      w.u8(static_cast<uint8_t>(x.state));
      w.str(x.key);
      w.u32(x.limit);
      break;
    case op::doubt:
      w.u64(x.node);
      w.i64(x.before_ms);
      break;
    case op::add:
      w.u64(x.node);
      w.str(x.address);
      break;
    case op::remove:
    case op::transfer:
      w.u64(x.node);
      break;
    case op::pause:
      w.str(x.route);
      w.u8(static_cast<uint8_t>(x.pause));
      w.i64(x.now_ms);
      break;
  }
  return w.take();
}

bool decode_request(std::string_view in, request& out, std::string& why) {
  namespace b = record_bounds;
  reader r{in};
  request x;
  // A guarded claim (`guarded_claim_op`) reads as a claim with its guards,
  // and only with a guard set: one encoding per value.
  bool guarded = in.size() > 0
                 && static_cast<uint8_t>(in[0]) == guarded_claim_op;
  uint8_t guarded_op = 0;
  bool ok = guarded ? r.u8(guarded_op) : read_op(r, x.kind);
  if (guarded)
    x.kind = op::claim;
  if (ok) {
    switch (x.kind) {
      case op::claim: {
        auto f = codec::link_format;
        if (guarded)
          f.guards = codec::guard_fields::present;
        ok = codec::read(r, x.claim, f)
             && (!guarded || used(x.claim.guards) || r.fail("empty guards"));
        break;
      }
      case op::update:
        ok = codec::read(r, x.update);
        break;
      case op::lookup:
        ok = r.str(x.route, b::route, "route size")
             && r.str(x.key, b::key, "key size");
        break;
      case op::list:
        ok = r.str(x.route, b::route, "route size")
             && r.enumeration(x.state, record_state::failed, "record state")
             && r.str(x.key, b::key, "key size") && r.u32(x.limit)
             && (x.limit <= b::list_page || r.fail("list limit"));
        break;
      case op::doubt:
        ok = r.u64(x.node) && r.i64(x.before_ms);
        break;
      case op::add:
        ok = r.u64(x.node) && read_address(r, x.address);
        break;
      case op::remove:
      case op::transfer:
        ok = r.u64(x.node);
        break;
      case op::pause:
        ok = r.str(x.route, b::route, "route size")
             && r.enumeration(x.pause, pause_op::resume, "pause")
             && r.i64(x.now_ms);
        break;
    }
  }
  if (!finish(r, ok, why))
    return false;
  out = std::move(x);
  return true;
}

// -- answers ------------------------------------------------------------------

std::string encode_answer(const answer& x) {
  writer w;
  w.u8(static_cast<uint8_t>(x.kind));
  w.u8(static_cast<uint8_t>(x.error));
  if (x.error != errc::none) {
    w.str(std::string_view{x.detail}.substr(0, max_detail));
    return w.take();
  }
  switch (x.kind) {
    case op::claim:
      w.u8(static_cast<uint8_t>(x.claim.outcome));
      codec::write(w, x.claim.rec);
      break;
    case op::update:
      w.u8(x.update.applied ? 1 : 0);
      w.u8(x.update.current.found ? 1 : 0);
      codec::write(w, x.update.current.rec);
      break;
    case op::lookup:
      w.u8(x.lookup.found ? 1 : 0);
      codec::write(w, x.lookup.rec);
      break;
    case op::list:
      w.u32(static_cast<uint32_t>(x.page.records.size()));
      for (auto& rec : x.page.records)
        codec::write(w, rec);
      w.str(x.page.next_after);
      break;
    case op::doubt:
    case op::transfer:
      w.u64(x.value);
      break;
    case op::add:
    case op::remove:
      w.i32(x.status);
      break;
    case op::pause:
      w.u32(static_cast<uint32_t>(x.pauses.size()));
      for (auto& p : x.pauses) {
        w.str(p.route);
        w.i64(p.since_ms);
      }
      break;
  }
  return w.take();
}

namespace {

bool read_page(reader& r, record_page& page) {
  uint32_t count = 0;
  if (!r.u32(count))
    return false;
  if (count > record_bounds::list_page)
    return r.fail("page size");
  // Every record takes at least `min_record_size` bytes: a count the bytes
  // left cannot hold is refused before anything is reserved for it.
  if (count > r.remaining() / codec::min_record_size)
    return r.fail("truncated");
  page.records.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    record rec;
    if (!codec::read(r, rec))
      return false;
    page.records.push_back(std::move(rec));
  }
  return r.str(page.next_after, record_bounds::key, "key size");
}

bool read_pauses(reader& r, route_pauses& out) {
  uint32_t count = 0;
  if (!r.u32(count))
    return false;
  if (count > max_pauses)
    return r.fail("pause count");
  // Each takes at least a length and a time.
  if (count > r.remaining() / 12)
    return r.fail("truncated");
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    route_pause p;
    if (!r.str(p.route, record_bounds::route, "route size")
        || !r.i64(p.since_ms))
      return false;
    out.push_back(std::move(p));
  }
  return true;
}

} // namespace

bool decode_answer(std::string_view in, answer& out, std::string& why) {
  reader r{in};
  answer x;
  bool ok = read_op(r, x.kind) && r.enumeration(x.error, last_errc, "errc");
  if (ok && x.error != errc::none) {
    ok = r.str(x.detail, max_detail, "detail size");
  } else if (ok) {
    switch (x.kind) {
      case op::claim:
        ok = r.enumeration(x.claim.outcome, last_decision, "decision")
             && codec::read(r, x.claim.rec);
        break;
      case op::update:
        ok = r.flag(x.update.applied) && r.flag(x.update.current.found)
             && codec::read(r, x.update.current.rec);
        break;
      case op::lookup:
        ok = r.flag(x.lookup.found) && codec::read(r, x.lookup.rec);
        break;
      case op::list:
        ok = read_page(r, x.page);
        break;
      case op::doubt:
      case op::transfer:
        ok = r.u64(x.value);
        break;
      case op::add:
      case op::remove:
        ok = r.i32(x.status);
        break;
      case op::pause:
        ok = read_pauses(r, x.pauses);
        break;
    }
  }
  if (!finish(r, ok, why))
    return false;
  out = std::move(x);
  return true;
}

} // namespace oncegate::link
