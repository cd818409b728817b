#include "routing/peer_tls_impl.hpp"

// The interposition behind the peer policy (see peer_tls.hpp): libssl's
// functions that libcaf_openssl calls, defined here so that the dynamic
// linker binds libcaf_openssl's calls to them; calls from anyone else (or
// before configure()) go on to libssl unchanged. Here too: telling
// libcaf_openssl's calls from others, the ex_data that ties a handshake to
// its start and a context to this node's identity, and the handshake
// deadline. What the policy decides is peer_tls.cpp.
//
// This object must end up in the executable: configure() calls
// find_caf_openssl() and allocate_ex_indexes() below, so the linker takes
// it whenever the policy is used, and self_test() proves at start that the
// calls arrive.

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace oncegate::tls {

using namespace detail;

namespace {

struct handshake_state {
  std::chrono::steady_clock::time_point started;
  bool expired = false;
  /// The verify callback reported on this handshake.
  bool decided = false;
};

void free_handshake_state(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<handshake_state*>(ptr);
}

void free_identity_ref(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::shared_ptr<const node_identity>*>(ptr);
}

} // namespace

namespace detail {

bool find_caf_openssl(uintptr_t& lo, uintptr_t& hi) {
  struct range {
    uintptr_t lo = UINTPTR_MAX;
    uintptr_t hi = 0;
  } r;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto name = info->dlpi_name;
        if (name == nullptr || strstr(name, "libcaf_openssl") == nullptr)
          return 0;
        auto out = static_cast<range*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0)
            continue;
          auto start = static_cast<uintptr_t>(info->dlpi_addr + ph.p_vaddr);
          out->lo = std::min(out->lo, start);
          out->hi = std::max(out->hi, start + ph.p_memsz);
        }
        return 1;
      },
      &r);
  if (r.hi == 0)
    return false;
  lo = r.lo;
  hi = r.hi;
  return true;
}

bool allocate_ex_indexes() {
  auto& G = g();
  if (G.ssl_index < 0)
    G.ssl_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr,
                                       free_handshake_state);
  if (G.ctx_index < 0)
    G.ctx_index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr,
                                           free_identity_ref);
  return G.ssl_index >= 0 && G.ctx_index >= 0;
}

void mark_decided(SSL* ssl) {
  if (ssl == nullptr || g().ssl_index < 0)
    return;
  if (auto hs =
          static_cast<handshake_state*>(SSL_get_ex_data(ssl, g().ssl_index)))
    hs->decided = true;
}

} // namespace detail

