#include "replication/tls_transport.hpp"

// The TLS Raft transport as libraft sees it (a raft_uv_transport: init,
// listen, connect, close), its options and certificates at start, and its
// counters. The inside (the connections, their states and bytes) is
// described in tls_transport_impl.hpp; which certificate names which node
// is tls_identity.*.

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <vector>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/logging.hpp"
#include "common/tls_profile.hpp"
#include "replication/tls_identity.hpp"
#include "replication/tls_transport_impl.hpp"

namespace oncegate::cluster {

namespace detail {

bool split_host_port(const std::string& address, std::string& host,
                     std::string& port) {
  std::string::size_type colon;
  if (!address.empty() && address[0] == '[') {
    auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size()
        || address[close + 1] != ':')
      return false;
    host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos)
      return false;
    host = address.substr(0, colon);
    if (host.find(':') != std::string::npos)
      return false; // IPv6 without brackets: ambiguous
  }
  port = address.substr(colon + 1);
  if (host.empty() || port.empty() || port.size() > 5
      || !std::all_of(port.begin(), port.end(),
                      [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  auto num = std::stoul(port);
  return num >= 1 && num <= 65535;
}

bool numeric_address(const std::string& host, const std::string& port,
                     sockaddr_storage& out) {
  auto num = std::stoi(port);
  std::memset(&out, 0, sizeof(out));
  if (uv_ip4_addr(host.c_str(), num, reinterpret_cast<sockaddr_in*>(&out))
      == 0)
    return true;
  return uv_ip6_addr(host.c_str(), num, reinterpret_cast<sockaddr_in6*>(&out))
         == 0;
}

std::string sockaddr_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    auto in = reinterpret_cast<const sockaddr_in*>(sa);
    uv_ip4_name(in, buf, sizeof(buf));
    return std::string{buf} + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    auto in = reinterpret_cast<const sockaddr_in6*>(sa);
    uv_ip6_name(in, buf, sizeof(buf));
    return "[" + std::string{buf} + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  return "?";
}

void set_errmsg(raft_uv_transport* t, const std::string& msg) {
  std::snprintf(t->errmsg, sizeof(t->errmsg), "%s", msg.c_str());
}

void transport::on_listen(int status) {
  if (status != 0) {
    log::cluster()->warn("tls.accept_failed reason={}", uv_strerror(status));
    return;
  }
  if (closing)
    return;
  auto c = make_connection(false);
  c->init_handles();
  auto rv = uv_accept(reinterpret_cast<uv_stream_t*>(&listener),
                      reinterpret_cast<uv_stream_t*>(&c->tcp));
  if (rv != 0) {
    log::cluster()->warn("tls.accept_failed reason={}", uv_strerror(rv));
    c->close(verdict::failed);
    return;
  }
  sockaddr_storage peer;
  int len = sizeof(peer);
  if (uv_tcp_getpeername(&c->tcp, reinterpret_cast<sockaddr*>(&peer), &len)
      == 0)
    c->remote = sockaddr_text(reinterpret_cast<sockaddr*>(&peer));
  if (handshaking >= max_handshakes) {
    c->refuse(verdict::refused_busy,
              std::to_string(handshaking) + " handshakes in progress");
    return;
  }
  ++handshaking;
  c->counted_handshake = true;
  uv_tcp_nodelay(&c->tcp, 1);
  if (!c->make_ssl()) {
    c->refuse(verdict::refused_handshake, "SSL_new: " + tls::openssl_error());
    return;
  }
  c->state = conn_state::tls;
  c->start_reading_tcp();
}

} // namespace detail

namespace {

using namespace detail;

transport& self_of(raft_uv_transport* t) {
  return *static_cast<transport*>(t->impl);
}

int iface_init(raft_uv_transport* t, raft_id id, const char* address) {
  auto& x = self_of(t);
  auto own = SSL_CTX_get0_certificate(x.ctx);
  if (!tls::names_node(own, id)) {
    set_errmsg(t, "this node's certificate names " + tls::dns_names(own)
                    + ", not " + tls::node_name(id));
    return RAFT_INVALID;
  }
  x.id = id;
  x.address = address;
  uv_tcp_init(x.loop, &x.listener);
  x.listener.data = &x;
  x.listener_open = true;
  return 0;
}

int iface_listen(raft_uv_transport* t, raft_uv_accept_cb cb) {
  auto& x = self_of(t);
  x.accept_cb = cb;
  const auto& where = x.bind_address.empty() ? x.address : x.bind_address;
  std::string host, port;
  if (!split_host_port(where, host, port)) {
    set_errmsg(t, "listen address " + where + " is not host:port");
    return RAFT_INVALID;
  }
  sockaddr_storage addr;
  if (!numeric_address(host, port, addr)) {
    // At start-up, on libraft's call from raft_start: a blocking lookup.
    uv_getaddrinfo_t req;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    auto rv = uv_getaddrinfo(x.loop, &req, nullptr, host.c_str(), port.c_str(),
                             &hints);
    if (rv != 0 || req.addrinfo == nullptr) {
      set_errmsg(t, "listen address " + where + ": " + uv_strerror(rv));
      uv_freeaddrinfo(req.addrinfo);
      return RAFT_IOERR;
    }
    std::memcpy(&addr, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
    uv_freeaddrinfo(req.addrinfo);
  }
  auto rv = uv_tcp_bind(&x.listener, reinterpret_cast<sockaddr*>(&addr), 0);
  if (rv == 0)
    rv = uv_listen(reinterpret_cast<uv_stream_t*>(&x.listener), listen_backlog,
                   [](uv_stream_t* s, int status) {
                     static_cast<transport*>(s->data)->on_listen(status);
                   });
  if (rv != 0) {
    set_errmsg(t, "listen on " + where + ": " + uv_strerror(rv));
    return RAFT_IOERR;
  }
  log::cluster()->info("tls.listening id={} address={}", x.id, where);
  return 0;
}

int iface_connect(raft_uv_transport* t, raft_uv_connect* req, raft_id id,
                  const char* address, raft_uv_connect_cb cb) {
  auto& x = self_of(t);
  if (x.closing)
    return RAFT_CANCELED;
  auto i = x.peers.find(id);
  if (i == x.peers.end()) {
    set_errmsg(t, "node " + std::to_string(id) + " is not a member");
    return RAFT_NOCONNECTION;
  }
  if (i->second != address) {
    set_errmsg(t, "node " + std::to_string(id) + " is at " + i->second
                    + ", not " + address);
    return RAFT_NOCONNECTION;
  }
  std::string host, port;
  if (!split_host_port(i->second, host, port)) {
    set_errmsg(t, "address " + i->second + " is not host:port");
    return RAFT_NOCONNECTION;
  }
  auto c = x.make_connection(true);
  c->req = req;
  c->cb = cb;
  req->cb = cb;
  c->peer_id = id;
  c->peer_address = i->second;
  c->init_handles();
  sockaddr_storage addr;
  if (numeric_address(host, port, addr)) {
    c->start_connect(reinterpret_cast<sockaddr*>(&addr));
    return 0;
  }
  c->state = conn_state::resolving;
  auto r = new resolver{};
  r->conn = c;
  c->resolving = r;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  auto rv = uv_getaddrinfo(
    x.loop, &r->req,
    [](uv_getaddrinfo_t* req, int status, addrinfo* res) {
      std::unique_ptr<resolver> r{reinterpret_cast<resolver*>(req)};
      auto c = r->conn;
      if (c == nullptr) { // gave up on it
        uv_freeaddrinfo(res);
        return;
      }
      c->resolving = nullptr;
      if (status != 0 || res == nullptr) {
        uv_freeaddrinfo(res);
        c->fail_outbound(std::string{"resolve: "} + uv_strerror(status));
        return;
      }
      sockaddr_storage addr;
      std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
      uv_freeaddrinfo(res);
      c->start_connect(reinterpret_cast<sockaddr*>(&addr));
    },
    host.c_str(), port.c_str(), &hints);
  if (rv != 0) {
    c->resolving = nullptr;
    delete r;
    c->fail_outbound(std::string{"resolve: "} + uv_strerror(rv));
  }
  return 0;
}

void iface_close(raft_uv_transport* t, raft_uv_transport_close_cb cb) {
  auto& x = self_of(t);
  x.closing = true;
  x.close_cb = cb;
  if (x.listener_open && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&x.listener)))
    uv_close(reinterpret_cast<uv_handle_t*>(&x.listener), [](uv_handle_t* h) {
      auto x = static_cast<transport*>(h->data);
      x->listener_open = false;
      x->maybe_fire_close();
    });
  for (auto& [serial, c] : x.conns)
    c->close(c->req != nullptr ? verdict::canceled : verdict::done);
  x.maybe_fire_close();
}

// Fails with `error` set unless `path` names a readable regular file.
bool readable(const char* what, const std::string& path, std::string& error) {
  if (path.empty()) {
    error = std::string{what} + " is not set";
    return false;
  }
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    error = std::string{what} + " " + path + ": "
            + (ec ? ec.message() : "no such file");
    return false;
  }
  if (!std::filesystem::is_regular_file(st)) {
    error = std::string{what} + " " + path + ": not a regular file";
    return false;
  }
  auto f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    error = std::string{what} + " " + path + ": " + std::strerror(errno);
    return false;
  }
  std::fclose(f);
  return true;
}

