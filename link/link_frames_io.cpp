#include "link/link_impl.hpp"

// The bytes of a node link (see link_impl.hpp): the TCP socket, OpenSSL's
// memory BIOs (or nothing, without TLS), frames in and out, the Raft
// streams' socketpairs, requests and answers, and back-pressure.

#include <cerrno>
#include <cstring>

#include <unistd.h>

#include <openssl/err.h>

#include "common/logging.hpp"
#include "common/stage_trace.hpp"
#include "link/tls_identity.hpp"

namespace oncegate::link::detail {

namespace {

template <std::unique_ptr<char[]> connection::*Buf>
void read_buffer(uv_handle_t* h, size_t, uv_buf_t* buf) {
  auto& mine = static_cast<connection*>(h->data)->*Buf;
  if (!mine)
    mine.reset(new char[read_chunk]);
  *buf = uv_buf_init(mine.get(), read_chunk);
}

void stream_buffer(uv_handle_t* h, size_t, uv_buf_t* buf) {
  auto s = static_cast<stream*>(h->data);
  if (!s->buf)
    s->buf.reset(new char[read_chunk]);
  *buf = uv_buf_init(s->buf.get(), read_chunk);
}

// libraft's read of "the first 8 bytes" of a build before the node link:
// its preamble starts with protocol version 1 as a 64-bit word.
bool looks_like_raft_preamble(const char* p) {
  static const unsigned char preamble[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  return std::memcmp(p, preamble, 8) == 0;
}

} // namespace

// -- socket and TLS -------------------------------------------------------------

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
      c->on_tcp_data(c->tcp_buf.get(), static_cast<size_t>(nread));
    });
  if (rv != 0) {
    if (outbound)
      fail_outbound(std::string{"read: "} + uv_strerror(rv));
    else
      close(verdict::failed, "read failed");
    return;
  }
  tcp_reading = true;
}

void connection::on_tcp_data(const char* data, size_t len) {
  if (ssl == nullptr) {
    in.append(data, len);
    take_frames();
    return;
  }
  // A memory BIO takes everything; the bound is that we stop reading.
  if (BIO_write(rbio, data, static_cast<int>(len)) != static_cast<int>(len)) {
    tls_failed = true;
    close(verdict::failed, "BIO_write failed");
    return;
  }
  if (state == conn_state::tls) {
    do_handshake();
    if (state != conn_state::hello && state != conn_state::open)
      return;
  }
  pump_tls();
}

// Decrypts what OpenSSL has into `in`, then takes the frames.
void connection::pump_tls() {
  if (!plain_buf)
    plain_buf.reset(new char[read_chunk]);
  for (;;) {
    if (state != conn_state::hello && state != conn_state::open)
      return;
    ERR_clear_error();
    auto rv = SSL_read(ssl, plain_buf.get(), static_cast<int>(read_chunk));
    if (rv > 0) {
      in.append(plain_buf.get(), static_cast<size_t>(rv));
      // Frames as they come: `in` holds at most one frame and a chunk.
      take_frames();
      continue;
    }
    auto err = SSL_get_error(ssl, rv);
    if (err == SSL_ERROR_WANT_READ)
      break;
    if (err != SSL_ERROR_ZERO_RETURN) {
      tls_failed = true;
      log::cluster()->info("link.tls_error conn={} peer={} reason={}", serial,
                           peer_id, tls_error(ssl));
    }
    on_tcp_eof(UV_EOF);
    return;
  }
  flush_tls(); // SSL_read may answer (a key update, say)
}

void connection::take_frames() {
  while (state == conn_state::hello || state == conn_state::open) {
    auto have = in.size() - in_pos;
    if (have < header_size)
      break;
    auto p = in.data() + in_pos;
    if (state == conn_state::hello && looks_like_raft_preamble(p)) {
      refuse(verdict::refused_hello,
             "the peer speaks libraft's own preamble (a build before the "
             "node link): stop the whole cluster to upgrade "
             "(docs/operations.md, \"Upgrades\")");
      return;
    }
    frame_header h;
    auto limit = state == conn_state::hello ? max_hello_bytes
                                            : owner->opts.max_frame_bytes;
    if (auto err = decode_header(p, limit, h); err != header_error::none) {
      refuse(state == conn_state::hello ? verdict::refused_hello
                                        : verdict::refused_frame,
             std::string{"frame header: "} + to_string(err) + " (type "
               + std::to_string(static_cast<unsigned char>(p[4])) + ")");
      return;
    }
    if (have < header_size + h.length)
      break;
    std::string_view payload{p + header_size, h.length};
    in_pos += header_size + h.length;
    if (state == conn_state::hello) {
      if (h.type != frame_type::hello) {
        refuse(verdict::refused_hello, "a frame before the hello");
        return;
      }
      on_hello(payload);
    } else {
      on_frame(h, payload);
    }
    // Compacts once the consumed part dominates.
    if (in_pos > 0 && in_pos * 2 >= in.size()) {
      in.erase(0, in_pos);
      in_pos = 0;
    }
  }
  if (in_pos == in.size()) {
    in.clear();
    in_pos = 0;
  }
}

