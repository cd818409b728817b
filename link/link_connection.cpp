#include "link/link_impl.hpp"

// One connection of the node link through its states (see link_impl.hpp):
// TCP connect, the TLS handshake, the hellos (each side's id, address and
// versions, checked against the peer's certificate and the member list),
// the open link, the handshake deadline, refusals and closing. The bytes
// of an open link are link_frames_io.cpp.

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <openssl/err.h>
#include <openssl/x509.h>

#include "common/logging.hpp"
#include "link/tls_identity.hpp"

namespace oncegate::link::detail {

namespace {

void on_handle_closed_cb(uv_handle_t* h) {
  static_cast<connection*>(h->data)->on_handle_closed();
}

} // namespace

std::string tls_error(SSL* ssl) {
  auto vr = SSL_get_verify_result(ssl);
  if (vr != X509_V_OK) {
    ERR_clear_error();
    return std::string{"certificate: "} + X509_verify_cert_error_string(vr);
  }
  return tls::openssl_error();
}

void connection::init_handles() {
  uv_tcp_init(owner->loop, &tcp);
  tcp.data = this;
  uv_timer_init(owner->loop, &timer);
  timer.data = this;
  open_handles = 2;
  uv_timer_start(
    &timer,
    [](uv_timer_t* h) { static_cast<connection*>(h->data)->on_timeout(); },
    static_cast<uint64_t>(
      std::max<int64_t>(1, owner->opts.handshake_timeout.count())),
    0);
}

bool connection::make_ssl() {
  ERR_clear_error();
  ssl = SSL_new(owner->ctx);
  rbio = BIO_new(BIO_s_mem());
  wbio = BIO_new(BIO_s_mem());
  if (ssl == nullptr || rbio == nullptr || wbio == nullptr) {
    BIO_free(rbio);
    BIO_free(wbio);
    rbio = wbio = nullptr;
    return false;
  }
  // An empty read BIO means "more to come", never end of stream.
  BIO_set_mem_eof_return(rbio, -1);
  SSL_set_bio(ssl, rbio, wbio);
  if (outbound)
    SSL_set_connect_state(ssl);
  else
    SSL_set_accept_state(ssl);
  return true;
}

void connection::start_connect(const sockaddr* addr) {
  state = conn_state::connecting;
  remote = sockaddr_text(addr);
  connect_req.data = this;
  auto rv = uv_tcp_connect(&connect_req, &tcp, addr,
                           [](uv_connect_t* req, int status) {
    auto c = static_cast<connection*>(req->data);
    if (c->state == conn_state::closing)
      return;
    if (status != 0) {
      c->fail_outbound(std::string{"connect: "} + uv_strerror(status));
      return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (c->owner->ctx == nullptr) {
      c->state = conn_state::hello;
      c->start_reading_tcp();
      if (c->state == conn_state::hello)
        c->send_hello();
      return;
    }
    if (!c->make_ssl()) {
      c->fail_outbound("SSL_new: " + tls::openssl_error());
      return;
    }
    c->state = conn_state::tls;
    c->start_reading_tcp();
    if (c->state == conn_state::tls)
      c->do_handshake(); // sends the ClientHello
  });
  if (rv != 0)
    fail_outbound(std::string{"connect: "} + uv_strerror(rv));
}

void connection::do_handshake() {
  ERR_clear_error();
  auto rv = SSL_do_handshake(ssl);
  if (rv == 1) {
    if (flush_tls())
      handshake_done();
    return;
  }
  auto err = SSL_get_error(ssl, rv);
  if (err == SSL_ERROR_WANT_READ) {
    flush_tls();
    return;
  }
  tls_failed = true;
  auto why = tls_error(ssl);
  flush_tls_now(); // the alert tells the peer why
  if (outbound)
    fail_outbound("TLS: " + why);
  else
    refuse(verdict::refused_handshake, "TLS: " + why);
}

void connection::handshake_done() {
  auto cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
    // Cannot happen with SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT.
    if (outbound)
      fail_outbound("no verified server certificate");
    else
      refuse(verdict::refused_handshake, "no verified client certificate");
    return;
  }
  if (outbound && !tls::names_node(cert, peer_id)) {
    auto why = "server certificate names " + tls::dns_names(cert) + ", not "
               + tls::node_name(peer_id);
    log::cluster()->warn("link.wrong_server conn={} id={} address={} "
                         "remote={} names={}",
                         serial, peer_id, peer_address, remote,
                         tls::dns_names(cert));
    fail_outbound(why);
    return;
  }
  if (!outbound) {
    // A certificate of the cluster CA that names no member (a removed
    // node's, say) gets no further.
    std::string why;
    auto named = tls::named_node(cert, why);
    if (named == 0 || named == owner->id
        || owner->opts.peers.count(named) == 0) {
      refuse(verdict::refused_identity,
             named == 0 ? "client certificate: " + why
                        : "client certificate names node "
                            + std::to_string(named)
                            + ", which is no other member");
      return;
    }
  }
  state = conn_state::hello;
  // The dialler speaks first; the other side answers a hello it checked,
  // so a stranger learns nothing of this node.
  if (outbound)
    send_hello();
  if (state == conn_state::hello)
    take_frames(); // a hello may have come with the handshake's last bytes
}

void connection::send_hello() {
  hello h;
  h.node_id = owner->id;
  h.address = owner->address;
  h.groups = owner->opts.groups;
  send_frame(frame_type::hello, 0, encode_hello(h));
}

void connection::on_hello(std::string_view payload) {
  hello h;
  std::string why;
  if (!decode_hello(payload, h, why)) {
    refuse(verdict::refused_hello, "malformed hello: " + why);
    return;
  }
  hello mine;
  mine.groups = owner->opts.groups;
  version = common_version(mine, h);
  if (version == 0) {
    refuse(verdict::refused_hello,
           "no common link version (peer speaks "
             + std::to_string(h.min_version) + ".."
             + std::to_string(h.max_version) + ", this node "
             + std::to_string(mine.min_version) + ".."
             + std::to_string(mine.max_version)
             + "): stop the whole cluster to change versions "
               "(docs/operations.md, \"Upgrades\")");
    return;
  }
  if (auto bad = check_identity(h); !bad.empty()) {
    refuse(verdict::refused_identity, bad);
    return;
  }
  if (!outbound) {
    peer_address = h.address;
    send_hello(); // a count that differs is then refused on both sides
    if (state != conn_state::hello)
      return;
  }
  if (h.groups != mine.groups) {
    refuse(verdict::refused_hello,
           "node " + std::to_string(peer_id) + " runs "
             + std::to_string(h.groups) + " partitions, this node "
             + std::to_string(mine.groups)
             + ": a cluster's partition count is fixed when it is created "
               "(docs/cluster.md, \"Partitions\")");
    return;
  }
  opened();
}

std::string connection::check_identity(const hello& h) {
  auto printable_address = tls::printable(h.address.data(), h.address.size());
  if (outbound) {
    // The server proved `peer_id` with its certificate (TLS); its hello
    // must say the same.
    if (h.node_id != peer_id || h.address != peer_address)
      return "dialled node " + std::to_string(peer_id) + " at "
             + peer_address + " but its hello says node "
             + std::to_string(h.node_id) + " at " + printable_address;
    return {};
  }
  peer_id = h.node_id;
  if (peer_id == owner->id)
    return "claims this node's own id " + std::to_string(peer_id);
  auto i = owner->opts.peers.find(peer_id);
  if (i == owner->opts.peers.end())
    return "node " + std::to_string(peer_id) + " is not a member";
  if (ssl != nullptr) {
    auto cert = SSL_get0_peer_certificate(ssl);
    if (!tls::names_node(cert, peer_id))
      return "claims node " + std::to_string(peer_id)
             + " but its certificate names " + tls::dns_names(cert);
  }
  if (i->second != h.address)
    return "claims address " + printable_address + " but node "
           + std::to_string(peer_id) + " is at " + i->second;
  if (peer_id > owner->id)
    return "node " + std::to_string(peer_id) + " dials node "
           + std::to_string(owner->id)
           + ", but the node of the lower id dials (an older or foreign "
             "build?)";
  return {};
}

void connection::opened() {
  uv_timer_stop(&timer);
  if (counted_handshake) {
    counted_handshake = false;
    --owner->handshaking;
  }
  state = conn_state::open;
  next_stream = outbound ? 1 : 2;
  if (outbound)
    ++owner->connected;
  else
    ++owner->accepted;
  log::cluster()->info("link.open conn={} peer={} address={} remote={} "
                       "version={} direction={}",
                       serial, peer_id, peer_address, remote, version,
                       outbound ? "out" : "in");
  owner->link_opened(this);
  if (state == conn_state::open)
    take_frames(); // frames that came behind the hello
}

void connection::on_timeout() {
  if (state == conn_state::closing)
    return;
  if (state == conn_state::open) {
    expire_asks();
    return;
  }
  auto ms = std::to_string(owner->opts.handshake_timeout.count()) + " ms";
  if (outbound)
    fail_outbound("no open link within " + ms);
  else if (state == conn_state::hello)
    refuse(verdict::refused_hello, "no hello within " + ms);
  else
    refuse(verdict::refused_handshake, "no TLS handshake within " + ms);
}

void connection::on_tcp_eof(ssize_t nread) {
  std::string why = nread == UV_EOF ? "closed"
                                    : uv_strerror(static_cast<int>(nread));
  switch (state) {
    case conn_state::tls:
      if (outbound)
        fail_outbound("closed during the TLS handshake: " + why);
      else
        refuse(verdict::refused_handshake,
               "closed during the TLS handshake: " + why);
      break;
    case conn_state::hello:
      if (outbound)
        fail_outbound("closed before the hello: " + why);
      else
        refuse(verdict::refused_hello, "closed before the hello: " + why);
      break;
    default:
      close(verdict::done, why);
  }
}

void connection::fail_outbound(const std::string& why) {
  if (state == conn_state::closing)
    return;
  ++owner->connect_failed;
  log::cluster()->debug("link.connect_failed conn={} id={} address={} "
                        "reason={}",
                        serial, peer_id, peer_address, why);
  close(verdict::failed, why);
}

void connection::refuse(verdict v, const std::string& why) {
  if (state == conn_state::closing)
    return;
  const char* reason = "handshake";
  switch (v) {
    case verdict::refused_handshake:
      ++owner->refused_handshake;
      break;
    case verdict::refused_identity:
      ++owner->refused_identity;
      reason = "identity";
      break;
    case verdict::refused_hello:
      ++owner->refused_hello;
      reason = "hello";
      break;
    case verdict::refused_busy:
      ++owner->refused_busy;
      reason = "busy";
      break;
    case verdict::refused_source:
      ++owner->refused_source;
      reason = "source";
      break;
    case verdict::refused_frame:
      ++owner->refused_frame;
      reason = "frame";
      break;
    default:
      break;
  }
  if (outbound && v != verdict::refused_frame)
    ++owner->connect_failed;
  // A peer that got through TLS is a member's key misbehaving: louder than
  // a stranger knocking.
  auto level = v == verdict::refused_handshake || v == verdict::refused_busy
                   || v == verdict::refused_source
                 ? spdlog::level::info
                 : spdlog::level::warn;
  if (auto suppressed = owner->refusal_lines.take(); suppressed >= 0) {
    if (suppressed > 0)
      log::cluster()->warn("link.refusals_suppressed count={} (more than {} "
                           "a second)",
                           suppressed, refusal_log_rate);
    log::cluster()->log(level,
                        "link.refused conn={} remote={} peer={} reason={} "
                        "detail={}",
                        serial, remote, peer_id, reason, why);
  }
  close(v, why);
}

void connection::close(verdict v, const std::string& why) {
  if (state == conn_state::closing)
    return;
  auto was = state;
  state = conn_state::closing;
  if (counted_handshake) {
    counted_handshake = false;
    --owner->handshaking;
  }
  if (was == conn_state::open)
    log::cluster()->info("link.closed conn={} peer={} reason={}", serial,
                         peer_id,
                         why.empty() ? std::string{"closed"} : why);
  owner->link_closed(this);
  fail_asks(errc::leadership_lost,
            "the link to node " + std::to_string(peer_id) + " closed ("
              + (why.empty() ? std::string{"closed"} : why)
              + "): the outcome is unknown");
  serving.clear();
  serving_bytes = 0;
  // Frames sent before the close go first (a refusal's reason): best
  // effort, as the last words below.
  std::string frames;
  frames.swap(out);
  if (!frames.empty() && ssl == nullptr) {
    auto b = uv_buf_init(frames.data(), static_cast<unsigned>(frames.size()));
    uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp), &b, 1);
  }
  if (ssl != nullptr && was != conn_state::resolving
      && was != conn_state::connecting) {
    if (!frames.empty() && !tls_failed) {
      ERR_clear_error();
      SSL_write(ssl, frames.data(), static_cast<int>(frames.size()));
      ERR_clear_error();
    }
    if (was == conn_state::open && !tls_failed) {
      ERR_clear_error();
      SSL_shutdown(ssl); // close_notify
      ERR_clear_error();
    }
    flush_tls_now();
  }
  if (resolving != nullptr) {
    resolving->conn = nullptr;
    uv_cancel(reinterpret_cast<uv_req_t*>(&resolving->req));
    resolving = nullptr;
  }
  std::vector<stream*> all;
  for (auto& [id, s] : streams)
    all.push_back(s.get());
  for (auto s : all)
    close_stream(s, false);
  uv_timer_stop(&timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer), on_handle_closed_cb);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp), on_handle_closed_cb);
}

void connection::on_handle_closed() {
  if (--open_handles > 0)
    return;
  auto t = owner;
  t->conns.erase(serial); // deletes *this
  t->maybe_fire_close();
}

} // namespace oncegate::link::detail
