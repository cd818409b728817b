#include "link/link_impl.hpp"

// The node link as libraft and the node see it (see link_impl.hpp): init,
// listen, connect and close of the raft_uv_transport, the dialling of the
// lower-id side with back-off, the member list, requests handed in, and
// the counters. One connection's states are link_connection.cpp; the
// bytes of an open link link_frames_io.cpp.

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
#include "link/tls_identity.hpp"

namespace oncegate::link {

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

std::string ip_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET)
    uv_ip4_name(reinterpret_cast<const sockaddr_in*>(sa), buf, sizeof(buf));
  else if (sa->sa_family == AF_INET6)
    uv_ip6_name(reinterpret_cast<const sockaddr_in6*>(sa), buf, sizeof(buf));
  return buf;
}

void endpoint::resolve_members() {
  member_ips.clear();
  for (auto& [peer, address] : opts.peers) {
    std::string host, port;
    if (!split_host_port(address, host, port))
      continue;
    sockaddr_storage addr;
    if (numeric_address(host, port, addr)) {
      member_ips.insert(ip_text(reinterpret_cast<sockaddr*>(&addr)));
      continue;
    }
    uv_getaddrinfo_t req;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    if (uv_getaddrinfo(loop, &req, nullptr, host.c_str(), port.c_str(),
                       &hints)
        != 0)
      continue; // an unresolvable member cannot connect from anywhere
    for (auto ai = req.addrinfo; ai != nullptr; ai = ai->ai_next)
      member_ips.insert(ip_text(ai->ai_addr));
    uv_freeaddrinfo(req.addrinfo);
  }
}

void set_errmsg(raft_uv_transport* t, const std::string& msg) {
  std::snprintf(t->errmsg, sizeof(t->errmsg), "%s", msg.c_str());
}

connection* endpoint::make_connection(bool outbound) {
  auto c = std::make_unique<connection>();
  c->owner = this;
  c->serial = next_serial++;
  c->outbound = outbound;
  c->state = ctx != nullptr ? conn_state::tls : conn_state::hello;
  auto ptr = c.get();
  conns.emplace(ptr->serial, std::move(c));
  return ptr;
}

void endpoint::on_listen(int status) {
  if (status != 0) {
    log::cluster()->warn("link.accept_failed reason={}", uv_strerror(status));
    return;
  }
  if (closing)
    return;
  auto c = make_connection(false);
  c->init_handles();
  auto rv = uv_accept(reinterpret_cast<uv_stream_t*>(&listener),
                      reinterpret_cast<uv_stream_t*>(&c->tcp));
  if (rv != 0) {
    log::cluster()->warn("link.accept_failed reason={}", uv_strerror(rv));
    c->close(verdict::failed);
    return;
  }
  sockaddr_storage peer;
  int len = sizeof(peer);
  std::string ip;
  if (uv_tcp_getpeername(&c->tcp, reinterpret_cast<sockaddr*>(&peer), &len)
      == 0) {
    c->remote = sockaddr_text(reinterpret_cast<sockaddr*>(&peer));
    ip = ip_text(reinterpret_cast<sockaddr*>(&peer));
  }
  if (opts.member_sources_only && member_ips.count(ip) == 0) {
    c->refuse(verdict::refused_source, "not a member's address");
    return;
  }
  if (handshaking >= opts.max_handshakes) {
    c->refuse(verdict::refused_busy,
              std::to_string(handshaking) + " handshakes in progress");
    return;
  }
  ++handshaking;
  c->counted_handshake = true;
  uv_tcp_nodelay(&c->tcp, 1);
  if (ctx != nullptr && !c->make_ssl()) {
    c->refuse(verdict::refused_handshake, "SSL_new: " + tls::openssl_error());
    return;
  }
  c->start_reading_tcp();
}