void connection::on_frame(const frame_header& h, std::string_view payload) {
  stage_trace::mark("link.recv", uint64_t(h.type) * 1000000 + payload.size());
  if (h.group >= owner->opts.groups) {
    // Both hellos said the same count: a member that sends beyond it is
    // broken, and nothing of it is applied.
    refuse(verdict::refused_frame,
           "a frame of group " + std::to_string(h.group) + ", the cluster has "
             + std::to_string(owner->opts.groups));
    return;
  }
  switch (h.type) {
    case frame_type::hello:
      refuse(verdict::refused_frame, "a second hello");
      return;
    case frame_type::raft_open:
      on_raft_open(h, payload);
      return;
    case frame_type::raft_data: {
      auto i = streams.find(h.id);
      // Data racing our close of the stream is dropped.
      if (i == streams.end() || i->second->closing || payload.empty())
        return;
      auto s = i->second.get();
      if (s->group != h.group) {
        refuse(verdict::refused_frame,
               "data of group " + std::to_string(h.group) + " on stream "
                 + std::to_string(h.id) + " of group "
                 + std::to_string(s->group));
        return;
      }
      auto w = std::make_unique<write_req>();
      w->to = s;
      w->len = payload.size();
      w->data.reset(new char[payload.size()]);
      std::memcpy(w->data.get(), payload.data(), payload.size());
      queue_write(std::move(w));
      return;
    }
    case frame_type::raft_close: {
      auto i = streams.find(h.id);
      if (i != streams.end() && !i->second->closing
          && i->second->group == h.group)
        close_stream(i->second.get(), false);
      return;
    }
    case frame_type::request:
      on_request(h.id, h.group, payload);
      return;
    case frame_type::answer:
      on_answer(h.id, h.group, payload);
      return;
  }
}

void connection::on_raft_open(const frame_header& h,
                              std::string_view payload) {
  // The peer's ids have the other parity than ours.
  auto theirs_parity = outbound ? 0u : 1u;
  if (!payload.empty() || h.id == 0 || (h.id & 1) != theirs_parity
      || streams.count(h.id) != 0) {
    refuse(verdict::refused_frame,
           "raft_open of stream " + std::to_string(h.id)
             + " (wrong parity, reused or with a payload)");
    return;
  }
  std::string none;
  auto& port = owner->ports[h.group];
  if (owner->closing || !port || port->closing || port->accept_cb == nullptr) {
    // This group's libraft is not listening (yet, or any more): the
    // peer's libraft sees its stream closed and connects again later.
    send_frame(frame_type::raft_close, h.id, none, h.group);
    return;
  }
  uv_pipe_t* theirs = nullptr;
  std::string why;
  auto s = add_stream(h.id, h.group, theirs, why);
  if (s == nullptr) {
    log::cluster()->warn("link.stream_failed conn={} peer={} reason={}",
                         serial, peer_id, why);
    send_frame(frame_type::raft_close, h.id, none, h.group);
    return;
  }
  port->accept_cb(port->iface, peer_id, peer_address.c_str(),
                  reinterpret_cast<uv_stream_t*>(theirs));
}

bool connection::send_frame(frame_type type, uint64_t id,
                            std::string_view payload, uint16_t group) {
  if (state == conn_state::closing)
    return false;
  stage_trace::mark("link.send", uint64_t(type) * 1000000 + payload.size());
  frame_header h;
  h.length = static_cast<uint32_t>(payload.size());
  h.type = type;
  h.group = group;
  h.id = id;
  ++owner->frames_sent;
  if (out.empty())
    owner->unflushed.push_back(serial);
  auto at = out.size();
  out.resize(at + header_size);
  encode_header(h, out.data() + at);
  out.append(payload.data(), payload.size());
  // Bounded in bytes: a large turn (a snapshot's chunks) goes out as it
  // comes.
  if (out.size() >= coalesce_bytes)
    return flush_out();
  return true;
}

