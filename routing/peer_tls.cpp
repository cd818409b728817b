#include "routing/peer_tls.hpp"

#include <dlfcn.h>
#include <link.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/session.hpp>

namespace oncegate::tls {

namespace {

// -- OpenSSL ownership --------------------------------------------------------

struct openssl_free {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
};

using x509_ptr = std::unique_ptr<X509, openssl_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, openssl_free>;
using bio_ptr = std::unique_ptr<BIO, openssl_free>;
using store_ptr = std::unique_ptr<X509_STORE, openssl_free>;
using store_ctx_ptr = std::unique_ptr<X509_STORE_CTX, openssl_free>;

std::string openssl_error() {
  std::string result;
  while (auto code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!result.empty())
      result += "; ";
    result += buf;
  }
  return result.empty() ? std::string{"unknown OpenSSL error"} : result;
}

// -- node names ---------------------------------------------------------------

constexpr std::string_view name_prefix = "node-";
constexpr std::string_view name_suffix = ".oncegate";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i] >= 'A' && a[i] <= 'Z' ? a[i] - 'A' + 'a' : a[i];
    if (x != b[i])
      return false;
  }
  return true;
}

/// The id in `node-<id>.oncegate` (same id syntax as cluster-certs.sh:
/// 1 to 19 digits, no leading zero), 0 if `dns` is not such a name.
uint64_t parse_node_name(std::string_view dns) {
  if (dns.size() <= name_prefix.size() + name_suffix.size()
      || !iequals(dns.substr(0, name_prefix.size()), name_prefix)
      || !iequals(dns.substr(dns.size() - name_suffix.size()), name_suffix))
    return 0;
  auto digits = dns.substr(name_prefix.size(), dns.size() - name_prefix.size()
                                                   - name_suffix.size());
  if (digits.size() > 19 || digits[0] == '0')
    return 0;
  uint64_t id = 0;
  for (auto c : digits) {
    if (c < '0' || c > '9')
      return 0;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return id;
}

/// The one node a certificate names among its DNS subjectAltNames. The
/// subject CN is ignored.
uint64_t named_node(X509* cert, std::string& why) {
  auto names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) {
    why = "certificate has no subjectAltName";
    return 0;
  }
  uint64_t found = 0;
  int count = 0;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    auto name = sk_GENERAL_NAME_value(names, i);
    if (name->type != GEN_DNS)
      continue;
    auto str = name->d.dNSName;
    std::string_view dns{
        reinterpret_cast<const char*>(ASN1_STRING_get0_data(str)),
        static_cast<size_t>(ASN1_STRING_length(str))};
    if (auto id = parse_node_name(dns); id != 0) {
      found = id;
      ++count;
    }
  }
  GENERAL_NAMES_free(names);
  if (count == 0) {
    why = "certificate names no node-<id>.oncegate";
    return 0;
  }
  if (count > 1) {
    why = "certificate names more than one node";
    return 0;
  }
  return found;
}

// -- addresses ----------------------------------------------------------------

/// Numeric IP of a socket address; IPv4-mapped IPv6 addresses as IPv4.
std::string ip_of(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET) {
    auto in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    auto in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
      inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], buf, sizeof(buf));
    else
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

std::string endpoint_key(const std::string& ip, uint16_t port) {
  if (ip.find(':') != std::string::npos)
    return "[" + ip + "]:" + std::to_string(port);
  return ip + ":" + std::to_string(port);
}

/// "ip:port" of the socket's peer, empty if unknown.
std::string peer_of(int fd, std::string* ip = nullptr) {
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (fd < 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return {};
  auto sa = reinterpret_cast<const sockaddr*>(&addr);
  auto host = ip_of(sa);
  if (host.empty())
    return {};
  uint16_t port =
      sa->sa_family == AF_INET
          ? ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port)
          : ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port);
  if (ip != nullptr)
    *ip = host;
  return endpoint_key(host, port);
}

bool resolve(const std::string& host, std::vector<std::string>& ips,
             std::string& error) {
  addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (auto rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    error = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return false;
  }
  for (auto ai = res; ai != nullptr; ai = ai->ai_next) {
    auto ip = ip_of(ai->ai_addr);
    if (!ip.empty())
      ips.push_back(ip);
  }
  freeaddrinfo(res);
  if (ips.empty()) {
    error = "no address for '" + host + "'";
    return false;
  }
  return true;
}

// -- policy state ------------------------------------------------------------

struct identity {
  x509_ptr leaf;
  std::vector<x509_ptr> chain;
  pkey_ptr key;
};

