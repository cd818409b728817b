#pragma once

// @private: the inside of the peer policy (routing/peer_tls.hpp), shared
// by its two files and included by nothing else. peer_tls.cpp is the
// policy: the member table, the decision on each peer certificate
// (verify_peer), events and counters, the public API.
// peer_tls_interpose.cpp is the interposition: the OpenSSL functions that
// take libssl's place for libcaf_openssl's calls, and the handshake
// deadline. peer_tls_sockets.cpp closes strangers' connections at accept
// and holds back the write interest of sockets whose handshake waits for
// the peer (CAF 0.17 would busy-poll them).
// Which certificate names which node is replication/tls_identity; which
// BASP frames a connection may deliver is peer_basp.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <openssl/ssl.h>

#include <caf/node_id.hpp>

#include "replication/tls_identity.hpp"
#include "routing/peer_basp.hpp"
#include "routing/peer_tls.hpp"

namespace oncegate::tls::detail {

/// Immutable; replaced as a whole.
struct policy_state {
  policy_config config;
  ca_bundle cas;
  std::shared_ptr<const node_identity> self;
  /// Member id -> its IPs.
  std::map<uint64_t, std::set<std::string>> member_ips;
  /// "ip:port" -> member id.
  std::map<std::string, uint64_t> by_endpoint;
};

enum hook {
  hook_verify,
  hook_chain,
  hook_key,
  hook_connect,
  hook_accept,
  hook_count
};

/// What the policy knows about one of libcaf_openssl's connections (the
/// SSL's ex_data).
struct handshake_state {
  std::chrono::steady_clock::time_point started;
  bool expired = false;
  /// The verify callback reported on this handshake.
  bool decided = false;
  /// The member the peer's certificate names (0: not verified).
  uint64_t peer_id = 0;
  /// Checks what the peer sends, from the first SSL_read on.
  std::unique_ptr<basp_guard> guard;
  /// Refused: every further read and write fails.
  bool refused = false;
  /// The socket whose write interest is held back (-1: none).
  int held_fd = -1;
};

struct globals {
  std::mutex mtx;
  std::shared_ptr<const policy_state> state;
  std::shared_ptr<const std::function<void(const event&)>> handler;
  std::atomic<bool> active{false};
  std::atomic<int64_t> timeout_ms{0};
  std::atomic<uint32_t> max_message{0};
  /// Code range of libcaf_openssl: calls from there are the ones we change.
  std::atomic<uintptr_t> caf_lo{0};
  std::atomic<uintptr_t> caf_hi{0};
  /// Code range of libcaf_io: its epoll_ctl calls are paced.
  std::atomic<uintptr_t> caf_io_lo{0};
  std::atomic<uintptr_t> caf_io_hi{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> hooked[hook_count] = {};
  int ssl_index = -1;
  int ctx_index = -1;
  /// This node's CAF node id, set when the actor system asks for it (the
  /// interposed node_id::default_data::local); none before.
  caf::node_id self_node;
};

globals& g();

std::shared_ptr<const policy_state> current_state();

/// Counts the event and hands it to the event handler.
void report(event ev);

/// "ip:port" of the socket's peer, empty if unknown.
std::string peer_of(int fd, std::string* ip = nullptr);

/// Verify callback installed on every SSL_CTX that libcaf_openssl creates.
int verify_peer(int preverify_ok, X509_STORE_CTX* sctx);

// -- peer_tls_interpose.cpp ---------------------------------------------------

/// The code range of the loaded shared library whose file name contains
/// `name` (libcaf_openssl: the calls the interposers change); false if it
/// is not loaded as a shared library. Defined beside the interposers:
/// configure() calls it, which is what makes the linker take that object,
/// and with it the interposed functions, out of the static library into
/// the executable.
bool find_library(const char* name, uintptr_t& lo, uintptr_t& hi);

/// The function `name` of the next object after the executable (libssl,
/// libc); aborts if there is none.
void* next_symbol_address(const char* name);

template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(next_symbol_address(name));
}

/// Allocates the ex_data indexes of `g()` if not done yet; with `g().mtx`
/// held. False if OpenSSL has none to give.
bool allocate_ex_indexes();

/// The policy's state of one of libcaf_openssl's connections, if any.
handshake_state* state_of(SSL* ssl);

/// Marks the handshake of `ssl` as decided by the verify callback.
void mark_decided(SSL* ssl);

// -- peer_tls_sockets.cpp -----------------------------------------------------

/// With `policy_config::member_sources_only`: true (and reported) if the
/// peer of the inbound socket `fd` is at an address that is no member's.
bool refuse_stranger(int fd);

/// Whether a call comes from libcaf_io.
bool from_caf_io(const void* return_address);

/// Holds back / gives back the EPOLLOUT of CAF's registration of `fd`
/// (on the multiplexer thread).
void hold_writes(int fd);
void release_writes(int fd);

/// Gives every held socket its write interest back (on the multiplexer
/// thread); returns how many there were.
size_t sweep_held();

size_t held_count();

/// The address of this unit's `accept` or `epoll_ctl`.
void* socket_interposer(const char* name);

/// The first interposed function that the process does not bind to this
/// executable's definition (empty: all are), for self_test().
std::string not_interposed();

} // namespace oncegate::tls::detail
