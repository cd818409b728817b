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
// find_library() and allocate_ex_indexes() below, so the linker takes
// it whenever the policy is used, and self_test() proves at start that the
// calls arrive.

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <caf/actor_system_config.hpp>
#include <caf/node_id.hpp>

#include "common/tls_profile.hpp"

namespace oncegate::tls {

using namespace detail;

namespace {

void free_handshake_state(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<handshake_state*>(ptr);
}

void free_identity_ref(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::shared_ptr<const node_identity>*>(ptr);
}

} // namespace

namespace detail {

bool find_library(const char* library, uintptr_t& lo, uintptr_t& hi) {
  struct range {
    const char* library;
    uintptr_t lo = UINTPTR_MAX;
    uintptr_t hi = 0;
  } r{library};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto out = static_cast<range*>(data);
        auto name = info->dlpi_name;
        if (name == nullptr || strstr(name, out->library) == nullptr)
          return 0;
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

handshake_state* state_of(SSL* ssl) {
  if (ssl == nullptr || g().ssl_index < 0)
    return nullptr;
  return static_cast<handshake_state*>(SSL_get_ex_data(ssl, g().ssl_index));
}

void* next_symbol_address(const char* name) {
  auto ptr = dlsym(RTLD_NEXT, name);
  if (ptr == nullptr) {
    std::fprintf(stderr, "peer_tls: %s not found after this object\n", name);
    std::abort();
  }
  return ptr;
}

void mark_decided(SSL* ssl) {
  if (auto hs = state_of(ssl))
    hs->decided = true;
}

} // namespace detail

namespace {

bool from_caf_openssl(const void* return_address) {
  auto addr = reinterpret_cast<uintptr_t>(return_address);
  return addr >= g().caf_lo.load(std::memory_order_relaxed)
         && addr < g().caf_hi.load(std::memory_order_relaxed);
}


bool policy_applies(const void* return_address) {
  return g().active.load(std::memory_order_acquire)
         && from_caf_openssl(return_address);
}

// With `policy_config::member_sources_only`: whether an inbound
// connection comes from an address of some member (reported and marked
// decided when it does not; the accept interposer closes most such
// connections before a session exists).
bool from_member_host(SSL* ssl, handshake_state* hs) {
  if (!refuse_stranger(SSL_get_fd(ssl)))
    return true;
  hs->decided = true;
  return false;
}

int refuse(SSL* ssl, handshake_state* hs, std::string why);

// A handshake step (`real`: libssl's SSL_connect or SSL_accept) called
// from `caller`: unchanged unless the policy applies. Then given the TLS
// profile (first call), counted, dropped past the deadline, and failures
// the verify callback never saw reported.
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
      // The connection's first call, before its first byte. libcaf_openssl
      // sets a cipher list of its own ("HIGH:!aNULL:!MD5", CBC suites
      // among them) after SSL_CTX_set_verify: the connection gets the one
      // profile of all our TLS (common/tls_profile.hpp) back here. The
      // floor stays TLS 1.3 (SSL_CTX_set_verify below): the profile never
      // lowers one.
      if (std::string why; !apply_profile(ssl, why))
        return refuse(ssl, nullptr, "cannot apply the TLS profile: " + why);
      hs = new handshake_state;
      hs->started = std::chrono::steady_clock::now();
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
  auto err = ret == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, ret);
  if (hs != nullptr) {
    // Waiting for the peer: no write events until it sends (peer_tls_sockets).
    if (err == SSL_ERROR_WANT_READ) {
      hs->held_fd = SSL_get_fd(ssl);
      hold_writes(hs->held_fd);
    } else if (hs->held_fd >= 0) {
      release_writes(hs->held_fd);
      hs->held_fd = -1;
    }
  }
  if (ret != 1 && hs != nullptr && !hs->decided) {
    // Failures the verify callback never saw: no certificate, no common
    // protocol, not TLS at all, peer gone.
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

// Refuses the connection of `ssl` for `why`: reported once, and every
// further read and write fails (SSL_ERROR_SSL: CAF closes the connection).
int refuse(SSL* ssl, handshake_state* hs, std::string why) {
  if (hs == nullptr || !hs->refused) {
    if (hs != nullptr)
      hs->refused = true;
    event ev;
    ev.kind = event::rejected;
    ev.inbound = SSL_is_server(ssl) == 1;
    ev.peer = peer_of(SSL_get_fd(ssl));
    ev.named_id = hs != nullptr ? hs->peer_id : 0;
    ev.reason = std::move(why);
    report(std::move(ev));
  }
  ERR_raise_data(ERR_LIB_USER, 1, "oncegate: peer refused");
  return -1;
}

// SSL_read for libcaf_openssl: what the peer sends passes the connection's
// BASP guard before CAF sees it (peer_basp.hpp).
int checked_read(SSL* ssl, void* buf, int num, int (*real)(SSL*, void*, int)) {
  auto hs = state_of(ssl);
  if (hs == nullptr || hs->peer_id == 0)
    return refuse(ssl, hs, "no verified peer on this connection");
  if (hs->refused)
    return refuse(ssl, hs, {});
  auto ret = real(ssl, buf, num);
  if (ret <= 0)
    return ret;
  if (!hs->guard) {
    caf::node_id self;
    {
      std::lock_guard<std::mutex> guard{g().mtx};
      self = g().self_node;
    }
    if (!self)
      return refuse(ssl, hs, "this node's CAF node id is not the policy's");
    hs->guard = std::make_unique<basp_guard>(
        hs->peer_id, std::move(self), g().max_message.load());
  }
  auto why = hs->guard->feed(static_cast<const char*>(buf),
                             static_cast<size_t>(ret));
  if (why.empty())
    return ret;
  return refuse(ssl, hs, std::move(why));
}

} // namespace

} // namespace oncegate::tls

// -- this node's CAF node id ---------------------------------------------------
//
// libcaf_io's middleman asks for the node id once, while the actor system
// starts; under the policy it is (pid, caf_host_id(this node)), so that
// peers can tell which member a node id claims to be (peer_basp.hpp).

namespace caf {

node_id node_id::default_data::local(const actor_system_config& cfg) {
  using local_fn = node_id (*)(const actor_system_config&);
  static const auto real = oncegate::tls::detail::next_symbol<local_fn>(
      "_ZN3caf7node_id12default_data5localERKNS_19actor_system_configE");
  auto& G = oncegate::tls::detail::g();
  auto st = oncegate::tls::detail::current_state();
  if (!G.active.load(std::memory_order_acquire) || !st)
    return real(cfg);
  auto id = oncegate::tls::caf_node_of(st->config.self_id,
                                       static_cast<uint32_t>(getpid()));
  std::lock_guard<std::mutex> guard{G.mtx};
  G.self_node = id;
  return id;
}

} // namespace caf

// -- interposed OpenSSL functions ---------------------------------------------
//
// Defined in the executable, these take the place of libssl's for every
// caller in the process; calls that don't come from libcaf_openssl (or come
// before configure()) are forwarded unchanged.

using oncegate::tls::detail::next_symbol;
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
      for (auto& ca : st->cas)
        X509_STORE_add_cert(store, ca.get());
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
// Reads also pass the BASP guard; a refused connection neither reads nor
// writes again.
ONCEGATE_INTERPOSE int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_symbol<int (*)(SSL*, void*, int)>("SSL_read");
  if (!oncegate::tls::policy_applies(__builtin_return_address(0)))
    return real(ssl, buf, num);
  ERR_clear_error();
  return oncegate::tls::checked_read(ssl, buf, num, real);
}

