#pragma once

// A cluster node's TLS identity: the one rule both TLS units apply, the
// Raft transport (replication/tls_transport) and the policy on CAF's
// OpenSSL links (routing/peer_tls).
//
//   * a node's name is the DNS subjectAltName `node-<id>.oncegate` (the
//     subject CN is never looked at, wildcards never match);
//   * the cluster CA is the only trust anchor: its PEM file holds that one
//     CA certificate, or, while the CA is being replaced, the old and the
//     new one (at most `max_cluster_cas`; docs/cluster.md "Rotation");
//   * a node's own certificate (leaf first, then any intermediates) chains
//     to that CA, its private key is the certificate's, and it names this
//     node's id.
//
// Loading reports where it stopped (`identity_failure`): each caller words
// its own messages. How a caller serves the identity (an SSL_CTX of its
// own, CAF's contexts) is the caller's. OpenSSL's headers stay out of here:
// the handles are opaque, unwrapped with `.get()` in the callers' .cpp files.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct x509_st;     // OpenSSL's X509
struct evp_pkey_st; // OpenSSL's EVP_PKEY

namespace oncegate::tls {

struct openssl_free {
  void operator()(x509_st* p) const;
  void operator()(evp_pkey_st* p) const;
};

using x509_ptr = std::unique_ptr<x509_st, openssl_free>;
using pkey_ptr = std::unique_ptr<evp_pkey_st, openssl_free>;

/// The cluster's trust anchors (the certificates of its CA file).
using ca_bundle = std::vector<x509_ptr>;

/// How many CA certificates a cluster CA file may hold.
constexpr size_t max_cluster_cas = 4;

/// A copy (new references) of `cas`.
ca_bundle copy_of(const ca_bundle& cas);

/// Whether `cert` is one of `cas`.
bool is_one_of(x509_st* cert, const ca_bundle& cas);

/// Drains OpenSSL's (thread-local) error queue into one line.
std::string openssl_error();

// -- node names ---------------------------------------------------------------

/// `node-<id>.oncegate`.
std::string node_name(uint64_t id);

/// The id in `node-<id>.oncegate` (case-insensitive; the id syntax of
/// scripts/cluster-certs.sh: 1 to 19 digits, no leading zero), 0 if `dns`
/// is not such a name.
uint64_t parse_node_name(std::string_view dns);

/// Whether `cert` (may be null) names node `id` among its DNS
/// subjectAltNames (X509_check_host, no wildcards, never the subject).
bool names_node(x509_st* cert, uint64_t id);

/// The one node `cert` names among its DNS subjectAltNames; 0 with `why`
/// set if it names none or more than one.
uint64_t named_node(x509_st* cert, std::string& why);

/// The node id a certificate (PEM file) names, for tools and tests.
/// Returns 0 and sets `error` if it names none or more than one.
uint64_t node_id_of_cert_file(const std::string& path, std::string& error);

/// The DNS names of a certificate, for log lines (`(none)` if none).
std::string dns_names(x509_st* cert);

/// Untrusted text made safe for a log line: printable ASCII without
/// spaces, at most `limit` characters.
std::string printable(const char* data, size_t len, size_t limit = 128);

// -- loading and checking -----------------------------------------------------

/// The purpose a node's certificate is checked for.
enum class tls_purpose { any, server, client };

/// A node's own certificate and key files.
struct identity_files {
  std::string cert_file;
  std::string key_file;
  /// None: an encrypted key is refused. Empty: OpenSSL's default (it asks
  /// on the terminal, if there is one). Otherwise the key's passphrase.
  std::optional<std::string> key_passphrase;
};

/// A node's own certificate, its intermediates and its key, checked.
struct node_identity {
  x509_ptr leaf;
  std::vector<x509_ptr> chain;
  pkey_ptr key;
};

/// Where loading stopped; `detail` is OpenSSL's error (`*_unreadable`,
/// `*_empty`, `key_unusable`), the chain check's error (`untrusted`) or
/// what is wrong with the names (`unnamed`).
struct identity_failure {
  enum step_t {
    ca_unreadable,   // the CA file cannot be opened
    ca_empty,        // it holds no certificate
    ca_several,      // it holds more than max_cluster_cas
    ca_not_ca,       // its certificate is no CA
    cert_unreadable, // the certificate file cannot be opened
    cert_empty,      // it holds no certificate
    key_unreadable,  // the key file cannot be opened
    key_unusable,    // no private key read from it (or an encrypted one)
    key_mismatch,    // the key is not the certificate's
    untrusted,       // no chain to the CA for `purpose`
    unnamed,         // the certificate names no node, or more than one
    wrong_node,      // it names node `named`, not the expected one
  };
  step_t step = ca_unreadable;
  std::string detail;
  tls_purpose purpose = tls_purpose::any;
  uint64_t named = 0;
};

/// Reads the cluster CA file: one to `max_cluster_cas` CA certificates in
/// `path`.
bool load_ca(const std::string& path, ca_bundle& out, identity_failure& why);

/// Reads and checks a node's own certificate and key under `cas` (from
/// `load_ca`), in this order: the certificate, the key, the key matches,
/// the chain to one of `cas` for each of `purposes`, and, unless `self_id`
/// is 0, that the certificate names exactly node `self_id`.
bool load_identity(const identity_files& files, const ca_bundle& cas,
                   const std::vector<tls_purpose>& purposes, uint64_t self_id,
                   node_identity& out, identity_failure& why);

} // namespace oncegate::tls