void endpoint::dial(dialer* d) {
  if (closing || d->conn != nullptr)
    return;
  auto i = opts.peers.find(d->peer);
  if (i == opts.peers.end())
    return;
  std::string host, port;
  if (!split_host_port(i->second, host, port))
    return; // checked by init and set_peers
  auto c = make_connection(true);
  d->conn = c;
  c->peer_id = d->peer;
  c->peer_address = i->second;
  c->init_handles();
  sockaddr_storage addr;
  if (numeric_address(host, port, addr)) {
    c->start_connect(reinterpret_cast<sockaddr*>(&addr));
    return;
  }
  c->state = conn_state::resolving;
  auto r = new resolver{};
  r->conn = c;
  c->resolving = r;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  auto rv = uv_getaddrinfo(
    loop, &r->req,
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
}

void endpoint::redial_later(dialer* d) {
  if (closing || !d->timer_open)
    return;
  auto next = d->backoff.count() == 0
                ? opts.redial_min
                : std::min(d->backoff * 2, opts.redial_max);
  d->backoff = next;
  uv_timer_start(
    &d->timer,
    [](uv_timer_t* h) {
      auto d = static_cast<dialer*>(h->data);
      d->owner->dial(d);
    },
    static_cast<uint64_t>(std::max<int64_t>(1, next.count())), 0);
}

// The lower id dials: one dialer per member of a higher id.
void endpoint::update_dialers() {
  if (closing || !listener_open)
    return;
  for (auto i = dialers.begin(); i != dialers.end();) {
    auto d = i->second.get();
    if (opts.peers.count(d->peer) != 0) {
      ++i;
      continue;
    }
    if (d->conn != nullptr)
      d->conn->close(verdict::canceled, "no longer a member");
    d->conn = nullptr;
    d->timer_open = false;
    auto owned = i->second.release();
    uv_close(reinterpret_cast<uv_handle_t*>(&owned->timer),
             [](uv_handle_t* h) { delete static_cast<dialer*>(h->data); });
    i = dialers.erase(i);
  }
  for (auto& [peer, address] : opts.peers) {
    if (peer <= id || dialers.count(peer) != 0)
      continue;
    auto d = std::make_unique<dialer>();
    d->owner = this;
    d->peer = peer;
    uv_timer_init(loop, &d->timer);
    d->timer.data = d.get();
    d->timer_open = true;
    auto ptr = d.get();
    dialers.emplace(peer, std::move(d));
    dial(ptr);
  }
  // Links (either way) to nodes that are no members any more.
  std::vector<connection*> gone;
  for (auto& [peer, c] : links)
    if (opts.peers.count(peer) == 0)
      gone.push_back(c);
  for (auto c : gone)
    c->close(verdict::canceled, "no longer a member");
}

void endpoint::link_opened(connection* c) {
  if (auto i = links.find(c->peer_id); i != links.end() && i->second != c) {
    // The peer dialled again (it restarted, or its old link went silent):
    // the new link replaces the old one.
    i->second->close(verdict::replaced, "replaced by a newer link");
  }
  links[c->peer_id] = c;
  ++open_links;
  if (auto d = dialers.find(c->peer_id); d != dialers.end())
    d->second->backoff = std::chrono::milliseconds{0};
  std::vector<connect_wait*> ready;
  for (auto& [ptr, w] : waits)
    if (w->peer == c->peer_id && !w->finished)
      ready.push_back(ptr);
  for (auto w : ready) {
    std::string why;
    auto s = c->open_stream(w->port->group, why);
    if (s == nullptr)
      set_errmsg(w->port->iface,
                 "stream to " + std::to_string(w->peer) + ": " + why);
    finish_wait(w, s, s != nullptr ? 0 : RAFT_NOCONNECTION);
  }
}

void endpoint::link_closed(connection* c) {
  if (auto i = links.find(c->peer_id); i != links.end() && i->second == c) {
    links.erase(i);
    --open_links;
  }
  if (!c->outbound)
    return;
  if (auto i = dialers.find(c->peer_id);
      i != dialers.end() && i->second->conn == c) {
    i->second->conn = nullptr;
    redial_later(i->second.get());
  }
}

void endpoint::finish_wait(connect_wait* w, uv_stream_t* s, int status) {
  if (w->finished)
    return;
  w->finished = true;
  w->result = s;
  w->status = status;
  if (status == RAFT_NOCONNECTION)
    ++connect_failed;
  uv_timer_stop(&w->timer);
  // libraft hears of it from the close callback: always after its
  // `connect` returned, never from inside it.
  uv_close(reinterpret_cast<uv_handle_t*>(&w->timer), [](uv_handle_t* h) {
    auto w = static_cast<connect_wait*>(h->data);
    auto self = w->owner;
    auto owned = std::move(self->waits[w]);
    self->waits.erase(w);
    if (w->port->closing && w->result != nullptr) {
      // libraft closed the transport after the stream was made: it is
      // cancelled, as libraft's own transport cancels a pending connect,
      // and never handed over.
      uv_close(reinterpret_cast<uv_handle_t*>(w->result),
               [](uv_handle_t* h) { raft_free(h); });
      w->result = nullptr;
      w->status = RAFT_CANCELED;
    }
    w->cb(w->req, w->result, w->status);
    self->maybe_fire_close();
  });
}

void endpoint::flush_all() {
  auto serials = std::move(unflushed);
  unflushed.clear();
  for (auto serial : serials) // a flush may close (and free) a connection
    if (auto i = conns.find(serial); i != conns.end())
      i->second->flush_out();
}

void endpoint::close_group(group_port* p) {
  std::vector<connect_wait*> mine;
  for (auto& [ptr, w] : waits)
    if (w->port == p)
      mine.push_back(ptr);
  for (auto w : mine)
    finish_wait(w, nullptr, RAFT_CANCELED);
  for (auto& [serial, c] : conns) {
    std::vector<stream*> gone;
    for (auto& [id, st] : c->streams)
      if (st->group == p->group)
        gone.push_back(st.get());
    for (auto st : gone)
      c->close_stream(st, true);
  }
}

bool endpoint::all_closed() const {
  return !listener_open && !flusher_open && conns.empty() && waits.empty()
         && dialers.empty();
}

// A group that closes alone is done when libraft has heard of its connects
// (its streams' ends are libraft's own to close); the last group when
// everything is.
void endpoint::maybe_fire_close() {
  std::vector<std::pair<raft_uv_transport_close_cb, raft_uv_transport*>> due;
  for (auto& p : ports) {
    if (!p || !p->closing || p->close_cb == nullptr)
      continue;
    if (closing ? !all_closed()
                : std::any_of(waits.begin(), waits.end(), [&](auto& w) {
                    return w.second->port == p.get();
                  }))
      continue;
    due.emplace_back(p->close_cb, p->iface);
    p->close_cb = nullptr;
  }
  // A callback may free its transport and, with the last, this endpoint:
  // nothing of `this` is touched after the first.
  for (auto& [cb, iface] : due)
    cb(iface);
}

} // namespace detail

