#include "http/upstream_conn.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

#include <openssl/bio.h>
#include <openssl/ssl.h>

namespace oncegate::gateway::detail {

namespace {

using tcp = boost::asio::ip::tcp;

// Non-blocking: a peek, no read. A closed connection reads EOF (0) or an
// error; one with unexpected bytes reads them.
idle_state probe_socket(tcp::socket& s) {
  char c;
  auto n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0)
    return idle_state::unsolicited;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return idle_state::quiet;
  return idle_state::closed;
}

} // namespace

upstream_conn::upstream_conn(boost::asio::io_context& ioc)
  : plain_(std::make_unique<boost::beast::tcp_stream>(ioc)) {
  // nop
}

upstream_conn::upstream_conn(boost::asio::io_context& ioc,
                             const upstream_tls& tls)
  : tls_(std::make_unique<tls_stream>(ioc, tls.context())) {
  // nop
}

idle_state upstream_conn::probe() {
  auto state = probe_socket(tcp().socket());
  if (!tls_ || state == idle_state::closed)
    return state;
  // Besides the socket, TLS bytes may wait in OpenSSL: a record read with
  // the last answer but not yet processed (SSL_has_pending), or more than
  // it took from asio's buffer (the read BIO).
  auto ssl = tls_->native_handle();
  if (state == idle_state::unsolicited || SSL_has_pending(ssl) == 1
      || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0)
    return idle_state::tls_records;
  return idle_state::quiet;
}

// Acknowledges what was read now instead of after the delayed-ACK timer
// (up to 40 ms on Linux). An upstream with Nagle on holds back a small
// write that follows its answer until that ACK: without this, its late
// bytes would come out with the ACK our next request carries, after every
// check, and be read as the next request's answer.
void upstream_conn::ack_now() {
#ifdef TCP_QUICKACK
  int one = 1;
  ::setsockopt(tcp().socket().native_handle(), IPPROTO_TCP, TCP_QUICKACK,
               &one, sizeof(one));
#endif
}

void upstream_conn::no_delay() {
  boost::beast::error_code ignored;
  tcp().socket().set_option(tcp::no_delay(true), ignored);
}

// No TLS close_notify: the connection is dropped because it is unusable
// or unwanted, and waiting for the upstream's reply would hold it open.
void upstream_conn::close() {
  boost::beast::error_code ignored;
  auto& s = tcp().socket();
  s.shutdown(tcp::socket::shutdown_both, ignored);
  s.close(ignored);
}

} // namespace oncegate::gateway::detail