// The message for a certificate that did not load or check (tests and
// operators read the file's option name, its path and the reason).
std::string describe(const tls::identity_failure& why,
                     const tls_transport_options& opts) {
  using failure = tls::identity_failure;
  switch (why.step) {
    case failure::ca_unreadable:
    case failure::ca_empty:
      return "ca_file " + opts.ca_file + ": no CA certificate loaded: "
             + why.detail;
    case failure::ca_several:
      return "ca_file " + opts.ca_file + ": holds more than "
             + std::to_string(tls::max_cluster_cas)
             + " certificates (expected the cluster CA, two while it is "
               "replaced)";
    case failure::ca_not_ca:
      return "ca_file " + opts.ca_file + ": holds a certificate that is no CA";
    case failure::cert_unreadable:
    case failure::cert_empty:
      return "cert_file " + opts.cert_file + ": no certificate loaded: "
             + why.detail;
    case failure::key_unreadable:
    case failure::key_unusable:
      return "key_file " + opts.key_file
             + ": no private key loaded (encrypted keys are not supported): "
             + why.detail;
    case failure::key_mismatch:
      return "key_file " + opts.key_file + " does not match cert_file "
             + opts.cert_file;
    case failure::untrusted:
      return "cert_file " + opts.cert_file + " does not verify against ca_file "
             + opts.ca_file + " as a TLS "
             + (why.purpose == tls::tls_purpose::server ? "server" : "client")
             + ": " + why.detail;
    default: // names are checked by iface_init, against raft_init's id
      return "cert_file " + opts.cert_file + ": " + why.detail;
  }
}

} // namespace