namespace {

using namespace detail;

group_port& port_of(raft_uv_transport* t) {
  return *static_cast<group_port*>(t->impl);
}

endpoint& self_of(raft_uv_transport* t) {
  return *port_of(t).owner;
}

int iface_init(raft_uv_transport* t, raft_id id, const char* address) {
  auto& p = port_of(t);
  auto& x = *p.owner;
  if (p.group != 0) {
    // Every group is the same node at the same address: group 0's.
    if (!x.ports[0] || !x.ports[0]->initialised) {
      set_errmsg(t, "group 0's transport must be initialised first");
      return RAFT_INVALID;
    }
    if (id != x.id || x.address != address) {
      set_errmsg(t, "group " + std::to_string(p.group) + " is node "
                      + std::to_string(id) + " at " + address
                      + ", group 0 node " + std::to_string(x.id) + " at "
                      + x.address);
      return RAFT_INVALID;
    }
    p.initialised = true;
    return 0;
  }
  if (x.ctx != nullptr) {
    auto own = SSL_CTX_get0_certificate(x.ctx);
    if (!tls::names_node(own, id)) {
      set_errmsg(t, "this node's certificate names " + tls::dns_names(own)
                      + ", not " + tls::node_name(id));
      return RAFT_INVALID;
    }
  }
  x.id = id;
  x.address = address;
  uv_tcp_init(x.loop, &x.listener);
  x.listener.data = &x;
  x.listener_open = true;
  uv_prepare_init(x.loop, &x.flusher);
  x.flusher.data = &x;
  x.flusher_open = true;
  uv_prepare_start(&x.flusher, [](uv_prepare_t* h) {
    static_cast<endpoint*>(h->data)->flush_all();
  });
  p.initialised = true;
  return 0;
}

int iface_listen(raft_uv_transport* t, raft_uv_accept_cb cb) {
  auto& x = self_of(t);
  port_of(t).accept_cb = cb;
  if (port_of(t).group != 0)
    return 0; // group 0's listener and links carry every group
  const auto& where = x.opts.bind_address.empty() ? x.address
                                                  : x.opts.bind_address;
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
                     static_cast<endpoint*>(s->data)->on_listen(status);
                   });
  if (rv != 0) {
    set_errmsg(t, "listen on " + where + ": " + uv_strerror(rv));
    return RAFT_IOERR;
  }
  log::cluster()->info("link.listening id={} address={} tls={}", x.id, where,
                       x.ctx != nullptr);
  x.resolve_members();
  x.update_dialers();
  return 0;
}