ONCEGATE_INTERPOSE int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real
    = next_symbol<int (*)(SSL*, const void*, int)>("SSL_write");
  if (!oncegate::tls::policy_applies(__builtin_return_address(0)))
    return real(ssl, buf, num);
  ERR_clear_error();
  if (auto hs = oncegate::tls::detail::state_of(ssl); hs && hs->refused)
    return oncegate::tls::refuse(ssl, hs, {});
  return real(ssl, buf, num);
}

} // extern "C"

namespace oncegate::tls::detail {

std::string not_interposed() {
  // What libcaf_openssl and libcaf_io bind to is the first definition in
  // the process's global scope: it must be this executable's.
  struct entry {
    const char* name;
    void* ours;
  };
  const entry entries[] = {
    {"SSL_CTX_set_verify", reinterpret_cast<void*>(&SSL_CTX_set_verify)},
    {"SSL_CTX_use_certificate_chain_file",
     reinterpret_cast<void*>(&SSL_CTX_use_certificate_chain_file)},
    {"SSL_CTX_use_PrivateKey_file",
     reinterpret_cast<void*>(&SSL_CTX_use_PrivateKey_file)},
    {"SSL_connect", reinterpret_cast<void*>(&SSL_connect)},
    {"SSL_accept", reinterpret_cast<void*>(&SSL_accept)},
    {"SSL_read", reinterpret_cast<void*>(&SSL_read)},
    {"SSL_write", reinterpret_cast<void*>(&SSL_write)},
    {"accept", socket_interposer("accept")},
    {"epoll_ctl", socket_interposer("epoll_ctl")},
    {"epoll_wait", socket_interposer("epoll_wait")},
    {"_ZN3caf7node_id12default_data5localERKNS_19actor_system_configE",
     reinterpret_cast<void*>(&caf::node_id::default_data::local)},
  };
  for (auto& e : entries)
    if (dlsym(RTLD_DEFAULT, e.name) != e.ours)
      return e.name;
  return {};
}

} // namespace oncegate::tls::detail
