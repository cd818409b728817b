#include "routing/peer_tls.hpp"

// The node-identity policy on CAF's OpenSSL links (see peer_tls.hpp): the
// member table (who is a member, at which addresses), the decision on each
// peer certificate (verify_peer), events and counters, and the public API.
// The OpenSSL functions that bring libcaf_openssl's calls here, and the
// handshake deadline, are peer_tls_interpose.cpp; which certificate names
// which node is replication/tls_identity.*.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/session.hpp>

#include "routing/peer_tls_impl.hpp"

namespace oncegate::tls {

using namespace detail;

namespace {

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

// -- loading and checking certificates ---------------------------------------

// The policy's words for a CA, certificate or key that did not load or check.
std::string describe(const identity_failure& why, const policy_config& cfg) {
  using failure = identity_failure;
  switch (why.step) {
    case failure::ca_unreadable:
      return "cannot read CA file " + cfg.ca_file + ": " + why.detail;
    case failure::ca_empty:
      return "no certificate in CA file " + cfg.ca_file + ": " + why.detail;
    case failure::ca_several:
      return "CA file " + cfg.ca_file + " holds more than "
             + std::to_string(max_cluster_cas)
             + " certificates (expected the cluster CA, two while it is "
               "replaced)";
    case failure::ca_not_ca:
      return "a certificate in " + cfg.ca_file + " is not a CA";
    case failure::cert_unreadable:
      return "cannot read " + cfg.cert_file + ": " + why.detail;
    case failure::cert_empty:
      return "no certificate in " + cfg.cert_file + ": " + why.detail;
    case failure::key_unreadable:
      return "cannot read " + cfg.key_file + ": " + why.detail;
    case failure::key_unusable:
      return "cannot load the private key " + cfg.key_file + ": " + why.detail;
    case failure::key_mismatch:
      return cfg.key_file + " is not the key of " + cfg.cert_file;
    case failure::untrusted:
      return cfg.cert_file + " is not valid under the cluster CA: "
             + why.detail;
    case failure::unnamed:
      return cfg.cert_file + ": " + why.detail;
    case failure::wrong_node:
      return cfg.cert_file + " names node " + std::to_string(why.named)
             + ", but this is node " + std::to_string(cfg.self_id);
  }
  return why.detail;
}

bool read_ca(const policy_config& cfg, ca_bundle& out, std::string& error) {
  identity_failure why;
  if (load_ca(cfg.ca_file, out, why))
    return true;
  error = describe(why, cfg);
  return false;
}

// This node's certificate and key, naming `cfg.self_id` under `ca`.
bool read_identity(const policy_config& cfg, const ca_bundle& cas,
                   std::shared_ptr<const node_identity>& out,
                   std::string& error) {
  auto result = std::make_shared<node_identity>();
  identity_failure why;
  if (!load_identity({cfg.cert_file, cfg.key_file, cfg.key_passphrase}, cas,
                     {tls_purpose::any}, cfg.self_id, *result, why)) {
    error = describe(why, cfg);
    return false;
  }
  out = std::move(result);
  return true;
}

// -- member table -------------------------------------------------------------

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

// -- the checks ---------------------------------------------------------------

int reject(X509_STORE_CTX* sctx, event ev) {
  ev.kind = event::rejected;
  X509_STORE_CTX_set_error(sctx, X509_V_ERR_APPLICATION_VERIFICATION);
  report(std::move(ev));
  return 0;
}

} // namespace

namespace detail {

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

std::string peer_of(int fd, std::string* ip) {
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
  // Pin: the chain must end in a cluster CA itself.
  auto chain = X509_STORE_CTX_get0_chain(sctx);
  auto n = chain != nullptr ? sk_X509_num(chain) : 0;
  if (n < 2 || !is_one_of(sk_X509_value(chain, n - 1), st->cas)) {
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
  if (auto hs = state_of(ssl))
    hs->peer_id = ev.named_id;
  ev.kind = event::accepted;
  report(std::move(ev));
  return 1;
}

} // namespace detail

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
  if (!read_ca(config, st->cas, error)
      || !read_identity(config, st->cas, st->self, error)
      || !index_members(config.members, *st, error))
    return false;
  uintptr_t lo = 0;
  uintptr_t hi = 0;
  // Defined beside the interposers: these calls are what links them in.
  uintptr_t io_lo = 0;
  uintptr_t io_hi = 0;
  if (!find_library("libcaf_openssl", lo, hi)
      || !find_library("libcaf_io", io_lo, io_hi)) {
    error = "libcaf_openssl or libcaf_io is not loaded as a shared library: "
            "the peer policy cannot be enforced";
    return false;
  }
  auto& G = g();
  {
    std::lock_guard<std::mutex> guard{G.mtx};
    if (!allocate_ex_indexes()) {
      error = "cannot allocate OpenSSL ex_data indexes";
      return false;
    }
    G.state = std::move(st);
  }
  G.caf_lo = lo;
  G.caf_hi = hi;
  G.caf_io_lo = io_lo;
  G.caf_io_hi = io_hi;
  G.timeout_ms = config.handshake_timeout.count();
  G.max_message = config.max_message_bytes;
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
  if (auto name = not_interposed(); !name.empty()) {
    error = "the process does not bind " + name
            + " to the peer policy's definition (is CAF, OpenSSL or this "
              "unit linked statically?)";
    return false;
  }
  auto expected = caf_host_id(current_state()->config.self_id);
  auto self = sys.node();
  if (!self || self->implementation_id() != caf::node_id::default_data::class_id
      || static_cast<const caf::node_id::default_data&>(*self).host_id()
           != expected) {
    error = "the actor system's node id " + caf::to_string(self)
            + " is not bound to this node (libcaf_io's call of "
              "node_id::default_data::local did not reach the peer policy)";
    return false;
  }
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
  st->cas = copy_of(old->cas);
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
  std::shared_ptr<const node_identity> fresh;
  if (!read_identity(old->config, old->cas, fresh, error))
    return false;
  auto st = std::make_shared<policy_state>();
  st->config = old->config;
  st->cas = copy_of(old->cas);
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