int iface_connect(raft_uv_transport* t, raft_uv_connect* req, raft_id id,
                  const char* address, raft_uv_connect_cb cb) {
  auto& x = self_of(t);
  if (x.closing || port_of(t).closing)
    return RAFT_CANCELED;
  auto i = x.opts.peers.find(id);
  if (i == x.opts.peers.end()) {
    set_errmsg(t, "node " + std::to_string(id) + " is not a member");
    return RAFT_NOCONNECTION;
  }
  if (i->second != address) {
    set_errmsg(t, "node " + std::to_string(id) + " is at " + i->second
                    + ", not " + address);
    return RAFT_NOCONNECTION;
  }
  auto w = std::make_unique<connect_wait>();
  w->owner = &x;
  w->port = &port_of(t);
  w->req = req;
  w->cb = cb;
  req->cb = cb;
  w->peer = id;
  uv_timer_init(x.loop, &w->timer);
  w->timer.data = w.get();
  auto ptr = w.get();
  x.waits.emplace(ptr, std::move(w));
  // Open already: the stream is handed over on the next loop turn (never
  // from inside this call). Otherwise, when the link opens, or the wait
  // fails when the handshake timeout passed.
  auto open = x.links.count(id) != 0;
  uv_timer_start(
    &ptr->timer,
    [](uv_timer_t* h) {
      auto w = static_cast<connect_wait*>(h->data);
      auto x = w->owner;
      auto l = x->links.find(w->peer);
      if (l == x->links.end()) {
        set_errmsg(w->port->iface, "no link to node "
                                     + std::to_string(w->peer)
                                     + " within the handshake timeout");
        x->finish_wait(w, nullptr, RAFT_NOCONNECTION);
        return;
      }
      std::string why;
      auto s = l->second->open_stream(w->port->group, why);
      if (s == nullptr)
        set_errmsg(w->port->iface,
                   "stream to " + std::to_string(w->peer) + ": " + why);
      x->finish_wait(w, s, s != nullptr ? 0 : RAFT_NOCONNECTION);
    },
    open ? 0
         : static_cast<uint64_t>(
           std::max<int64_t>(1, x.opts.handshake_timeout.count())),
    0);
  return 0;
}

