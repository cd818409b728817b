#include "replication/tls_transport_impl.hpp"

// The bytes of a bridged TLS Raft connection (see tls_transport_impl.hpp):
// TCP socket -> OpenSSL's memory BIOs -> libraft's pipe and back, with
// back-pressure: a direction stops reading its source while the writes it
// queued on its destination exceed `high_water`, and resumes below
// `low_water`.

#include <cstring>

#include <openssl/err.h>

#include "common/logging.hpp"
#include "replication/tls_identity.hpp"

namespace oncegate::cluster::detail {

namespace {

// libuv's read buffer of one direction: one chunk, allocated on first use.
template <std::unique_ptr<char[]> connection::*Buf>
void read_buffer(uv_handle_t* h, size_t, uv_buf_t* buf) {
  auto& mine = static_cast<connection*>(h->data)->*Buf;
  if (!mine)
    mine.reset(new char[read_chunk]);
  *buf = uv_buf_init(mine.get(), read_chunk);
}

} // namespace

void connection::start_reading_tcp() {
  if (tcp_reading)
    return;
  auto rv = uv_read_start(
    reinterpret_cast<uv_stream_t*>(&tcp), read_buffer<&connection::tcp_buf>,
    [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
      auto c = static_cast<connection*>(s->data);
      if (c->state == conn_state::closing || nread == 0)
        return;
      if (nread < 0) {
        c->on_tcp_eof(nread);
        return;
      }
      // A memory BIO takes everything; the bound is that we stop reading.
      if (BIO_write(c->rbio, c->tcp_buf.get(), static_cast<int>(nread))
          != nread) {
        c->tls_failed = true;
        c->close(verdict::failed);
        return;
      }
      c->advance();
    });
  if (rv != 0) {
    if (outbound)
      fail_outbound(std::string{"read: "} + uv_strerror(rv));
    else
      close(verdict::failed);
    return;
  }
  tcp_reading = true;
}

bool connection::start_reading_pipe() {
  pipe_reading = uv_read_start(
                   reinterpret_cast<uv_stream_t*>(&pipe),
                   read_buffer<&connection::pipe_buf>,
                   [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
                     static_cast<connection*>(s->data)->on_pipe_data(nread);
                   })
                 == 0;
  return pipe_reading;
}

// TLS -> libraft.
void connection::pump_in() {
  if (state != conn_state::bridged)
    return;
  if (!plain_buf)
    plain_buf.reset(new char[read_chunk]);
  size_t have = 0;
  bool more = true;
  while (more && pipe_queued + have < high_water) {
    ERR_clear_error();
    auto rv = SSL_read(ssl, plain_buf.get() + have,
                       static_cast<int>(read_chunk - have));
    if (rv > 0) {
      have += static_cast<size_t>(rv);
      if (have == read_chunk) {
        if (!write_to(false, plain_buf.get(), have))
          return;
        have = 0;
      }
      continue;
    }
    auto err = SSL_get_error(ssl, rv);
    if (err == SSL_ERROR_WANT_READ) {
      more = false;
      continue;
    }
    if (have > 0 && !write_to(false, plain_buf.get(), have))
      return;
    if (err != SSL_ERROR_ZERO_RETURN) {
      tls_failed = true;
      log::cluster()->info("tls.error conn={} id={} reason={}", serial,
                           peer_id, tls_error(ssl));
    }
    close(verdict::done);
    return;
  }
  if (have > 0 && !write_to(false, plain_buf.get(), have))
    return;
  if (!flush_tls()) // SSL_read may answer (a key update, say)
    return;
  if (pipe_queued < high_water) {
    start_reading_tcp();
  } else if (tcp_reading) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp));
    tcp_reading = false;
    ++owner->pauses;
  }
}

// libraft -> TLS.
void connection::on_pipe_data(ssize_t nread) {
  if (state != conn_state::bridged || nread == 0)
    return;
  if (nread < 0) { // libraft closed its end
    close(verdict::done);
    return;
  }
  ERR_clear_error();
  if (SSL_write(ssl, pipe_buf.get(), static_cast<int>(nread)) != nread) {
    tls_failed = true;
    log::cluster()->info("tls.error conn={} id={} reason={}", serial, peer_id,
                         tls::openssl_error());
    close(verdict::failed);
    return;
  }
  if (!flush_tls())
    return;
  if (tcp_queued >= high_water && pipe_reading) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&pipe));
    pipe_reading = false;
    ++owner->pauses;
  }
}

// Queues what OpenSSL produced on the TCP socket.
bool connection::flush_tls() {
  while (auto pending = BIO_ctrl_pending(wbio)) {
    auto w = std::make_unique<write_req>();
    w->data.reset(new char[pending]);
    auto got = BIO_read(wbio, w->data.get(), static_cast<int>(pending));
    if (got <= 0)
      break;
    w->to_tcp = true;
    w->len = static_cast<size_t>(got);
    if (!queue_write(std::move(w)))
      return false;
  }
  return true;
}

// Last words before closing (an alert, close_notify): best effort, since
// uv_close cancels queued writes.
void connection::flush_tls_now() {
  char buf[4096];
  int got;
  while ((got = BIO_read(wbio, buf, sizeof(buf))) > 0) {
    auto b = uv_buf_init(buf, static_cast<unsigned>(got));
    if (uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp), &b, 1) != got)
      break;
  }
}

bool connection::write_to(bool to_tcp, const char* data, size_t len) {
  auto w = std::make_unique<write_req>();
  w->to_tcp = to_tcp;
  w->len = len;
  w->data.reset(new char[len]);
  std::memcpy(w->data.get(), data, len);
  return queue_write(std::move(w));
}

// Queues `w` on its stream (the TCP socket or libraft's pipe) and counts
// its bytes until on_written; closes the connection if libuv refuses it.
bool connection::queue_write(std::unique_ptr<write_req> w) {
  w->conn = this;
  w->req.data = w.get();
  auto buf = uv_buf_init(w->data.get(), static_cast<unsigned>(w->len));
  auto stream = w->to_tcp ? reinterpret_cast<uv_stream_t*>(&tcp)
                          : reinterpret_cast<uv_stream_t*>(&pipe);
  auto rv = uv_write(&w->req, stream, &buf, 1, [](uv_write_t* req, int status) {
    auto w = static_cast<write_req*>(req->data);
    w->conn->on_written(w, status);
  });
  if (rv != 0) {
    close(verdict::failed);
    return false;
  }
  auto len = w->len;
  (w->to_tcp ? tcp_queued : pipe_queued) += len;
  owner->buffered += len;
  w.release(); // on_written takes it back
  return true;
}

void connection::on_written(write_req* w, int status) {
  std::unique_ptr<write_req> guard{w};
  (w->to_tcp ? tcp_queued : pipe_queued) -= w->len;
  owner->buffered -= w->len;
  if (state == conn_state::closing)
    return;
  if (status != 0) {
    on_tcp_eof(status); // a failed write ends the connection like a read
    return;
  }
  if (state != conn_state::bridged)
    return;
  if (w->to_tcp) {
    if (tcp_queued < low_water && !pipe_reading && !start_reading_pipe())
      close(verdict::failed);
  } else if (pipe_queued < low_water && !tcp_reading) {
    pump_in();
  }
}

} // namespace oncegate::cluster::detail
