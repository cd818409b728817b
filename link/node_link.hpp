// The node link: every byte between two nodes on one connection, mutual
// TLS with the node-identity rule of tls_identity.hpp (plain TCP only with
// `cluster.insecure`). After the handshake each side sends a hello (its id,
// Raft address and the link versions it speaks); then frames (frames.hpp)
// carry the Raft streams libraft opens between the two nodes and the
// cluster's own requests and their answers.
//
// To libraft the link is its transport (a raft_uv_transport, given to
// raft_uv_init in place of raft_uv_tcp_init): a `connect` opens a stream on
// the link to that node, an incoming stream is `accept`ed. A node that runs
// several Raft groups (partitions) on one loop gives each its own
// transport, all on one endpoint (`init` makes the endpoint with group 0's
// transport, `init_group` the others'): their streams and requests share
// the one link per node pair, told apart by the group in every frame. Between any two
// nodes there is one link: the node with the lower id dials and keeps it up
// (redialling with back-off), the other accepts; a node that dials again
// (it restarted) replaces its old link.
//
// Requests (`ask`) go to a node over its link and are answered on that
// same connection: an answer is matched by request id among the requests
// sent on the connection it arrived on, so no member can answer for
// another. A link that closes fails what it had outstanding (the outcome of
// those is unknown).
//
// Bad input closes the connection with a counted reason (`link_stats`),
// never the node: a stranger's TLS, a certificate naming another node, a
// hello that lies or speaks no common version, a malformed, unknown or
// oversized frame, a request that does not decode. Limits: frame bytes, and
// requests (and their bytes) a peer may have in service at once (beyond,
// they are answered `overloaded`).
//
// Everything happens on the loop's thread (libraft's); only `stats_of` may
// be called from other threads. The link has no thread of its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
#include <uv.h>
}

#include "link/frames.hpp"