void iface_close(raft_uv_transport* t, raft_uv_transport_close_cb cb) {
  auto& p = port_of(t);
  auto& x = *p.owner;
  p.closing = true;
  p.close_cb = cb;
  if (std::any_of(x.ports.begin(), x.ports.end(),
                  [](auto& q) { return q && !q->closing; })) {
    x.close_group(&p);
    x.maybe_fire_close();
    return;
  }
  x.closing = true;
  if (x.listener_open
      && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&x.listener)))
    uv_close(reinterpret_cast<uv_handle_t*>(&x.listener), [](uv_handle_t* h) {
      auto x = static_cast<endpoint*>(h->data);
      x->listener_open = false;
      x->maybe_fire_close();
    });
  if (x.flusher_open
      && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&x.flusher))) {
    x.flush_all();
    uv_close(reinterpret_cast<uv_handle_t*>(&x.flusher), [](uv_handle_t* h) {
      auto x = static_cast<endpoint*>(h->data);
      x->flusher_open = false;
      x->maybe_fire_close();
    });
  }
  for (auto& [peer, d] : x.dialers) {
    d->timer_open = false;
    d->conn = nullptr;
    auto owned = d.release();
    uv_close(reinterpret_cast<uv_handle_t*>(&owned->timer),
             [](uv_handle_t* h) { delete static_cast<dialer*>(h->data); });
  }
  x.dialers.clear();
  std::vector<connect_wait*> waits;
  for (auto& [ptr, w] : x.waits)
    waits.push_back(ptr);
  for (auto w : waits)
    x.finish_wait(w, nullptr, RAFT_CANCELED);
  std::vector<connection*> conns;
  for (auto& [serial, c] : x.conns)
    conns.push_back(c.get());
  for (auto c : conns)
    c->close(verdict::canceled, "the node stops");
  x.maybe_fire_close();
}

bool check_peers(const std::map<uint64_t, std::string>& peers,
                 std::string& error) {
  for (auto& [id, address] : peers) {
    std::string host, port;
    if (id == 0 || !split_host_port(address, host, port)) {
      error = "peers: node " + std::to_string(id) + " at '" + address
              + "': not a positive id and host:port";
      return false;
    }
  }
  return true;
}

void wire(raft_uv_transport* t, group_port* p) {
  auto data = t->data;
  std::memset(t, 0, sizeof(*t));
  t->data = data;
  p->iface = t;
  t->impl = p;
  t->init = iface_init;
  t->listen = iface_listen;
  t->connect = iface_connect;
  t->close = iface_close;
}

} // namespace

int init(raft_uv_transport* t, uv_loop_t* loop, const options& opts,
         std::string& error) {
  if (opts.max_handshakes == 0 || opts.handshake_timeout.count() <= 0
      || opts.redial_min.count() <= 0 || opts.redial_max < opts.redial_min) {
    error = "max_handshakes, handshake_timeout and the redial back-off must "
            "be positive";
    return RAFT_INVALID;
  }
  if (opts.max_frame_bytes < 4096 || opts.max_served == 0
      || opts.max_served_bytes < opts.max_frame_bytes) {
    error = "max_frame_bytes must be at least 4096, max_served positive and "
            "max_served_bytes at least max_frame_bytes";
    return RAFT_INVALID;
  }
  if (!check_peers(opts.peers, error))
    return RAFT_INVALID;
  if (opts.groups == 0 || opts.groups > max_groups) {
    error = "groups must be 1.." + std::to_string(max_groups);
    return RAFT_INVALID;
  }
  if (std::string host, port;
      !opts.bind_address.empty()
      && !split_host_port(opts.bind_address, host, port)) {
    error = "bind_address " + opts.bind_address + " is not host:port";
    return RAFT_INVALID;
  }
  auto x = std::make_unique<endpoint>();
  if (opts.tls) {
    x->ctx = make_context(*opts.tls, error);
    if (x->ctx == nullptr)
      return RAFT_INVALID;
  }
  x->loop = loop;
  x->opts = opts;
  x->ports.resize(opts.groups);
  auto first = std::make_unique<group_port>();
  first->owner = x.get();
  x->ports[0] = std::move(first);
  wire(t, x->ports[0].get());
  x.release(); // owned through its ports: freed with the last (`close`)
  return 0;
}

int init_group(raft_uv_transport* t, raft_uv_transport* first,
               uint16_t group, std::string& error) {
  if (first == nullptr || first->impl == nullptr) {
    error = "group 0's transport is not initialised";
    return RAFT_INVALID;
  }
  auto& x = self_of(first);
  if (group == 0 || group >= x.ports.size() || x.ports[group]) {
    error = "group " + std::to_string(group) + " is not one of 1.."
            + std::to_string(x.ports.size() - 1)
            + " without a transport";
    return RAFT_INVALID;
  }
  auto p = std::make_unique<group_port>();
  p->owner = &x;
  p->group = group;
  x.ports[group] = std::move(p);
  wire(t, x.ports[group].get());
  return 0;
}