/// Immutable; replaced as a whole.
struct policy_state {
  policy_config config;
  x509_ptr ca;
  std::shared_ptr<const identity> self;
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

globals& g() {
  static globals instance;
  return instance;
}

std::shared_ptr<const policy_state> current_state() {
  std::lock_guard<std::mutex> guard{g().mtx};
  return g().state;
}

void report(event ev) {
  auto& G = g();
  switch (ev.kind) {
    case event::accepted:
      ++G.accepted;
      break;
    case event::rejected:
      ++G.rejected;
      break;
    case event::handshake_timeout:
      ++G.timeouts;
      break;
  }
  std::shared_ptr<const std::function<void(const event&)>> handler;
  {
    std::lock_guard<std::mutex> guard{G.mtx};
    handler = G.handler;
  }
  if (handler && *handler)
    (*handler)(ev);
}

bool from_caf_openssl(const void* return_address) {
  auto addr = reinterpret_cast<uintptr_t>(return_address);
  return addr >= g().caf_lo.load(std::memory_order_relaxed)
         && addr < g().caf_hi.load(std::memory_order_relaxed);
}

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

// -- loading and checking certificates ---------------------------------------

bool load_ca(const std::string& path, x509_ptr& out, std::string& error) {
  bio_ptr bio{BIO_new_file(path.c_str(), "r")};
  if (!bio) {
    error = "cannot read CA file " + path + ": " + openssl_error();
    return false;
  }
  x509_ptr ca{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)};
  if (!ca) {
    error = "no certificate in CA file " + path + ": " + openssl_error();
    return false;
  }
  x509_ptr extra{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)};
  ERR_clear_error(); // the end of the file
  if (extra) {
    error = "CA file " + path
            + " holds more than one certificate (expected "
              "exactly the cluster CA)";
    return false;
  }
  if (X509_check_ca(ca.get()) < 1) {
    error = "certificate in " + path + " is not a CA";
    return false;
  }
  out = std::move(ca);
  return true;
}

bool chains_to(X509* ca, X509* leaf, const std::vector<x509_ptr>& chain,
               std::string& error) {
  store_ptr store{X509_STORE_new()};
  store_ctx_ptr ctx{X509_STORE_CTX_new()};
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (auto& c : chain)
    sk_X509_push(untrusted, c.get());
  bool ok = store && ctx && X509_STORE_add_cert(store.get(), ca) == 1
            && X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted) == 1
            && X509_verify_cert(ctx.get()) == 1;
  if (!ok)
    error = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
  sk_X509_free(untrusted);
  ERR_clear_error();
  return ok;
}

bool load_identity(const policy_config& cfg, X509* ca,
                   std::shared_ptr<const identity>& out, std::string& error) {
  auto result = std::make_shared<identity>();
  {
    bio_ptr bio{BIO_new_file(cfg.cert_file.c_str(), "r")};
    if (!bio) {
      error = "cannot read " + cfg.cert_file + ": " + openssl_error();
      return false;
    }
    result->leaf.reset(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!result->leaf) {
      error = "no certificate in " + cfg.cert_file + ": " + openssl_error();
      return false;
    }
    while (auto x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
      result->chain.emplace_back(x);
    ERR_clear_error();
  }
  {
    bio_ptr bio{BIO_new_file(cfg.key_file.c_str(), "r")};
    if (!bio) {
      error = "cannot read " + cfg.key_file + ": " + openssl_error();
      return false;
    }
    // With a null callback, OpenSSL takes `u` as the passphrase.
    auto pass = cfg.key_passphrase.empty()
                    ? nullptr
                    : const_cast<char*>(cfg.key_passphrase.c_str());
    result->key.reset(
        PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, pass));
    if (!result->key) {
      error = "cannot load the private key " + cfg.key_file + ": "
              + openssl_error();
      return false;
    }
  }
  if (X509_check_private_key(result->leaf.get(), result->key.get()) != 1) {
    ERR_clear_error();
    error = cfg.key_file + " is not the key of " + cfg.cert_file;
    return false;
  }
  std::string why;
  if (!chains_to(ca, result->leaf.get(), result->chain, why)) {
    error = cfg.cert_file + " is not valid under the cluster CA: " + why;
    return false;
  }
  auto id = named_node(result->leaf.get(), why);
  if (id == 0) {
    error = cfg.cert_file + ": " + why;
    return false;
  }
  if (id != cfg.self_id) {
    error = cfg.cert_file + " names node " + std::to_string(id)
            + ", but this is node " + std::to_string(cfg.self_id);
    return false;
  }
  out = std::move(result);
  return true;
}

