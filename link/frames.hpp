// The node link's wire format: what two nodes say to each other on their
// one mutual-TLS connection once the handshake is done (docs/cluster.md,
// "The node link"). Every frame is a 16-byte header and a payload:
//
//   u32 payload length | u8 type | u8 0 | u16 group | u64 id   (little-endian)
//
// `group` is the Raft group (partition) a frame belongs to, below the
// count both hellos said; `id` is a Raft stream's id for the raft_* types and a
// request's id for `request` and `answer`. Payloads are encoded with the
// command codec's primitives (persistence/codec.hpp): integers
// little-endian of their type's width, strings as a u32 length and bytes.
//
// Nothing here does I/O; decoding never trusts a length it did not check
// against the bytes it has and the bounds of common/record.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/errc.hpp"
#include "common/record.hpp"

namespace oncegate::link {

/// The versions of the link this build speaks (each side says its range in
/// its hello; the higher common one is used, none: the link is closed).
constexpr uint16_t min_version = 1;
constexpr uint16_t max_version = 1;

/// "OGL1" as a little-endian u32: the first word of every hello.
constexpr uint32_t hello_magic = 0x314C474F;

constexpr std::size_t header_size = 16;

enum class frame_type : uint8_t {
  /// The first frame each side sends; nothing else before it.
  hello = 1,
  /// The sender's Raft opens stream `id` to the receiver's (libraft's
  /// connect); the payload is empty.
  raft_open = 2,
  /// Bytes of Raft stream `id`, in either direction.
  raft_data = 3,
  /// Stream `id` is closed (by either side); the payload is empty.
  raft_close = 4,
  /// A request of the sender's to the receiver (`request`), answered by one
  /// `answer` with the same id on the same connection.
  request = 5,
  answer = 6,
};

/// The largest type value this build knows.
constexpr uint8_t max_frame_type = 6;

struct frame_header {
  uint32_t length = 0;
  frame_type type = frame_type::hello;
  uint16_t group = 0;
  uint64_t id = 0;
};

/// Writes `h` as the 16 header bytes at `out`.
void encode_header(const frame_header& h, char* out);

/// Why a header is refused (the link is closed with this as its reason).
enum class header_error : uint8_t {
  none = 0,
  /// A type this build does not know.
  unknown_type,
  /// The reserved byte is not zero.
  reserved,
  /// The payload is longer than the receiver's bound.
  too_large,
};

const char* to_string(header_error x);

/// Reads the 16 bytes at `in`; refuses unknown types, a non-zero reserved
/// byte and payloads over `max_payload`.
header_error decode_header(const char* in, uint32_t max_payload,
                           frame_header& out);

/// The longest Raft address a hello may carry (and an `add` request).
constexpr std::size_t max_address = 512;

/// The most Raft groups (partitions) a cluster may have.
constexpr uint16_t max_groups = 256;

/// What each side says first.
struct hello {
  uint16_t min_version = link::min_version;
  uint16_t max_version = link::max_version;
  /// The sender's node id and its Raft address (`cluster.peers`); checked
  /// against its certificate and the member list.
  uint64_t node_id = 0;
  std::string address;
  /// The Raft groups of the sender's cluster (`cluster.partitions`); both
  /// sides must say the same. One is not written: the hello of a cluster
  /// without partitions is the first build's, byte for byte; more follow
  /// the address as a u16 (a build before partitions refuses that hello
  /// for its trailing bytes, which is right: it runs one group).
  uint16_t groups = 1;
};

std::string encode_hello(const hello& x);

/// Fails (with `why`) on a wrong magic word, truncation, trailing bytes,
/// an empty range (min > max), an address empty or over `max_address`, or
/// a written group count outside 2..`max_groups`.
bool decode_hello(std::string_view in, hello& out, std::string& why);

/// The version both sides speak: the highest in both ranges; 0: none.
uint16_t common_version(const hello& a, const hello& b);

/// What one node asks another (its leader, in practice).
enum class op : uint8_t {
  /// `claim_request` -> `claim_result`.
  claim = 1,
  /// `record_update` -> `update_result`.
  update = 2,
  /// (route, key) -> `lookup_result`.
  lookup = 3,
  /// (route, state, after, limit) -> `record_page`.
  list = 4,
  /// (owner, before_ms): doubt what `owner` had in flight before
  /// `before_ms` -> count.
  doubt = 5,
  /// Add node `node` at `address` as a voter -> libraft status.
  add = 6,
  /// Remove node `node` -> libraft status.
  remove = 7,
  /// Hand leadership to `node` (0: any voter) -> the new leader's id.
  transfer = 8,
  /// (route, pause_op, now_ms): read the paused routes, or pause or resume
  /// `route` -> the paused routes.
  pause = 9,
};

constexpr uint8_t max_op = 9;

/// On the wire, a claim that carries guards (`claim_guards`) is sent as op
/// byte 10 with the guards after the claim's fields; it decodes as
/// `op::claim`. A claim without guards is the bytes builds before guards
/// send and read; a build before them refuses a guarded one as an unknown
/// op (never reads it as a claim without its guards).
constexpr uint8_t guarded_claim_op = 10;

const char* to_string(op x);

struct request {
  op kind = op::claim;
  claim_request claim;   // claim
  record_update update;  // update
  std::string route;     // lookup, list, pause
  std::string key;       // lookup; list: the key to continue after
  record_state state = record_state::in_doubt; // list
  uint32_t limit = 0;    // list
  uint64_t node = 0;     // doubt (owner), add, remove, transfer
  int64_t before_ms = 0; // doubt
  std::string address;   // add
  pause_op pause = pause_op::read; // pause
  int64_t now_ms = 0;              // pause
};

std::string encode_request(const request& x);

/// Fails (with `why`) on an unknown op, truncation, trailing bytes, or a
/// field beyond `record_bounds` (strings, enums, list limits). Semantic
/// checks (`malformed(claim_request)`, membership) are the receiver's.
bool decode_request(std::string_view in, request& out, std::string& why);

/// The longest error detail an answer carries.
constexpr std::size_t max_detail = 4096;

struct answer {
  /// The op of the request it answers (checked by the asker).
  op kind = op::claim;
  /// Not `none`: the request failed (nothing else is set but `detail`,
  /// which `encode_answer` cuts to `max_detail` bytes).
  errc error = errc::none;
  std::string detail;
  claim_result claim;   // claim
  update_result update; // update
  lookup_result lookup; // lookup
  record_page page;     // list
  route_pauses pauses;  // pause
  /// doubt: records doubted; transfer: the new leader (0: none).
  uint64_t value = 0;
  /// add, remove: libraft's status (0: done).
  int32_t status = 0;
};

std::string encode_answer(const answer& x);

/// Fails (with `why`) like `decode_request`; an unknown `errc` is refused.
bool decode_answer(std::string_view in, answer& out, std::string& why);

} // namespace oncegate::link