bool connection::flush_out() {
  if (out.empty() || state == conn_state::closing)
    return state != conn_state::closing;
  std::string frames;
  frames.swap(out);
  ++owner->frame_writes;
  if (ssl == nullptr) {
    auto w = std::make_unique<write_req>();
    w->len = frames.size();
    w->data.reset(new char[frames.size()]);
    std::memcpy(w->data.get(), frames.data(), frames.size());
    return queue_write(std::move(w));
  }
  ERR_clear_error();
  // One call: OpenSSL cuts records of at most 16 KiB itself.
  auto len = static_cast<int>(frames.size());
  if (SSL_write(ssl, frames.data(), len) != len) {
    tls_failed = true;
    log::cluster()->info("link.tls_error conn={} peer={} reason={}", serial,
                         peer_id, tls::openssl_error());
    close(verdict::failed, "TLS write failed");
    return false;
  }
  return flush_tls();
}

// Queues what OpenSSL produced on the TCP socket.
bool connection::flush_tls() {
  while (auto pending = BIO_ctrl_pending(wbio)) {
    auto w = std::make_unique<write_req>();
    w->data.reset(new char[pending]);
    auto got = BIO_read(wbio, w->data.get(), static_cast<int>(pending));
    if (got <= 0)
      break;
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

// Queues `w` on its stream (the TCP socket or a Raft stream's pipe) and
// counts its bytes until on_written; closes the connection if libuv
// refuses a write to the socket (a stream that refuses is closed alone).
bool connection::queue_write(std::unique_ptr<write_req> w) {
  if (state == conn_state::closing)
    return false;
  w->conn = this;
  w->req.data = w.get();
  auto buf = uv_buf_init(w->data.get(), static_cast<unsigned>(w->len));
  auto target = w->to != nullptr ? reinterpret_cast<uv_stream_t*>(&w->to->pipe)
                                 : reinterpret_cast<uv_stream_t*>(&tcp);
  auto rv = uv_write(&w->req, target, &buf, 1, [](uv_write_t* req, int status) {
    auto w = static_cast<write_req*>(req->data);
    w->conn->on_written(w, status);
  });
  if (rv != 0) {
    if (w->to != nullptr) {
      close_stream(w->to, true);
      return true;
    }
    close(verdict::failed, std::string{"write: "} + uv_strerror(rv));
    return false;
  }
  auto len = w->len;
  if (w->to != nullptr)
    stage_trace::mark("raft.in", len);
  if (w->to != nullptr) {
    w->to->queued += len;
    streams_queued += len;
  } else {
    tcp_queued += len;
  }
  owner->buffered += len;
  w.release(); // on_written takes it back
  check_backpressure();
  return true;
}

void connection::on_written(write_req* w, int status) {
  std::unique_ptr<write_req> guard{w};
  if (w->to != nullptr) {
    w->to->queued -= w->len;
    streams_queued -= w->len;
  } else {
    tcp_queued -= w->len;
  }
  owner->buffered -= w->len;
  if (state == conn_state::closing)
    return;
  if (status != 0) {
    if (w->to != nullptr) {
      if (!w->to->closing)
        close_stream(w->to, true); // libraft closed its end
      return;
    }
    on_tcp_eof(status); // a failed write ends the connection like a read
    return;
  }
  check_backpressure();
}

// Stops reading what feeds a side that is full; resumes below low water.
void connection::check_backpressure() {
  if (state != conn_state::open)
    return;
  if (tcp_queued >= high_water && !streams_paused) {
    streams_paused = true;
    ++owner->pauses;
    for (auto& [id, s] : streams)
      if (s->reading) {
        uv_read_stop(reinterpret_cast<uv_stream_t*>(&s->pipe));
        s->reading = false;
      }
  } else if (tcp_queued < low_water && streams_paused) {
    streams_paused = false;
    for (auto& [id, s] : streams)
      if (!s->closing && !s->reading)
        start_reading_stream(s.get());
  }
  if (streams_queued >= high_water && tcp_reading) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp));
    tcp_reading = false;
    ++owner->pauses;
  } else if (streams_queued < low_water && !tcp_reading) {
    start_reading_tcp();
  }
}

// -- Raft streams ---------------------------------------------------------------