bool index_members(const std::vector<member>& members, policy_state& st,
                   std::string& error) {
  st.member_ips.clear();
  st.by_endpoint.clear();
  for (auto& m : members) {
    if (m.id == 0 || m.port == 0) {
      error = "member with id 0 or port 0";
      return false;
    }
    if (st.member_ips.count(m.id) != 0) {
      error = "member " + std::to_string(m.id) + " listed twice";
      return false;
    }
    if (m.host.empty() || m.host == "0.0.0.0" || m.host == "::") {
      error = "member " + std::to_string(m.id)
              + ": host must be an address the other nodes connect to";
      return false;
    }
    std::vector<std::string> ips;
    if (!resolve(m.host, ips, error)) {
      error = "member " + std::to_string(m.id) + ": " + error;
      return false;
    }
    auto& mine = st.member_ips[m.id];
    for (auto& ip : ips) {
      mine.insert(ip);
      auto key = endpoint_key(ip, m.port);
      auto [i, added] = st.by_endpoint.emplace(key, m.id);
      if (!added && i->second != m.id) {
        error = "members " + std::to_string(i->second) + " and "
                + std::to_string(m.id) + " share the address " + key;
        return false;
      }
    }
  }
  return true;
}

// -- the checks
// ----------------------------------------------------------------

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
  delete static_cast<std::shared_ptr<const identity>*>(ptr);
}

void mark_decided(SSL* ssl) {
  if (ssl == nullptr || g().ssl_index < 0)
    return;
  if (auto hs =
          static_cast<handshake_state*>(SSL_get_ex_data(ssl, g().ssl_index)))
    hs->decided = true;
}

int reject(X509_STORE_CTX* sctx, event ev) {
  ev.kind = event::rejected;
  X509_STORE_CTX_set_error(sctx, X509_V_ERR_APPLICATION_VERIFICATION);
  report(std::move(ev));
  return 0;
}

