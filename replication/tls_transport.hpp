#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
#include <uv.h>
}

namespace oncegate::cluster {

/// How a node secures its Raft connections: mutual TLS, each side proving
/// its node id with a certificate of the cluster CA.
struct tls_transport_options {
  /// PEM files: the cluster CA (every node has the same), this node's
  /// certificate (optionally followed by intermediates) and its private key
  /// (unencrypted). `scripts/cluster-certs.sh` makes them.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  /// Every member: id -> Raft address (`host:port`, `[v6]:port`). Only
  /// these ids are connected to (at exactly this address) or accepted.
  std::map<uint64_t, std::string> peers;
  /// Where to listen if not this node's own Raft address (e.g.
  /// `0.0.0.0:7001` in a container); empty: the address given to
  /// `raft_init`.
  std::string bind_address;
  /// From TCP connect/accept to a verified peer (TLS and libraft's
  /// preamble); a silent or slow peer is dropped when it expires.
  std::chrono::milliseconds handshake_timeout{2000};
  /// Unauthenticated inbound connections at once at most; more are closed
  /// as soon as they are accepted.
  std::size_t max_handshakes = 64;
};

/// Counters of one transport (monotonic unless noted).
struct tls_transport_stats {
  /// Inbound connections handed to libraft.
  uint64_t accepted = 0;
  /// Outbound connections handed to libraft.
  uint64_t connected = 0;
  /// Outbound attempts that failed (resolve, connect, TLS, wrong server
  /// identity, timeout), not counting cancellations.
  uint64_t connect_failed = 0;
  /// Inbound: TLS failed (no/untrusted certificate, not TLS, timeout or
  /// close during the TLS handshake).
  uint64_t refused_handshake = 0;
  /// Inbound: a trusted peer claimed an id that is not a member, not the
  /// one its certificate names, this node's own, or a Raft address other
  /// than the member's.
  uint64_t refused_identity = 0;
  /// Inbound: libraft's preamble was malformed (unknown protocol version,
  /// bad address length) or did not arrive in time.
  uint64_t refused_preamble = 0;
  /// Inbound: closed at once because `max_handshakes` were in progress.
  uint64_t refused_busy = 0;
  /// Times a connection stopped reading because its other side was full.
  uint64_t backpressure_pauses = 0;
  /// Gauge: bytes queued by the transport's own writes now (all
  /// connections, both directions).
  uint64_t buffered_bytes = 0;
  /// Gauge: inbound connections in their handshake now.
  uint64_t handshakes = 0;
};

/// Loads and checks the certificates (errors say which file and why) and
/// the peers' addresses, then fills `t` so that `raft_uv_init` can use it
/// in place of `raft_uv_tcp_init`. `t->data` is kept (libraft's). Returns 0
/// or a libraft code (`RAFT_INVALID`, `RAFT_NOMEM`) with `error` set.
///
/// Everything the transport does happens on `loop`'s thread (libraft's);
/// only `tls_transport_stats_of` may be called from other threads. No
/// thread of its own. When libraft calls `init`, the transport checks that
/// its own certificate names the node id given to `raft_init`.
int tls_transport_init(raft_uv_transport* t, uv_loop_t* loop,
                       const tls_transport_options& opts, std::string& error);

/// Replaces the member list (for membership changes); on the loop thread.
/// Established connections stay; new ones are checked against `peers`.
void tls_transport_set_peers(raft_uv_transport* t,
                             std::map<uint64_t, std::string> peers);

/// Frees the transport: after libraft's close of it completed (the
/// `raft_close` callback, where `raft_uv_close` runs), or when libraft
/// never called its `init`.
void tls_transport_close(raft_uv_transport* t);

/// A snapshot of the counters; thread-safe while the transport exists
/// (zeros before `tls_transport_init` succeeded or after
/// `tls_transport_close`, but do not race those two).
tls_transport_stats tls_transport_stats_of(raft_uv_transport* t);

} // namespace oncegate::cluster