int tls_transport_init(raft_uv_transport* t, uv_loop_t* loop,
                       const tls_transport_options& opts, std::string& error) {
  if (!readable("ca_file", opts.ca_file, error)
      || !readable("cert_file", opts.cert_file, error)
      || !readable("key_file", opts.key_file, error))
    return RAFT_INVALID;
  if (opts.max_handshakes == 0 || opts.handshake_timeout.count() <= 0) {
    error = "max_handshakes and handshake_timeout must be positive";
    return RAFT_INVALID;
  }
  for (auto& [id, address] : opts.peers) {
    std::string host, port;
    if (id == 0 || !split_host_port(address, host, port)) {
      error = "peers: node " + std::to_string(id) + " at '" + address
              + "': not a positive id and host:port";
      return RAFT_INVALID;
    }
  }
  if (std::string host, port;
      !opts.bind_address.empty()
      && !split_host_port(opts.bind_address, host, port)) {
    error = "bind_address " + opts.bind_address + " is not host:port";
    return RAFT_INVALID;
  }
  auto x = std::make_unique<transport>();
  ERR_clear_error();
  x->ctx = SSL_CTX_new(TLS_method());
  if (x->ctx == nullptr) {
    error = "SSL_CTX_new: " + tls::openssl_error();
    return RAFT_NOMEM;
  }
  auto ctx = x->ctx;
  // Protocol versions, cipher suites, groups, renegotiation: the one
  // profile of every TLS context we make.
  if (!tls::apply_profile(ctx, error)) {
    error = "TLS profile: " + error;
    return RAFT_INVALID;
  }
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  // Every connection is a full handshake: no session state to reason about.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);
  static const unsigned char sid_ctx[] = "oncegate-raft";
  SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  // Our own certificate must pass what peers will check, in both roles:
  // better a clear error at start than refusals everywhere later.
  tls::ca_bundle cas;
  tls::node_identity self;
  tls::identity_failure why;
  if (!tls::load_ca(opts.ca_file, cas, why)
      || !tls::load_identity({opts.cert_file, opts.key_file, {}}, cas,
                             {tls::tls_purpose::server,
                              tls::tls_purpose::client},
                             0, self, why)) {
    error = describe(why, opts);
    return RAFT_INVALID;
  }
  // The context takes its own references.
  ERR_clear_error();
  for (auto& ca : cas) {
    if (X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca.get()) != 1) {
      error = "ca_file " + opts.ca_file + ": no CA certificate loaded: "
              + tls::openssl_error();
      return RAFT_INVALID;
    }
  }
  auto used = SSL_CTX_use_certificate(ctx, self.leaf.get()) == 1;
  for (auto& c : self.chain)
    used = used && SSL_CTX_add1_chain_cert(ctx, c.get()) == 1;
  if (!used) {
    error = "cert_file " + opts.cert_file + ": no certificate loaded: "
            + tls::openssl_error();
    return RAFT_INVALID;
  }
  if (SSL_CTX_use_PrivateKey(ctx, self.key.get()) != 1) {
    error = "key_file " + opts.key_file + ": " + tls::openssl_error();
    return RAFT_INVALID;
  }
  x->loop = loop;
  x->peers = opts.peers;
  x->bind_address = opts.bind_address;
  x->handshake_timeout = opts.handshake_timeout;
  x->max_handshakes = opts.max_handshakes;
  auto data = t->data;
  std::memset(t, 0, sizeof(*t));
  t->data = data;
  x->iface = t;
  t->impl = x.release();
  t->init = iface_init;
  t->listen = iface_listen;
  t->connect = iface_connect;
  t->close = iface_close;
  return 0;
}