/// Verify callback installed on every SSL_CTX that libcaf_openssl creates.
int verify_peer(int preverify_ok, X509_STORE_CTX* sctx) {
  auto ssl = static_cast<SSL*>(
      X509_STORE_CTX_get_ex_data(sctx, SSL_get_ex_data_X509_STORE_CTX_idx()));
  event ev;
  std::string peer_ip;
  if (ssl != nullptr) {
    ev.inbound = SSL_is_server(ssl) == 1;
    ev.peer = peer_of(SSL_get_fd(ssl), &peer_ip);
  }
  auto depth = X509_STORE_CTX_get_error_depth(sctx);
  if (preverify_ok != 1 || depth == 0)
    mark_decided(ssl);
  if (preverify_ok != 1) {
    ev.reason = std::string{"chain check failed at depth "}
                + std::to_string(depth) + ": "
                + X509_verify_cert_error_string(X509_STORE_CTX_get_error(sctx));
    ev.kind = event::rejected;
    report(std::move(ev));
    return 0;
  }
  if (depth != 0)
    return 1; // CA and intermediates: OpenSSL's check suffices.
  auto st = current_state();
  if (!st || ssl == nullptr) {
    ev.reason = "no policy state";
    return reject(sctx, std::move(ev));
  }
  // Pin: the chain must end in the cluster CA itself.
  auto chain = X509_STORE_CTX_get0_chain(sctx);
  auto n = chain != nullptr ? sk_X509_num(chain) : 0;
  if (n < 2 || X509_cmp(sk_X509_value(chain, n - 1), st->ca.get()) != 0) {
    ev.reason = "certificate is not issued under the cluster CA";
    return reject(sctx, std::move(ev));
  }
  std::string why;
  ev.named_id = named_node(X509_STORE_CTX_get_current_cert(sctx), why);
  if (ev.named_id == 0) {
    ev.reason = why;
    return reject(sctx, std::move(ev));
  }
  auto ips = st->member_ips.find(ev.named_id);
  if (ev.inbound) {
    if (ips == st->member_ips.end()) {
      ev.reason = "certificate names node " + std::to_string(ev.named_id)
                  + ", which is not a member";
      return reject(sctx, std::move(ev));
    }
    if (st->config.bind_inbound_address && ips->second.count(peer_ip) == 0) {
      ev.reason = "certificate names node " + std::to_string(ev.named_id)
                  + ", but the connection comes from " + peer_ip
                  + ", not one of its addresses";
      return reject(sctx, std::move(ev));
    }
  } else {
    auto i = st->by_endpoint.find(ev.peer);
    if (i == st->by_endpoint.end()) {
      ev.reason = "connected to " + (ev.peer.empty() ? "?" : ev.peer)
                  + ", which is no member's address";
      return reject(sctx, std::move(ev));
    }
    ev.expected_id = i->second;
    if (ev.named_id != ev.expected_id) {
      ev.reason = "the address of node " + std::to_string(ev.expected_id)
                  + " answered with a certificate of node "
                  + std::to_string(ev.named_id);
      return reject(sctx, std::move(ev));
    }
  }
  ev.kind = event::accepted;
  report(std::move(ev));
  return 1;
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

int guarded_handshake(SSL* ssl, int (*real)(SSL*), hook which) {
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

// -- public API -------------------------------------------------------------

bool configure(caf::actor_system_config& cfg, const policy_config& config,
               std::string& error) {
  if (config.self_id == 0 || config.ca_file.empty() || config.cert_file.empty()
      || config.key_file.empty()) {
    error = "peer policy needs self_id, ca_file, cert_file and key_file";
    return false;
  }
  auto st = std::make_shared<policy_state>();
  st->config = config;
  if (!load_ca(config.ca_file, st->ca, error)
      || !load_identity(config, st->ca.get(), st->self, error)
      || !index_members(config.members, *st, error))
    return false;
  uintptr_t lo = 0;
  uintptr_t hi = 0;
  if (!find_caf_openssl(lo, hi)) {
    error = "libcaf_openssl is not loaded as a shared library: the peer "
            "policy cannot be enforced";
    return false;
  }
  auto& G = g();
  {
    std::lock_guard<std::mutex> guard{G.mtx};
    if (G.ssl_index < 0)
      G.ssl_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr,
                                         free_handshake_state);
    if (G.ctx_index < 0)
      G.ctx_index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr,
                                             free_identity_ref);
    if (G.ssl_index < 0 || G.ctx_index < 0) {
      error = "cannot allocate OpenSSL ex_data indexes";
      return false;
    }
    G.state = std::move(st);
  }
  G.caf_lo = lo;
  G.caf_hi = hi;
  G.timeout_ms = config.handshake_timeout.count();
  G.active.store(true, std::memory_order_release);
  // CAF needs these to run in certificate mode at all (otherwise it uses
  // unauthenticated TLS); the files it reads are replaced by our copies.
  cfg.openssl_certificate = config.cert_file;
  cfg.openssl_key = config.key_file;
  cfg.openssl_passphrase = config.key_passphrase;
  cfg.openssl_cafile = config.ca_file;
  cfg.openssl_capath.clear();
  return true;
}

bool self_test(caf::actor_system& sys, std::string& error) {
  auto& G = g();
  if (!G.active) {
    error = "peer policy not configured";
    return false;
  }
  if (!sys.has_openssl_manager()) {
    error = "the CAF OpenSSL manager is not loaded";
    return false;
  }
  if (!sys.openssl_manager().authentication_enabled()) {
    error = "CAF's OpenSSL manager runs without certificates";
    return false;
  }
  uint64_t before[hook_count];
  for (int i = 0; i < hook_count; ++i)
    before[i] = G.hooked[i];
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    error = std::string{"socketpair: "} + strerror(errno);
    return false;
  }
  caf::io::network::nonblocking(fds[0], true);
  try {
    // Makes libcaf_openssl create an SSL context and start accepting, as for
    // a real connection; nothing is sent to anyone.
    auto session = caf::openssl::make_session(sys, fds[0], true);
    if (!session)
      error = "libcaf_openssl could not create a session";
  } catch (std::exception& ex) {
    error =
        std::string{"libcaf_openssl failed to create a session: "} + ex.what();
  }
  close(fds[0]);
  close(fds[1]);
  if (!error.empty())
    return false;
  const char* names[hook_count] = {
      "SSL_CTX_set_verify", "SSL_CTX_use_certificate_chain_file",
      "SSL_CTX_use_PrivateKey_file", "SSL_connect", "SSL_accept"};
  for (int i : {hook_verify, hook_chain, hook_key, hook_accept}) {
    if (G.hooked[i] == before[i]) {
      error = std::string{"libcaf_openssl's call of "} + names[i]
              + " did not reach the peer policy (is CAF linked statically, "
                "or this unit dropped by the linker?)";
      return false;
    }
  }
  return true;
}

