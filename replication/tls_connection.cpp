#include "replication/tls_transport_impl.hpp"

// One connection of the TLS Raft transport through its states (see
// tls_transport_impl.hpp): TCP connect, the TLS handshake, libraft's
// preamble (written outbound, read and checked against the peer's
// certificate inbound), the hand-over to libraft, the handshake deadline,
// refusals and closing. Moving the bytes once bridged is tls_pump.cpp.

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509.h>

#include "common/logging.hpp"
#include "replication/tls_identity.hpp"

namespace oncegate::cluster::detail {

namespace {

void put_le64(unsigned char* p, uint64_t x) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<unsigned char>(x >> (8 * i));
}

uint64_t get_le64(const unsigned char* p) {
  uint64_t x = 0;
  for (int i = 7; i >= 0; --i)
    x = (x << 8) | p[i];
  return x;
}

void on_handle_closed_cb(uv_handle_t* h) {
  static_cast<connection*>(h->data)->on_handle_closed();
}

// Opens one end of the socketpair, `fd`, as `end`; if that fails, closes
// `fd` and releases libraft's end `theirs`, which libraft never saw.
int open_end(uv_pipe_t* end, int fd, uv_pipe_t* theirs) {
  auto rv = uv_pipe_open(end, fd);
  if (rv != 0) {
    ::close(fd);
    uv_close(reinterpret_cast<uv_handle_t*>(theirs),
             [](uv_handle_t* h) { raft_free(h); });
  }
  return rv;
}

} // namespace

std::string encode_preamble(uint64_t id, const std::string& address) {
  auto len = (address.size() + 1 + 7) / 8 * 8;
  std::string out(preamble_size + len, '\0');
  auto p = reinterpret_cast<unsigned char*>(out.data());
  put_le64(p, preamble_protocol);
  put_le64(p + 8, id);
  put_le64(p + 16, len);
  std::memcpy(p + preamble_size, address.data(), address.size());
  return out;
}

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
    &timer, [](uv_timer_t* h) { static_cast<connection*>(h->data)->on_timeout(); },
    static_cast<uint64_t>(std::max<int64_t>(1, owner->handshake_timeout.count())),
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

void connection::advance() {
  switch (state) {
    case conn_state::tls:
      do_handshake();
      break;
    case conn_state::preamble:
      read_preamble();
      break;
    case conn_state::bridged:
      pump_in();
      break;
    default:
      break;
  }
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
  if (!outbound) {
    state = conn_state::preamble;
    read_preamble();
    return;
  }
  if (!tls::names_node(cert, peer_id)) {
    auto why = "server certificate names " + tls::dns_names(cert) + ", not "
               + tls::node_name(peer_id);
    log::cluster()->warn("tls.wrong_server conn={} id={} address={} remote={} "
                         "names={}",
                         serial, peer_id, peer_address, remote,
                         tls::dns_names(cert));
    fail_outbound(why);
    return;
  }
  auto pre = encode_preamble(owner->id, owner->address);
  ERR_clear_error();
  if (SSL_write(ssl, pre.data(), static_cast<int>(pre.size()))
      != static_cast<int>(pre.size())) {
    tls_failed = true;
    fail_outbound("TLS write: " + tls::openssl_error());
    return;
  }
  if (flush_tls())
    bridge();
}

void connection::read_preamble() {
  for (;;) {
    char* dst;
    size_t want;
    if (preamble_got < preamble_size) {
      dst = reinterpret_cast<char*>(preamble) + preamble_got;
      want = preamble_size - preamble_got;
    } else {
      dst = address_buf.data() + address_got;
      want = address_buf.size() - address_got;
    }
    ERR_clear_error();
    auto rv = SSL_read(ssl, dst, static_cast<int>(want));
    if (rv <= 0) {
      auto err = SSL_get_error(ssl, rv);
      if (err == SSL_ERROR_WANT_READ) {
        flush_tls();
        return;
      }
      std::string why = "closed before the preamble";
      if (err != SSL_ERROR_ZERO_RETURN) {
        tls_failed = true;
        why = "TLS: " + tls_error(ssl);
      }
      refuse(verdict::refused_preamble, why);
      return;
    }
    auto n = static_cast<size_t>(rv);
    if (preamble_got < preamble_size) {
      preamble_got += n;
      if (preamble_got < preamble_size)
        continue;
      auto protocol = get_le64(preamble);
      peer_id = get_le64(preamble + 8);
      auto len = get_le64(preamble + 16);
      if (protocol != preamble_protocol) {
        refuse(verdict::refused_preamble,
               "unknown protocol version " + std::to_string(protocol));
        return;
      }
      if (len == 0 || len % 8 != 0 || len > max_address_buffer) {
        refuse(verdict::refused_preamble,
               "bad address length " + std::to_string(len));
        return;
      }
      address_buf.resize(len);
    } else {
      address_got += n;
      if (address_got == address_buf.size())
        break;
    }
  }
  auto nul = static_cast<const char*>(
    std::memchr(address_buf.data(), '\0', address_buf.size()));
  if (nul == nullptr || nul == address_buf.data()) {
    refuse(verdict::refused_preamble, "address not NUL-terminated or empty");
    return;
  }
  peer_address.assign(address_buf.data(),
                      static_cast<size_t>(nul - address_buf.data()));
  if (auto why = check_identity(); !why.empty()) {
    refuse(verdict::refused_identity, why);
    return;
  }
  bridge();
}