namespace {

bool from_caf_openssl(const void* return_address) {
  auto addr = reinterpret_cast<uintptr_t>(return_address);
  return addr >= g().caf_lo.load(std::memory_order_relaxed)
         && addr < g().caf_hi.load(std::memory_order_relaxed);
}

template <class Fn>
Fn next_symbol(const char* name) {
  auto ptr = dlsym(RTLD_NEXT, name);
  if (ptr == nullptr) {
    std::fprintf(stderr, "peer_verify: %s not found after this object\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(ptr);
}

bool policy_applies(const void* return_address) {
  return g().active.load(std::memory_order_acquire)
         && from_caf_openssl(return_address);
}

// With `policy_config::member_sources_only`: whether an inbound
// connection comes from an address of some member (reported and marked
// decided when it does not).
bool from_member_host(SSL* ssl, handshake_state* hs) {
  auto st = current_state();
  if (!st || !st->config.member_sources_only)
    return true;
  std::string ip;
  auto peer = peer_of(SSL_get_fd(ssl), &ip);
  if (ip.empty())
    return true; // not an IP socket (the start-up self test's socketpair)
  for (auto& kv : st->member_ips)
    if (kv.second.count(ip) != 0)
      return true;
  hs->decided = true;
  event ev;
  ev.kind = event::rejected;
  ev.inbound = true;
  ev.peer = peer;
  ev.reason = "connection from " + ip + ", which is no member's address";
  report(std::move(ev));
  return false;
}

// A handshake step (`real`: libssl's SSL_connect or SSL_accept) called
// from `caller`: unchanged unless the policy applies. Then counted, dropped
// past the deadline, and failures the verify callback never saw reported.
int guarded_handshake(SSL* ssl, int (*real)(SSL*), const void* caller,
                      hook which) {
  if (!policy_applies(caller))
    return real(ssl);
  auto& G = g();
  ++G.hooked[which];
  handshake_state* hs = nullptr;
  if (G.ssl_index >= 0) {
    hs = static_cast<handshake_state*>(SSL_get_ex_data(ssl, G.ssl_index));
    if (hs == nullptr) {
      hs = new handshake_state{std::chrono::steady_clock::now()};
      if (SSL_set_ex_data(ssl, G.ssl_index, hs) != 1) {
        delete hs;
        hs = nullptr;
      } else if (which == hook_accept && !from_member_host(ssl, hs)) {
        // Before any TLS: CAF 0.17 busy-polls a pending handshake, so a
        // stranger must not get one at all.
        ERR_raise_data(ERR_LIB_USER, 1, "oncegate: not a member's address");
        return -1;
      }
    }
  }
  auto timeout = G.timeout_ms.load(std::memory_order_relaxed);
  if (hs != nullptr && timeout > 0
      && (hs->expired
          || std::chrono::steady_clock::now() - hs->started
                 > std::chrono::milliseconds(timeout))) {
    if (!hs->expired) {
      hs->expired = true;
      hs->decided = true;
      event ev;
      ev.kind = event::handshake_timeout;
      ev.inbound = which == hook_accept;
      ev.peer = peer_of(SSL_get_fd(ssl));
      ev.reason =
          "TLS handshake not finished after " + std::to_string(timeout) + " ms";
      report(std::move(ev));
    }
    // Makes SSL_get_error() say SSL_ERROR_SSL: CAF closes the connection.
    ERR_raise_data(ERR_LIB_USER, 1, "oncegate: TLS handshake timeout");
    return -1;
  }
  // OpenSSL's error queue is per thread and SSL_get_error reads it: what an
  // earlier connection left there (CAF never empties it; our own timeout
  // pushes one) would turn this connection's harmless "want read" into a
  // fatal error, and CAF would drop a healthy member's link.
  ERR_clear_error();
  auto ret = real(ssl);
  if (ret != 1 && hs != nullptr && !hs->decided) {
    // Failures the verify callback never saw: no certificate, no common
    // protocol, not TLS at all, peer gone.
    auto err = SSL_get_error(ssl, ret);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      hs->decided = true;
      event ev;
      ev.kind = event::rejected;
      ev.inbound = which == hook_accept;
      ev.peer = peer_of(SSL_get_fd(ssl));
      if (auto code = ERR_peek_error(); code != 0) {
        auto text = ERR_reason_error_string(code);
        ev.reason = std::string{"TLS handshake failed: "}
                    + (text != nullptr ? text : "unknown reason");
      } else {
        ev.reason = "connection closed during the TLS handshake";
      }
      report(std::move(ev));
    }
  }
  return ret;
}

} // namespace

} // namespace oncegate::tls

// -- interposed OpenSSL functions ---------------------------------------------
//
// Defined in the executable, these take the place of libssl's for every
// caller in the process; calls that don't come from libcaf_openssl (or come
// before configure()) are forwarded unchanged.

using oncegate::tls::next_symbol;
using oncegate::tls::policy_applies;
using oncegate::tls::detail::g;

// Exported even when compiled with -fvisibility=hidden.
#define ONCEGATE_INTERPOSE __attribute__((visibility("default")))