void set_server(raft_uv_transport* t, server_fn fn) {
  self_of(t).server = std::move(fn);
}

void set_peers(raft_uv_transport* t, std::map<uint64_t, std::string> peers) {
  auto& x = self_of(t);
  std::string error;
  if (!check_peers(peers, error)) {
    log::cluster()->error("link.peers_refused reason={}", error);
    return;
  }
  x.opts.peers = std::move(peers);
  x.resolve_members();
  x.update_dialers();
}

void ask(raft_uv_transport* t, uint64_t peer, request req,
         std::chrono::milliseconds timeout, answer_fn done) {
  auto& x = self_of(t);
  auto i = x.links.find(peer);
  if (x.closing || port_of(t).closing || i == x.links.end()) {
    ++x.requests_failed;
    answer res;
    res.kind = req.kind;
    res.error = errc::not_leader;
    res.detail = "no link to node " + std::to_string(peer);
    done(std::move(res));
    return;
  }
  i->second->ask(std::move(req), port_of(t).group, timeout, std::move(done));
}

void give_up(raft_uv_transport* t, uint64_t peer, const std::string& why) {
  auto& x = self_of(t);
  auto i = x.links.find(peer);
  if (i == x.links.end())
    return;
  i->second->fail_group_asks(port_of(t).group, errc::leadership_lost, why);
}

void reply(raft_uv_transport* t, const served& to, answer ans) {
  auto& x = self_of(t);
  auto i = x.conns.find(to.connection);
  if (i == x.conns.end() || i->second->state != conn_state::open)
    return; // the link closed: its asker failed the request already
  i->second->reply(to.id, to.group, ans);
}

bool connected(raft_uv_transport* t, uint64_t peer) {
  return self_of(t).links.count(peer) != 0;
}

void flush(raft_uv_transport* t) {
  if (t->impl == nullptr)
    return;
  self_of(t).flush_all();
}

void close(raft_uv_transport* t) {
  if (t->impl == nullptr)
    return;
  auto& p = port_of(t);
  auto x = p.owner;
  if (std::any_of(x->ports.begin(), x->ports.end(), [&](auto& q) {
        return q && q.get() != &p && !q->freed;
      })) {
    // Other groups still use the endpoint: this transport is done with.
    // One libraft never closed (it never started) is closed here, so that
    // nothing reaches its libraft and the last group's close finds every
    // other group closed.
    if (!p.closing) {
      p.closing = true;
      p.accept_cb = nullptr;
      x->close_group(&p);
    }
    p.freed = true;
    t->impl = nullptr;
    return;
  }
  if (!x->all_closed()) {
    // libuv still points into it: leaking beats a use after free.
    log::cluster()->error("link.close_while_open connections={}",
                          x->conns.size());
    return;
  }
  delete x;
  t->impl = nullptr;
}

link_stats stats_of(raft_uv_transport* t) {
  link_stats res;
  if (t->impl == nullptr)
    return res;
  auto& x = self_of(t);
  res.accepted = x.accepted.load();
  res.connected = x.connected.load();
  res.connect_failed = x.connect_failed.load();
  res.refused_handshake = x.refused_handshake.load();
  res.refused_identity = x.refused_identity.load();
  res.refused_hello = x.refused_hello.load();
  res.refused_busy = x.refused_busy.load();
  res.refused_source = x.refused_source.load();
  res.refused_frame = x.refused_frame.load();
  res.requests_sent = x.requests_sent.load();
  res.answers_received = x.answers_received.load();
  res.requests_failed = x.requests_failed.load();
  res.late_answers = x.late_answers.load();
  res.requests_served = x.requests_served.load();
  res.requests_overloaded = x.requests_overloaded.load();
  res.backpressure_pauses = x.pauses.load();
  res.frames_sent = x.frames_sent.load();
  res.frame_writes = x.frame_writes.load();
  res.buffered_bytes = x.buffered.load();
  res.handshakes = x.handshaking.load();
  res.links = x.open_links.load();
  res.streams = x.open_streams.load();
  return res;
}

} // namespace oncegate::link