stream* connection::add_stream(uint64_t id, uint16_t group,
                               uv_pipe_t*& theirs, std::string& why) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    why = std::string{"socketpair: "} + std::strerror(errno);
    return nullptr;
  }
  // libraft owns this handle from the hand-over on: it uv_close()s it and
  // releases it with raft_free, as it does its TCP handles.
  theirs = static_cast<uv_pipe_t*>(raft_malloc(sizeof(uv_pipe_t)));
  if (theirs == nullptr) {
    ::close(fds[0]);
    ::close(fds[1]);
    why = "out of memory";
    return nullptr;
  }
  uv_pipe_init(owner->loop, theirs, 0);
  auto rv = uv_pipe_open(theirs, fds[0]);
  if (rv != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    uv_close(reinterpret_cast<uv_handle_t*>(theirs),
             [](uv_handle_t* h) { raft_free(h); });
    theirs = nullptr;
    why = std::string{"pipe: "} + uv_strerror(rv);
    return nullptr;
  }
  auto s = std::make_unique<stream>();
  s->conn = this;
  s->id = id;
  s->group = group;
  uv_pipe_init(owner->loop, &s->pipe, 0);
  s->pipe.data = s.get();
  ++open_handles;
  ++owner->open_streams;
  auto ptr = s.get();
  streams.emplace(id, std::move(s));
  rv = uv_pipe_open(&ptr->pipe, fds[1]);
  if (rv != 0) {
    ::close(fds[1]);
    uv_close(reinterpret_cast<uv_handle_t*>(theirs),
             [](uv_handle_t* h) { raft_free(h); });
    theirs = nullptr;
    close_stream(ptr, false);
    why = std::string{"pipe: "} + uv_strerror(rv);
    return nullptr;
  }
  if (!streams_paused && !start_reading_stream(ptr)) {
    uv_close(reinterpret_cast<uv_handle_t*>(theirs),
             [](uv_handle_t* h) { raft_free(h); });
    theirs = nullptr;
    close_stream(ptr, false);
    why = "cannot read the stream";
    return nullptr;
  }
  return ptr;
}

uv_stream_t* connection::open_stream(uint16_t group, std::string& why) {
  if (state != conn_state::open) {
    why = "the link is not open";
    return nullptr;
  }
  auto id = next_stream;
  next_stream += 2;
  uv_pipe_t* theirs = nullptr;
  auto s = add_stream(id, group, theirs, why);
  if (s == nullptr)
    return nullptr;
  std::string none;
  if (!send_frame(frame_type::raft_open, id, none, group)) {
    // The link closed: libraft never sees the stream.
    uv_close(reinterpret_cast<uv_handle_t*>(theirs),
             [](uv_handle_t* h) { raft_free(h); });
    why = "the link closed";
    return nullptr;
  }
  return reinterpret_cast<uv_stream_t*>(theirs);
}

bool connection::start_reading_stream(stream* s) {
  s->reading = uv_read_start(reinterpret_cast<uv_stream_t*>(&s->pipe),
                             stream_buffer,
                             [](uv_stream_t* h, ssize_t nread, const uv_buf_t*) {
                               auto s = static_cast<stream*>(h->data);
                               s->conn->on_stream_data(s, nread);
                             })
               == 0;
  return s->reading;
}

// libraft -> the link.
void connection::on_stream_data(stream* s, ssize_t nread) {
  stage_trace::mark("raft.out", nread > 0 ? nread : 0);
  if (state != conn_state::open || s->closing || nread == 0)
    return;
  if (nread < 0) { // libraft closed its end
    close_stream(s, true);
    return;
  }
  send_frame(frame_type::raft_data, s->id,
             std::string_view{s->buf.get(), static_cast<size_t>(nread)},
             s->group);
}

void connection::close_stream(stream* s, bool tell_peer) {
  if (s->closing)
    return;
  s->closing = true;
  if (tell_peer && state == conn_state::open) {
    std::string none;
    send_frame(frame_type::raft_close, s->id, none, s->group);
  }
  --owner->open_streams;
  uv_close(reinterpret_cast<uv_handle_t*>(&s->pipe), [](uv_handle_t* h) {
    auto s = static_cast<stream*>(h->data);
    auto c = s->conn;
    c->streams.erase(s->id); // deletes *s
    c->on_handle_closed();
  });
}

// -- requests -------------------------------------------------------------------

void connection::ask(request&& req, uint16_t group,
                     std::chrono::milliseconds timeout, answer_fn done) {
  auto id = next_ask++;
  auto kind = req.kind;
  if (!send_frame(frame_type::request, id, encode_request(req), group)) {
    // The link closed while writing: nothing was pending yet.
    ++owner->requests_failed;
    answer res;
    res.kind = kind;
    res.error = errc::leadership_lost;
    res.detail = "the link to node " + std::to_string(peer_id)
                 + " closed while sending: the outcome is unknown";
    done(std::move(res));
    return;
  }
  ++owner->requests_sent;
  auto where = deadlines.emplace(clock_type::now() + timeout, id);
  asks.emplace(id, pending{kind, group, std::move(done), where});
  if (deadlines.begin() == where)
    arm_timer();
}

