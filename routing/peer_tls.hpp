#pragma once

// Peer identity policy for CAF 0.17's OpenSSL transport (libcaf_openssl).
//
// libcaf_openssl checks only that a peer's certificate chains to a trusted
// CA; it has no hook for a verify callback and checks no name. This unit
// adds the cluster rule (the naming and certificate checks are the ones
// of replication/tls_identity, which the Raft transport applies as well):
//
//   * the only trust anchor is the cluster CA (whatever openssl.cafile or
//     openssl.capath say);
//   * a certificate must name exactly one node as DNS subjectAltName
//     `node-<id>.oncegate`;
//   * an incoming peer must name a member of the cluster;
//   * an outgoing connection to the CAF address of node N must be answered
//     by a certificate naming N (the node is found from the socket's peer
//     address, so connect to the addresses of the member table);
//   * the CAF node id a peer claims is the one of the member its
//     certificate names, and it speaks only in its own name (routing/
//     peer_basp.hpp: a stolen certificate cannot pose as another member);
//   * TLS 1.3 only, with the TLS profile of all our TLS (common/
//     tls_profile.hpp) put on each connection before its first byte
//     (libcaf_openssl sets its own cipher list on the context after the
//     policy did); a handshake that does not finish within a deadline is
//     dropped; while it waits for the peer, the socket's write interest is
//     held back (CAF 0.17 would busy-poll it: peer_tls_sockets.cpp);
//   * this node's certificate and key are served from memory, loaded and
//     checked as a pair, so replacing the files never breaks (CAF re-reads
//     them for every connection and aborts the process if they don't load).
//
// How: libcaf_openssl.so calls OpenSSL through the PLT, so the executable
// defines SSL_CTX_set_verify, SSL_CTX_use_certificate_chain_file,
// SSL_CTX_use_PrivateKey_file, SSL_connect, SSL_accept, SSL_read and
// SSL_write (and libcaf_io's calls of accept, epoll_ctl, epoll_wait and
// node_id::default_data::local); the dynamic
// linker binds libcaf_openssl's calls to them, and they forward to libssl
// (dlsym RTLD_NEXT). Only calls coming from libcaf_openssl are changed;
// other OpenSSL users in the process are left alone. Requires CAF as a
// shared library and the interposers (peer_tls_interpose.cpp) linked into
// the executable (an object or a static library: configure() calls into
// that object, so the linker takes it with configure()) or into a shared
// library that precedes libssl. Call self_test() after creating the actor
// system: it proves that the calls really arrive there.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

// node_id_of_cert_file and the naming rule.
#include "replication/tls_identity.hpp"

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace oncegate::tls {

/// A cluster member: its node id and the address its CAF front actor is
/// published on (the address other nodes connect to).
struct member {
  uint64_t id = 0;
  std::string host;
  uint16_t port = 0;
};

struct policy_config {
  /// This node's id; its certificate must name it.
  uint64_t self_id = 0;
  /// Cluster CA (PEM): the only trust anchor.
  std::string ca_file;
  /// This node's certificate (PEM, leaf first, then any intermediates).
  std::string cert_file;
  /// This node's private key (PEM).
  std::string key_file;
  /// Passphrase of an encrypted key (empty: none).
  std::string key_passphrase;
  /// The cluster's members (this node may be among them).
  std::vector<member> members;
  /// A TLS handshake not finished after this long is dropped (0: never).
  std::chrono::milliseconds handshake_timeout{10000};
  /// The largest BASP payload a peer may send (CAF allocates it whole).
  uint32_t max_message_bytes = 64u << 20;
  /// Also require an incoming peer's source IP to be an address of the node
  /// its certificate names. Off by default: wrong behind NAT or on hosts
  /// that connect out from another interface than they publish on.
  bool bind_inbound_address = false;
  /// Refuse, before any TLS, an incoming connection whose source IP is no
  /// member's address (CAF 0.17 busy-polls a pending handshake: a stranger
  /// must not get one). Wrong behind NAT or with members that connect out
  /// from another interface than they publish on.
  bool member_sources_only = true;
};

/// Something the policy decided, reported from CAF's network threads.
struct event {
  enum kind_t { accepted, rejected, handshake_timeout } kind = accepted;
  bool inbound = false;
  /// The peer's address ("ip:port"), if known.
  std::string peer;
  /// The node the certificate names (0: none or unreadable).
  uint64_t named_id = 0;
  /// For outgoing connections: the node whose address we connected to.
  uint64_t expected_id = 0;
  std::string reason;
};

/// Loads and checks the CA and this node's certificate and key, resolves
/// the members' addresses, installs the policy for the whole process and
/// points the CAF configuration (`openssl.*`) at the same files. Call it
/// before creating the actor system and before any connection. Returns
/// false and sets `error` if anything is wrong; the policy is then not
/// changed.
bool configure(caf::actor_system_config& cfg, const policy_config& config,
               std::string& error);

/// Proves, inside a running actor system, that libcaf_openssl's calls reach
/// this unit (not, e.g., because CAF is linked statically or this unit was
/// left out by the linker). Refuse to start the node if it fails.
bool self_test(caf::actor_system& sys, std::string& error);

/// Replaces the member table (membership change). Addresses are resolved
/// now; existing connections are not touched.
bool update_members(const std::vector<member>& members, std::string& error);

/// Re-reads this node's certificate and key from the configured files and
/// uses them for new connections if they are a valid pair naming this node
/// under the cluster CA; otherwise keeps the current ones.
bool reload_identity(std::string& error);

/// Called for every decision, on CAF's network threads: keep it short and
/// non-blocking (e.g. hand it to a logger).
void set_event_handler(std::function<void(const event&)> handler);

struct counters {
  uint64_t accepted = 0;
  uint64_t rejected = 0;
  uint64_t timeouts = 0;
};

counters stats();

std::string to_string(const event& x);

} // namespace oncegate::tls