extern "C" {

ONCEGATE_INTERPOSE void SSL_CTX_set_verify(SSL_CTX* ctx, int mode,
                                           SSL_verify_cb callback) {
  static const auto real =
      next_symbol<void (*)(SSL_CTX*, int, SSL_verify_cb)>("SSL_CTX_set_verify");
  if (!policy_applies(__builtin_return_address(0))) {
    real(ctx, mode, callback);
    return;
  }
  // Whatever CAF asked for (SSL_VERIFY_NONE without certificates): always
  // require and check the peer's certificate, against the cluster CA only.
  ++g().hooked[oncegate::tls::detail::hook_verify];
  real(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
       oncegate::tls::detail::verify_peer);
  if (auto st = oncegate::tls::detail::current_state()) {
    if (auto store = X509_STORE_new()) {
      X509_STORE_add_cert(store, st->ca.get());
      SSL_CTX_set_cert_store(ctx, store); // takes ownership
    }
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
}

ONCEGATE_INTERPOSE int SSL_CTX_use_certificate_chain_file(SSL_CTX* ctx,
                                                          const char* file) {
  static const auto real = next_symbol<int (*)(SSL_CTX*, const char*)>(
      "SSL_CTX_use_certificate_chain_file");
  if (!policy_applies(__builtin_return_address(0)))
    return real(ctx, file);
  auto st = oncegate::tls::detail::current_state();
  if (!st || !st->self)
    return real(ctx, file);
  ++g().hooked[oncegate::tls::detail::hook_chain];
  auto& self = *st->self;
  if (SSL_CTX_use_certificate(ctx, self.leaf.get()) != 1)
    return 0;
  SSL_CTX_clear_chain_certs(ctx);
  for (auto& c : self.chain)
    if (SSL_CTX_add1_chain_cert(ctx, c.get()) != 1)
      return 0;
  // The key call must use the key of this very certificate, even if
  // reload_identity() runs in between.
  auto index = g().ctx_index;
  delete static_cast<std::shared_ptr<const oncegate::tls::node_identity>*>(
      SSL_CTX_get_ex_data(ctx, index));
  auto ref = new std::shared_ptr<const oncegate::tls::node_identity>(st->self);
  if (SSL_CTX_set_ex_data(ctx, index, ref) != 1) {
    delete ref;
    return 0;
  }
  return 1;
}

ONCEGATE_INTERPOSE int SSL_CTX_use_PrivateKey_file(SSL_CTX* ctx,
                                                   const char* file, int type) {
  static const auto real = next_symbol<int (*)(SSL_CTX*, const char*, int)>(
      "SSL_CTX_use_PrivateKey_file");
  if (!policy_applies(__builtin_return_address(0)))
    return real(ctx, file, type);
  auto ref = static_cast<std::shared_ptr<const oncegate::tls::node_identity>*>(
      SSL_CTX_get_ex_data(ctx, g().ctx_index));
  if (ref == nullptr || !*ref)
    return real(ctx, file, type);
  ++g().hooked[oncegate::tls::detail::hook_key];
  return SSL_CTX_use_PrivateKey(ctx, (*ref)->key.get());
}

ONCEGATE_INTERPOSE int SSL_connect(SSL* ssl) {
  static const auto real = next_symbol<int (*)(SSL*)>("SSL_connect");
  return oncegate::tls::guarded_handshake(
      ssl, real, __builtin_return_address(0), oncegate::tls::detail::hook_connect);
}

ONCEGATE_INTERPOSE int SSL_accept(SSL* ssl) {
  static const auto real = next_symbol<int (*)(SSL*)>("SSL_accept");
  return oncegate::tls::guarded_handshake(
      ssl, real, __builtin_return_address(0), oncegate::tls::detail::hook_accept);
}

// CAF reads and writes its connections on one network thread and calls
// SSL_get_error after each of these without emptying the thread's error
// queue first, as OpenSSL requires: a stale entry (a stranger's refused
// handshake) made CAF close every member connection it served next.
ONCEGATE_INTERPOSE int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_symbol<int (*)(SSL*, void*, int)>("SSL_read");
  if (oncegate::tls::policy_applies(__builtin_return_address(0)))
    ERR_clear_error();
  return real(ssl, buf, num);
}

ONCEGATE_INTERPOSE int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real
    = next_symbol<int (*)(SSL*, const void*, int)>("SSL_write");
  if (oncegate::tls::policy_applies(__builtin_return_address(0)))
    ERR_clear_error();
  return real(ssl, buf, num);
}

} // extern "C"