bool update_members(const std::vector<member>& members, std::string& error) {
  auto old = current_state();
  if (!old) {
    error = "peer policy not configured";
    return false;
  }
  auto st = std::make_shared<policy_state>();
  st->config = old->config;
  st->config.members = members;
  st->ca.reset(X509_dup(old->ca.get()));
  st->self = old->self;
  if (!index_members(members, *st, error))
    return false;
  std::lock_guard<std::mutex> guard{g().mtx};
  g().state = std::move(st);
  return true;
}

bool reload_identity(std::string& error) {
  auto old = current_state();
  if (!old) {
    error = "peer policy not configured";
    return false;
  }
  std::shared_ptr<const identity> fresh;
  if (!load_identity(old->config, old->ca.get(), fresh, error))
    return false;
  auto st = std::make_shared<policy_state>();
  st->config = old->config;
  st->ca.reset(X509_dup(old->ca.get()));
  st->self = std::move(fresh);
  st->member_ips = old->member_ips;
  st->by_endpoint = old->by_endpoint;
  std::lock_guard<std::mutex> guard{g().mtx};
  g().state = std::move(st);
  return true;
}

void set_event_handler(std::function<void(const event&)> handler) {
  auto ptr = std::make_shared<const std::function<void(const event&)>>(
      std::move(handler));
  std::lock_guard<std::mutex> guard{g().mtx};
  g().handler = std::move(ptr);
}

uint64_t node_id_of_cert_file(const std::string& path, std::string& error) {
  bio_ptr bio{BIO_new_file(path.c_str(), "r")};
  x509_ptr cert{bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)
                    : nullptr};
  if (!cert) {
    error = "cannot read a certificate from " + path + ": " + openssl_error();
    return 0;
  }
  return named_node(cert.get(), error);
}

counters stats() {
  return {g().accepted.load(), g().rejected.load(), g().timeouts.load()};
}

std::string to_string(const event& x) {
  std::string result;
  switch (x.kind) {
    case event::accepted:
      result = "accepted";
      break;
    case event::rejected:
      result = "rejected";
      break;
    case event::handshake_timeout:
      result = "handshake_timeout";
      break;
  }
  result += x.inbound ? " inbound" : " outbound";
  result += " peer=" + (x.peer.empty() ? std::string{"?"} : x.peer);
  if (x.named_id != 0)
    result += " named=" + std::to_string(x.named_id);
  if (x.expected_id != 0)
    result += " expected=" + std::to_string(x.expected_id);
  if (!x.reason.empty())
    result += " reason=\"" + x.reason + "\"";
  return result;
}

} // namespace oncegate::tls

// -- interposed OpenSSL functions ---------------------------------------------
//
// Defined in the executable, these take the place of libssl's for every
// caller in the process; calls that don't come from libcaf_openssl (or come
// before configure()) are forwarded unchanged.

using oncegate::tls::g;
using oncegate::tls::next_symbol;
using oncegate::tls::policy_applies;

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
  ++g().hooked[oncegate::tls::hook_verify];
  real(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
       oncegate::tls::verify_peer);
  if (auto st = oncegate::tls::current_state()) {
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
  auto st = oncegate::tls::current_state();
  if (!st || !st->self)
    return real(ctx, file);
  ++g().hooked[oncegate::tls::hook_chain];
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
  delete static_cast<std::shared_ptr<const oncegate::tls::identity>*>(
      SSL_CTX_get_ex_data(ctx, index));
  auto ref = new std::shared_ptr<const oncegate::tls::identity>(st->self);
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
  auto ref = static_cast<std::shared_ptr<const oncegate::tls::identity>*>(
      SSL_CTX_get_ex_data(ctx, g().ctx_index));
  if (ref == nullptr || !*ref)
    return real(ctx, file, type);
  ++g().hooked[oncegate::tls::hook_key];
  return SSL_CTX_use_PrivateKey(ctx, (*ref)->key.get());
}

ONCEGATE_INTERPOSE int SSL_connect(SSL* ssl) {
  static const auto real = next_symbol<int (*)(SSL*)>("SSL_connect");
  if (!policy_applies(__builtin_return_address(0)))
    return real(ssl);
  return oncegate::tls::guarded_handshake(ssl, real,
                                          oncegate::tls::hook_connect);
}

ONCEGATE_INTERPOSE int SSL_accept(SSL* ssl) {
  static const auto real = next_symbol<int (*)(SSL*)>("SSL_accept");
  if (!policy_applies(__builtin_return_address(0)))
    return real(ssl);
  return oncegate::tls::guarded_handshake(ssl, real,
                                          oncegate::tls::hook_accept);
}

} // extern "C"