namespace oncegate::link {

/// PEM files: the cluster CA (every node has the same), this node's
/// certificate (optionally followed by intermediates) and its private key
/// (unencrypted). `scripts/cluster-certs.sh` makes them.
struct tls_files {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

struct options {
  /// Mutual TLS; none: plain TCP (`cluster.insecure`: anyone who reaches
  /// the port is believed).
  std::optional<tls_files> tls;
  /// Every member: id -> Raft address (`host:port`, `[v6]:port`). Only
  /// these ids are dialled (at exactly this address) or accepted.
  std::map<uint64_t, std::string> peers;
  /// Where to listen if not this node's own address (e.g. `0.0.0.0:7001`
  /// in a container); empty: the address given to `raft_init`.
  std::string bind_address;
  /// From TCP connect/accept to a verified hello; a silent or slow peer is
  /// dropped when it expires. Also how long libraft's `connect` waits for
  /// a link to come up.
  std::chrono::milliseconds handshake_timeout{2000};
  /// Unauthenticated inbound connections at once at most; more are closed
  /// as soon as they are accepted.
  std::size_t max_handshakes = 64;
  /// Close inbound connections from an IP that is no member's (as
  /// `peers` resolve) at accept, before any TLS: a stranger's flood costs
  /// a few microseconds each instead of a handshake. Wrong behind NAT, or
  /// where members connect out from another interface
  /// (`cluster.member-sources-only`).
  bool member_sources_only = true;
  /// The largest frame payload accepted (`cluster.max-peer-message`).
  uint32_t max_frame_bytes = 64u << 20;
  /// Requests of one peer in service at once, and their payload bytes, at
  /// most; beyond, a request is answered `overloaded` at once.
  uint32_t max_served = 4096;
  uint64_t max_served_bytes = 128u << 20;
  /// The Raft groups (partitions) the link carries, 1..`max_groups`: group
  /// 0's transport is made by `init`, the others' by `init_group`. A peer
  /// whose hello says another count is refused; a frame of a group beyond
  /// closes the link.
  uint16_t groups = 1;
  /// Back-off of the dialling side between attempts.
  std::chrono::milliseconds redial_min{50};
  std::chrono::milliseconds redial_max{1000};
};

/// Counters of one link endpoint (monotonic unless noted).
struct link_stats {
  /// Links established, inbound and outbound.
  uint64_t accepted = 0;
  uint64_t connected = 0;
  /// Outbound attempts that failed (resolve, connect, TLS, wrong server
  /// identity, a hello refused, timeout).
  uint64_t connect_failed = 0;
  /// Inbound: TLS failed (no/untrusted certificate, not TLS, timeout or
  /// close during the TLS handshake).
  uint64_t refused_handshake = 0;
  /// Inbound: a trusted peer claimed an id that is not a member, not the
  /// one its certificate names, this node's own, or a Raft address other
  /// than the member's.
  uint64_t refused_identity = 0;
  /// The hello was malformed, missing, late, or shared no version (an
  /// older build's Raft preamble lands here).
  uint64_t refused_hello = 0;
  /// Inbound: closed at once because `max_handshakes` were in progress.
  uint64_t refused_busy = 0;
  /// Inbound: closed at accept, from an address that is no member's
  /// (`member_sources_only`).
  uint64_t refused_source = 0;
  /// Established links closed for a bad frame: unknown type, too large,
  /// malformed payload, a stream or answer that makes no sense.
  uint64_t refused_frame = 0;
  /// Requests sent, answers matched, requests that failed without an
  /// answer (no link, timeout, link lost), answers that came too late.
  uint64_t requests_sent = 0;
  uint64_t answers_received = 0;
  uint64_t requests_failed = 0;
  uint64_t late_answers = 0;
  /// Requests from peers handed to the server, and those refused as
  /// `overloaded` at the bound.
  uint64_t requests_served = 0;
  uint64_t requests_overloaded = 0;
  /// Times a connection stopped reading because its other side was full.
  uint64_t backpressure_pauses = 0;
  /// Frames sent, and the writes that carried them (frames of one loop
  /// turn share one).
  uint64_t frames_sent = 0;
  uint64_t frame_writes = 0;
  /// Gauges: bytes queued by the link's own writes now (all connections,
  /// both directions); inbound connections in their handshake now; links
  /// open now; Raft streams open now.
  uint64_t buffered_bytes = 0;
  uint64_t handshakes = 0;
  uint64_t links = 0;
  uint64_t streams = 0;
};

/// Where a served request came from and how to answer it.
struct served {
  /// The verified id of the node that asked.
  uint64_t peer = 0;
  /// The connection it arrived on and its id there (for `reply`).
  uint64_t connection = 0;
  uint64_t id = 0;
  /// The Raft group it was sent for (below `options::groups`).
  uint16_t group = 0;
};

/// Serves a peer's request; called on the loop thread, must not block. It
/// is answered by exactly one `reply(t, from, answer)` (on the loop thread;
/// the answer of a request whose link closed meanwhile is dropped).
using server_fn = std::function<void(const served& from, request req)>;

/// What became of a request: `answer.error` is the peer's error, or ours:
/// `not_leader` (no link to that node now: nothing was sent),
/// `timeout` or `leadership_lost` (sent, no answer in time / the link
/// closed: the outcome is unknown).
using answer_fn = std::function<void(answer)>;

/// Loads and checks the certificates (errors say which file and why) and
/// the peers' addresses, then fills `t` so that `raft_uv_init` can use it.
/// `t->data` is kept (libraft's). Returns 0 or a libraft code
/// (`RAFT_INVALID`, `RAFT_NOMEM`) with `error` set. When libraft calls
/// `init`, the link checks that its own certificate names the node id given
/// to `raft_init`.
int init(raft_uv_transport* t, uv_loop_t* loop, const options& opts,
         std::string& error);

/// Makes `t` the transport of Raft group `group` (1..groups-1) on the
/// endpoint of `first` (group 0's, from `init`), to give to `raft_uv_init`
/// of that group's `raft_io`: its `init` must name the same node id as
/// group 0's; its streams go over the links of `first`, and its requests
/// (`ask` on `t`) carry its group. Each group's transport is closed by its
/// own libraft (`raft_close`) and freed with `close`; the links stay up
/// until the last group's transport closed. Returns 0 or `RAFT_INVALID`
/// with `error` set (no such group, or it has a transport already).
int init_group(raft_uv_transport* t, raft_uv_transport* first,
               uint16_t group, std::string& error);

/// Sets the server of peers' requests, every group's (before `raft_start`;
/// `served::group` says which); without one, requests are answered
/// `not_leader`.
void set_server(raft_uv_transport* t, server_fn fn);

/// Replaces the member list (membership changes); on the loop thread.
/// Links to nodes no longer members are closed.
void set_peers(raft_uv_transport* t, std::map<uint64_t, std::string> peers);

/// Sends `req` to node `peer`, for the group of `t`; `done` runs on the
/// loop thread exactly once. On the loop thread.
void ask(raft_uv_transport* t, uint64_t peer, request req,
         std::chrono::milliseconds timeout, answer_fn done);

/// Fails the requests of `t`'s group waiting for node `peer`'s answer
/// with `leadership_lost` ("the outcome is unknown"): that node no longer
/// leads the group, so an answer may never come, and the asker retries
/// (with the same request id) at the group's next leader instead of
/// waiting out its timeout. Membership changes and transfers are left to
/// their answer (a transfer's comes after the leadership moved). On the
/// loop thread.
void give_up(raft_uv_transport* t, uint64_t peer, const std::string& why);

/// Answers a served request (see `server_fn`). On the loop thread.
void reply(raft_uv_transport* t, const served& to, answer ans);

/// Whether a link to `peer` is open now. On the loop thread.
bool connected(raft_uv_transport* t, uint64_t peer);

/// Writes out now what this loop turn queued on every link (frames are
/// otherwise written together before the loop next waits): for work that
/// is to run after the frames are on their way, e.g. a follower's apply
/// after its acknowledgement (cluster::raft_fsm_adapter). A no-op after
/// `close`.
void flush(raft_uv_transport* t);

/// Frees the transport: after libraft's close of it completed (the
/// `raft_close` callback, where `raft_uv_close` runs), or when libraft never
/// called its `init`. The endpoint goes with the last of its transports.
void close(raft_uv_transport* t);

/// A snapshot of the counters; thread-safe while the link exists (zeros
/// before `init` succeeded or after `close`, but do not race those two).
link_stats stats_of(raft_uv_transport* t);

} // namespace oncegate::link