void connection::arm_timer() {
  if (state != conn_state::open)
    return;
  uv_timer_stop(&timer);
  if (deadlines.empty())
    return;
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
    deadlines.begin()->first - clock_type::now());
  // Rounded up: a timer that fires early finds nothing due and re-arms.
  uv_timer_start(
    &timer,
    [](uv_timer_t* h) { static_cast<connection*>(h->data)->on_timeout(); },
    static_cast<uint64_t>(std::max<int64_t>(1, wait.count() + 1)), 0);
}

namespace {

// Answers a request of this side that gets no answer from its peer.
void fail_pending(endpoint& owner, pending& p, errc code, std::string why) {
  ++owner.requests_failed;
  answer res;
  res.kind = p.kind;
  res.error = code;
  res.detail = std::move(why);
  p.done(std::move(res));
}

} // namespace

void connection::expire_asks() {
  auto now = clock_type::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    auto i = asks.find(deadlines.begin()->second);
    auto p = std::move(i->second);
    deadlines.erase(p.deadline);
    asks.erase(i);
    fail_pending(*owner, p, errc::timeout,
                 "no answer from node " + std::to_string(peer_id)
                   + " in time: the outcome is unknown");
    if (state != conn_state::open)
      return;
  }
  arm_timer();
}

void connection::fail_asks(errc code, const std::string& why) {
  auto all = std::move(asks);
  asks.clear();
  deadlines.clear();
  for (auto& [id, p] : all)
    fail_pending(*owner, p, code, why);
}

void connection::fail_group_asks(uint16_t group, errc code,
                                 const std::string& why) {
  std::vector<pending> failing;
  for (auto i = asks.begin(); i != asks.end();) {
    auto kind = i->second.kind;
    if (i->second.group != group || kind == op::transfer || kind == op::add
        || kind == op::remove) {
      ++i;
      continue;
    }
    deadlines.erase(i->second.deadline);
    failing.push_back(std::move(i->second));
    i = asks.erase(i);
  }
  for (auto& p : failing)
    fail_pending(*owner, p, code, why);
}

void connection::on_request(uint64_t id, uint16_t group,
                            std::string_view payload) {
  request req;
  std::string why;
  if (!decode_request(payload, req, why)) {
    refuse(verdict::refused_frame, "malformed request: " + why);
    return;
  }
  if (serving.count(id) != 0) {
    refuse(verdict::refused_frame,
           "request id " + std::to_string(id) + " reused while in service");
    return;
  }
  auto refuse_overloaded = [&](errc code, std::string detail) {
    ++owner->requests_overloaded;
    answer ans;
    ans.kind = req.kind;
    ans.error = code;
    ans.detail = std::move(detail);
    send_frame(frame_type::answer, id, encode_answer(ans), group);
  };
  if (!owner->server) {
    refuse_overloaded(errc::not_leader, "this node serves no requests");
    return;
  }
  if (serving.size() >= owner->opts.max_served
      || serving_bytes + payload.size() > owner->opts.max_served_bytes) {
    refuse_overloaded(errc::overloaded,
                      std::to_string(serving.size()) + " requests ("
                        + std::to_string(serving_bytes)
                        + " bytes) of this node in service");
    return;
  }
  serving.emplace(id, payload.size());
  serving_bytes += payload.size();
  ++owner->requests_served;
  owner->server(served{peer_id, serial, id, group}, std::move(req));
}

void connection::reply(uint64_t id, uint16_t group, const answer& ans) {
  auto i = serving.find(id);
  if (i == serving.end())
    return; // answered already
  serving_bytes -= i->second;
  serving.erase(i);
  send_frame(frame_type::answer, id, encode_answer(ans), group);
}

void connection::on_answer(uint64_t id, uint16_t group,
                           std::string_view payload) {
  auto i = asks.find(id);
  if (i == asks.end()) {
    // Its request timed out (or was never sent: counted alike; it changes
    // nothing).
    ++owner->late_answers;
    return;
  }
  if (group != i->second.group) {
    refuse(verdict::refused_frame,
           "an answer of group " + std::to_string(group) + " to a request of "
             + std::to_string(i->second.group));
    return;
  }
  answer ans;
  std::string why;
  if (!decode_answer(payload, ans, why) || ans.kind != i->second.kind) {
    if (why.empty())
      why = std::string{"answers "} + to_string(ans.kind) + " to "
            + to_string(i->second.kind);
    refuse(verdict::refused_frame, "malformed answer: " + why);
    return;
  }
  auto p = std::move(i->second);
  asks.erase(i);
  deadlines.erase(p.deadline);
  ++owner->answers_received;
  p.done(std::move(ans));
}

} // namespace oncegate::link::detail