void tls_transport_set_peers(raft_uv_transport* t,
                             std::map<uint64_t, std::string> peers) {
  self_of(t).peers = std::move(peers);
}

void tls_transport_close(raft_uv_transport* t) {
  if (t->impl == nullptr)
    return;
  auto x = static_cast<transport*>(t->impl);
  if (x->listener_open || !x->conns.empty()) {
    // libuv still points into it: leaking beats a use after free.
    log::cluster()->error("tls.close_while_open connections={}",
                          x->conns.size());
    return;
  }
  delete x;
  t->impl = nullptr;
}

tls_transport_stats tls_transport_stats_of(raft_uv_transport* t) {
  tls_transport_stats res;
  if (t->impl == nullptr)
    return res;
  auto& x = self_of(t);
  res.accepted = x.accepted.load();
  res.connected = x.connected.load();
  res.connect_failed = x.connect_failed.load();
  res.refused_handshake = x.refused_handshake.load();
  res.refused_identity = x.refused_identity.load();
  res.refused_preamble = x.refused_preamble.load();
  res.refused_busy = x.refused_busy.load();
  res.backpressure_pauses = x.pauses.load();
  res.buffered_bytes = x.buffered.load();
  res.handshakes = x.handshaking.load();
  return res;
}

} // namespace oncegate::cluster
