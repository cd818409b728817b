#pragma once

// @private: the inside of the peer policy (routing/peer_tls.hpp), shared
// by its two files and included by nothing else. peer_tls.cpp is the
// policy: the member table, the decision on each peer certificate
// (verify_peer), events and counters, the public API.
// peer_tls_interpose.cpp is the interposition: the OpenSSL functions that
// take libssl's place for libcaf_openssl's calls, and the handshake
// deadline. Which certificate names which node is replication/tls_identity.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <openssl/ssl.h>

#include "replication/tls_identity.hpp"
#include "routing/peer_tls.hpp"

namespace oncegate::tls::detail {

/// Immutable; replaced as a whole.
struct policy_state {
  policy_config config;
  x509_ptr ca;
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

struct globals {
  std::mutex mtx;
  std::shared_ptr<const policy_state> state;
  std::shared_ptr<const std::function<void(const event&)>> handler;
  std::atomic<bool> active{false};
  std::atomic<int64_t> timeout_ms{0};
  /// Code range of libcaf_openssl: calls from there are the ones we change.
  std::atomic<uintptr_t> caf_lo{0};
  std::atomic<uintptr_t> caf_hi{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> hooked[hook_count] = {};
  int ssl_index = -1;
  int ctx_index = -1;
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

/// The code range of libcaf_openssl (calls from there are the ones the
/// interposers change); false if it is not loaded as a shared library.
/// Defined beside the interposers: configure() calls it, which is what
/// makes the linker take that object, and with it the interposed
/// functions, out of the static library into the executable.
bool find_caf_openssl(uintptr_t& lo, uintptr_t& hi);

/// Allocates the ex_data indexes of `g()` if not done yet; with `g().mtx`
/// held. False if OpenSSL has none to give.
bool allocate_ex_indexes();

/// Marks the handshake of `ssl` as decided by the verify callback.
void mark_decided(SSL* ssl);

} // namespace oncegate::tls::detail
