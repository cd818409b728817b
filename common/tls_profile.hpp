#pragma once

// The one TLS profile of every TLS context oncegate makes: the HTTP
// listener's (http/server_tls), the upstream client's (http/upstream_tls,
// which the admin CLI's HTTPS client is made with too), the Raft transport's
// (replication/tls_transport) and the peer links' through libcaf_openssl
// (routing/peer_tls). Mozilla's "intermediate" configuration (Server Side
// TLS 5.7): TLS 1.2 and 1.3 only; in TLS 1.2 only ECDHE with an AEAD cipher
// (AES-GCM, ChaCha20-Poly1305), so no CBC (LUCKY13 and its kin), no SHA-1
// MAC, no RSA key exchange (no forward secrecy); TLS 1.3's three suites,
// all AEAD; the client chooses among them (all are strong, and a client
// without AES instructions rightly prefers ChaCha20).
//
// Mozilla's list also has DHE-RSA-AES128/256-GCM: left out. A server needs
// Diffie-Hellman parameters for them, which none of ours has (the listener
// takes a certificate and a key, nothing else), so it never chose them;
// every client the intermediate profile serves (Firefox 27, Chrome 31,
// Android 4.4.2, Java 8u31, OpenSSL 1.0.1, IE 11 on Windows 7, Safari 9)
// speaks ECDHE; and as a client, offering DHE would let the server pick
// the group (1024-bit ones are still out there).
//
// Only what every context shares is here; each caller adds its own
// (certificates, verification, ALPN, session caching).

#include <string>

struct ssl_ctx_st;
struct ssl_st;

namespace oncegate::tls {

/// The TLS 1.2 cipher suites, OpenSSL's names in Mozilla's order.
extern const char* const profile_tls12_ciphers;

/// The TLS 1.3 cipher suites (OpenSSL's defaults, said here so that an
/// `openssl.cnf` cannot add one).
extern const char* const profile_tls13_ciphersuites;

/// The key-exchange groups, in order of preference.
extern const char* const profile_groups;

/// Puts the profile on `ctx` before any connection is made from it:
/// protocol floor TLS 1.2 (a higher floor the caller set stays), the cipher
/// suites and groups above, the client's cipher preference, no compression,
/// no renegotiation. False, with OpenSSL's reason in `error`, if OpenSSL
/// refuses part of it: the context must not be used then.
bool apply_profile(ssl_ctx_st* ctx, std::string& error);

/// The same on one connection, for a context whose owner sets its own
/// cipher list after we had our say (libcaf_openssl does).
bool apply_profile(ssl_st* ssl, std::string& error);

} // namespace oncegate::tls