std::string connection::check_identity() {
  auto cert = SSL_get0_peer_certificate(ssl);
  if (peer_id == owner->id)
    return "claims this node's own id " + std::to_string(peer_id);
  auto i = owner->peers.find(peer_id);
  if (i == owner->peers.end())
    return "node " + std::to_string(peer_id) + " is not a member";
  if (!tls::names_node(cert, peer_id))
    return "claims node " + std::to_string(peer_id)
           + " but its certificate names " + tls::dns_names(cert);
  if (i->second != peer_address)
    return "claims address "
           + tls::printable(peer_address.data(), peer_address.size())
           + " but node " + std::to_string(peer_id) + " is at " + i->second;
  return {};
}

void connection::bridge() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    auto why = std::string{"socketpair: "} + std::strerror(errno);
    if (outbound)
      fail_outbound(why);
    else
      refuse(verdict::refused_handshake, why);
    return;
  }
  // libraft owns this handle from the callback on: it uv_close()s it and
  // releases it with raft_free (RaftHeapFree), as it does its TCP handles.
  auto theirs = static_cast<uv_pipe_t*>(raft_malloc(sizeof(uv_pipe_t)));
  int rv = theirs == nullptr ? UV_ENOMEM : 0;
  if (rv == 0) {
    uv_pipe_init(owner->loop, theirs, 0);
    rv = open_end(theirs, fds[0], theirs);
  } else {
    ::close(fds[0]);
  }
  if (rv == 0) {
    uv_pipe_init(owner->loop, &pipe, 0);
    pipe.data = this;
    pipe_open = true;
    ++open_handles;
    rv = open_end(&pipe, fds[1], theirs);
  } else {
    ::close(fds[1]);
  }
  if (rv != 0) {
    auto why = std::string{"pipe: "} + uv_strerror(rv);
    if (outbound)
      fail_outbound(why);
    else
      refuse(verdict::refused_handshake, why);
    return;
  }
  uv_timer_stop(&timer);
  if (counted_handshake) {
    counted_handshake = false;
    --owner->handshaking;
  }
  state = conn_state::bridged;
  auto reading = start_reading_pipe();
  auto stream = reinterpret_cast<uv_stream_t*>(theirs);
  if (outbound) {
    ++owner->connected;
    log::cluster()->info("tls.connected conn={} id={} address={} remote={}",
                         serial, peer_id, peer_address, remote);
    auto r = req;
    auto callback = cb;
    req = nullptr;
    cb = nullptr;
    callback(r, stream, 0);
  } else {
    ++owner->accepted;
    log::cluster()->info("tls.accepted conn={} id={} address={} remote={}",
                         serial, peer_id, peer_address, remote);
    owner->accept_cb(owner->iface, peer_id, peer_address.c_str(), stream);
  }
  if (!reading) {
    close(verdict::failed);
    return;
  }
  // Bytes that arrived behind the preamble (or the handshake).
  pump_in();
}

void connection::on_timeout() {
  if (state == conn_state::closing || state == conn_state::bridged)
    return;
  auto ms = std::to_string(owner->handshake_timeout.count()) + " ms";
  if (outbound)
    fail_outbound("no verified connection within " + ms);
  else if (state == conn_state::preamble)
    refuse(verdict::refused_preamble, "no preamble within " + ms);
  else
    refuse(verdict::refused_handshake, "no TLS handshake within " + ms);
}

void connection::on_tcp_eof(ssize_t nread) {
  std::string why = nread == UV_EOF ? "closed" : uv_strerror(static_cast<int>(nread));
  switch (state) {
    case conn_state::tls:
      if (outbound)
        fail_outbound("closed during the TLS handshake: " + why);
      else
        refuse(verdict::refused_handshake, "closed during the TLS handshake: " + why);
      break;
    case conn_state::preamble:
      refuse(verdict::refused_preamble, "closed before the preamble: " + why);
      break;
    default:
      close(verdict::done);
  }
}

void connection::fail_outbound(const std::string& why) {
  if (state == conn_state::closing)
    return;
  set_errmsg(owner->iface, "connect to " + std::to_string(peer_id) + " at "
                             + peer_address + ": " + why);
  log::cluster()->debug("tls.connect_failed conn={} id={} address={} reason={}",
                        serial, peer_id, peer_address, why);
  close(verdict::failed);
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
    case verdict::refused_preamble:
      ++owner->refused_preamble;
      reason = "preamble";
      break;
    case verdict::refused_busy:
      ++owner->refused_busy;
      reason = "busy";
      break;
    default:
      break;
  }
  // A peer that got through TLS is a member's key misbehaving: louder than
  // a stranger knocking.
  auto level = v == verdict::refused_identity || v == verdict::refused_preamble
                 ? spdlog::level::warn
                 : spdlog::level::info;
  log::cluster()->log(level, "tls.refused conn={} remote={} reason={} detail={}",
                      serial, remote, reason, why);
  close(v);
}

void connection::close(verdict v) {
  if (state == conn_state::closing)
    return;
  auto was = state;
  state = conn_state::closing;
  if (counted_handshake) {
    counted_handshake = false;
    --owner->handshaking;
  }
  if (req != nullptr) {
    status = v == verdict::canceled ? RAFT_CANCELED : RAFT_NOCONNECTION;
    if (v != verdict::canceled)
      ++owner->connect_failed;
  }
  if (ssl != nullptr && was != conn_state::resolving
      && was != conn_state::connecting) {
    if (was == conn_state::bridged && !tls_failed) {
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
  uv_timer_stop(&timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer), on_handle_closed_cb);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp), on_handle_closed_cb);
  if (pipe_open)
    uv_close(reinterpret_cast<uv_handle_t*>(&pipe), on_handle_closed_cb);
}

void connection::on_handle_closed() {
  if (--open_handles > 0)
    return;
  auto t = owner;
  auto r = req;
  auto callback = cb;
  auto st = status;
  auto key = serial;
  t->conns.erase(key); // deletes *this
  if (r != nullptr)
    callback(r, nullptr, st);
  t->maybe_fire_close();
}
} // namespace oncegate::cluster::detail
