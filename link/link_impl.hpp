// @private: the inside of the node link (node_link.hpp), shared by its
// implementation files and included by nothing else. link_context.cpp
// makes the TLS context; link_endpoint.cpp is
// libraft's side (init, listen, connect, close), dialling and the member
// list; link_connection.cpp one connection's states up to an open link
// (TCP, TLS, hello, refusals, closing); link_frames_io.cpp the bytes of an
// open link (TLS, frames, Raft streams, requests and answers, back-pressure).
//
//   outbound:  resolving -> connecting -> tls -> hello -> open
//   inbound:                   (accept) -> tls -> hello -> open
//   any state -> closing (all handles closed) -> freed
//
// Without TLS (`cluster.insecure`) the tls state is skipped. A timer bounds
// everything before `open`; once open, the same timer fires at the earliest
// deadline of the requests this side sent.
//
// A Raft stream is a socketpair: libraft holds one end (a uv_pipe_t, as its
// own transport hands it a uv_tcp_t), the link the other; what libraft
// writes becomes raft_data frames, and raft_data frames are written to it.
// Streams opened by the dialling side have odd ids, the other side's even,
// whatever their group: an id names one stream of one group on a link.
//
// Groups: each Raft group (partition) has its transport, a `group_port` of
// the one endpoint. A group's streams, connects and requests are its own;
// closing a group's transport closes its streams and cancels its connects,
// and the links, the listener and the dialling stay until the last group
// closed.
//
// Frames are coalesced: those a connection sends in one turn of the loop
// go out as one TLS write and one socket write, before the loop waits
// again (the endpoint's prepare handle), or at once past `coalesce_bytes`.
//
// Back-pressure: the streams of a link stop being read while the link's
// socket has more than `high_water` queued, and the socket stops being read
// while its streams have; both resume below `low_water`.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include <sys/socket.h>

#include <openssl/ssl.h>

#include "link/node_link.hpp"

namespace oncegate::link::detail {

using clock_type = std::chrono::steady_clock;

constexpr size_t read_chunk = 64 * 1024;
constexpr size_t high_water = 256 * 1024;
constexpr size_t low_water = 64 * 1024;
constexpr size_t coalesce_bytes = 64 * 1024;
constexpr int listen_backlog = 128;
/// Refusal lines logged a second at most (a burst of as many): a flood of
/// strangers must not fill the disk; the counters count every refusal.
constexpr int refusal_log_rate = 20;

/// A token bucket of log lines.
struct log_budget {
  double tokens = refusal_log_rate;
  clock_type::time_point last = clock_type::now();
  int64_t suppressed = 0;

  /// -1: no line now (counted); otherwise the lines suppressed since the
  /// last one (reported with it).
  int64_t take() {
    auto now = clock_type::now();
    tokens = std::min<double>(
      refusal_log_rate,
      tokens
        + std::chrono::duration<double>(now - last).count() * refusal_log_rate);
    last = now;
    if (tokens < 1) {
      ++suppressed;
      return -1;
    }
    tokens -= 1;
    auto res = suppressed;
    suppressed = 0;
    return res;
  }
};

/// A hello is a few dozen bytes; more before the hello is no hello.
constexpr uint32_t max_hello_bytes = 1024;

// Splits `host:port` or `[v6]:port`; the port must be 1..65535.
bool split_host_port(const std::string& address, std::string& host,
                     std::string& port);

// A numeric IPv4 or IPv6 host; false for names.
bool numeric_address(const std::string& host, const std::string& port,
                     sockaddr_storage& out);

std::string sockaddr_text(const sockaddr* sa);

// The IP of `sa` alone, numeric.
std::string ip_text(const sockaddr* sa);

// The context of every link connection, both roles: mutual TLS under the
// cluster CA with this node's identity (link_context.cpp); null with
// `error` set when a file does not load or check.
SSL_CTX* make_context(const tls_files& files, std::string& error);

// Why a TLS handshake or read failed: the certificate check's verdict if
// it failed, else OpenSSL's error queue.
std::string tls_error(SSL* ssl);

struct endpoint;
struct connection;

enum class conn_state { resolving, connecting, tls, hello, open, closing };

// Why a connection ends.
enum class verdict {
  done,     // closed by either side once open
  canceled, // the endpoint closes
  failed,   // outbound failure, or an I/O error
  replaced, // the peer dialled again: its new link replaces this one
  refused_handshake, // refusals, one counter each
  refused_identity,
  refused_hello,
  refused_busy,
  refused_source,
  refused_frame,
};

struct stream;

struct write_req {
  uv_write_t req;
  connection* conn = nullptr;
  stream* to = nullptr; // null: the TCP socket
  size_t len = 0;
  std::unique_ptr<char[]> data;
};

// Outlives its connection if the connection gives up on it: a running
// getaddrinfo cannot be taken back.
struct resolver {
  uv_getaddrinfo_t req;
  connection* conn;
};

// One Raft stream on a link (see above).
struct stream {
  connection* conn = nullptr;
  uint64_t id = 0;
  uint16_t group = 0;
  uv_pipe_t pipe;
  bool reading = false;
  bool closing = false;
  size_t queued = 0; // bytes in our writes to libraft's end
  std::unique_ptr<char[]> buf;
};

// A request this side sent and waits for.
struct pending {
  op kind = op::claim;
  uint16_t group = 0;
  answer_fn done;
  /// Its entry in `connection::deadlines`.
  std::multimap<clock_type::time_point, uint64_t>::iterator deadline;
};

struct group_port;

// A libraft `connect` waiting for the link to its node.
struct connect_wait {
  endpoint* owner = nullptr;
  group_port* port = nullptr; // the group whose libraft asked
  raft_uv_connect* req = nullptr;
  raft_uv_connect_cb cb = nullptr;
  uint64_t peer = 0;
  uv_timer_t timer;
  bool finished = false;
  uv_stream_t* result = nullptr;
  int status = 0;
};

// The dialling side's state for one peer of a higher id.
struct dialer {
  endpoint* owner = nullptr;
  uint64_t peer = 0;
  uv_timer_t timer;
  std::chrono::milliseconds backoff{0};
  connection* conn = nullptr; // the attempt under way, or the open link
  bool timer_open = false;
};

struct connection {
  endpoint* owner = nullptr;
  uint64_t serial = 0;
  bool outbound = false;
  conn_state state = conn_state::tls;

  // Outbound: the id and address dialled; inbound: those claimed.
  uint64_t peer_id = 0;
  std::string peer_address;
  std::string remote = "?";
  uint16_t version = 0;

  uv_tcp_t tcp;
  uv_timer_t timer;
  int open_handles = 0;
  uv_connect_t connect_req;
  resolver* resolving = nullptr;

  SSL* ssl = nullptr;  // null without TLS
  BIO* rbio = nullptr; // owned by ssl
  BIO* wbio = nullptr; // owned by ssl
  bool tls_failed = false;
  bool counted_handshake = false;

  size_t tcp_queued = 0; // bytes in our writes to the TCP socket
  bool tcp_reading = false;
  bool streams_paused = false;
  std::unique_ptr<char[]> tcp_buf;
  std::unique_ptr<char[]> plain_buf;
  // Frames sent in this loop turn and not yet written (see `flush_out`).
  std::string out;
  // Plain text received and not yet taken as frames, from `in_pos` on.
  std::string in;
  size_t in_pos = 0;

  std::map<uint64_t, std::unique_ptr<stream>> streams;
  uint64_t next_stream = 0;
  size_t streams_queued = 0;

  std::map<uint64_t, pending> asks;
  std::multimap<clock_type::time_point, uint64_t> deadlines;
  uint64_t next_ask = 1;

  // Requests of the peer in service: their count and bytes, by id.
  std::map<uint64_t, size_t> serving;
  uint64_t serving_bytes = 0;

  ~connection() {
    if (ssl != nullptr)
      SSL_free(ssl);
  }

  // -- states (link_connection.cpp) -------------------------------------------
  void init_handles();
  bool make_ssl();
  void start_connect(const sockaddr* addr);
  void do_handshake();
  void handshake_done();
  void send_hello();
  void on_hello(std::string_view payload);
  std::string check_identity(const hello& h);
  void opened();
  void on_timeout();
  void on_tcp_eof(ssize_t nread);
  void fail_outbound(const std::string& why);
  void refuse(verdict v, const std::string& why);
  void close(verdict v, const std::string& why = {});
  void on_handle_closed();
  bool is_dialler_of_link() const {
    return outbound;
  }

  // -- bytes (link_frames_io.cpp) ---------------------------------------------
  void start_reading_tcp();
  void on_tcp_data(const char* data, size_t len);
  void pump_tls();
  void take_frames();
  void on_frame(const frame_header& h, std::string_view payload);
  void on_raft_open(const frame_header& h, std::string_view payload);
  bool send_frame(frame_type type, uint64_t id, std::string_view payload,
                  uint16_t group = 0);
  /// Writes the frames of `out` (through TLS): false if that closed the
  /// connection.
  bool flush_out();
  bool flush_tls();
  void flush_tls_now();
  bool queue_write(std::unique_ptr<write_req> w);
  void on_written(write_req* w, int status);
  void check_backpressure();

  // Raft streams.
  uv_stream_t* open_stream(uint16_t group, std::string& why);
  stream* add_stream(uint64_t id, uint16_t group, uv_pipe_t*& theirs,
                     std::string& why);
  void on_stream_data(stream* s, ssize_t nread);
  bool start_reading_stream(stream* s);
  void close_stream(stream* s, bool tell_peer);

  // Requests.
  void ask(request&& req, uint16_t group, std::chrono::milliseconds timeout,
           answer_fn done);
  void on_request(uint64_t id, uint16_t group, std::string_view payload);
  void on_answer(uint64_t id, uint16_t group, std::string_view payload);
  void reply(uint64_t id, uint16_t group, const answer& ans);
  void expire_asks();
  void arm_timer();
  void fail_asks(errc code, const std::string& why);
  /// `fail_asks` of one group's requests.
  void fail_group_asks(uint16_t group, errc code, const std::string& why);
};

// One Raft group's transport: what `raft_uv_transport::impl` points to.
struct group_port {
  endpoint* owner = nullptr;
  uint16_t group = 0;
  raft_uv_transport* iface = nullptr;
  bool initialised = false; // libraft called its `init`
  raft_uv_accept_cb accept_cb = nullptr;
  bool closing = false; // libraft called its `close`
  raft_uv_transport_close_cb close_cb = nullptr;
  bool freed = false; // link::close ran
};

struct endpoint {
  /// By group; null where no transport was made for a group (yet).
  std::vector<std::unique_ptr<group_port>> ports;
  uv_loop_t* loop = nullptr;
  SSL_CTX* ctx = nullptr; // null without TLS
  options opts;
  server_fn server;

  uint64_t id = 0;
  std::string address;
  uv_tcp_t listener;
  bool listener_open = false;
  // Runs before the loop waits: writes what connections coalesced.
  uv_prepare_t flusher;
  bool flusher_open = false;
  std::vector<uint64_t> unflushed; // serials of connections with `out`

  std::map<uint64_t, std::unique_ptr<connection>> conns; // by serial
  std::map<uint64_t, connection*> links;                 // open, by peer
  std::map<uint64_t, std::unique_ptr<dialer>> dialers;   // by peer
  std::map<connect_wait*, std::unique_ptr<connect_wait>> waits;
  log_budget refusal_lines;
  /// The members' IPs (numeric text), for `member_sources_only`.
  std::set<std::string> member_ips;
  uint64_t next_serial = 1;
  /// The last group's transport closes: everything goes.
  bool closing = false;

  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> connected{0};
  std::atomic<uint64_t> connect_failed{0};
  std::atomic<uint64_t> refused_handshake{0};
  std::atomic<uint64_t> refused_identity{0};
  std::atomic<uint64_t> refused_hello{0};
  std::atomic<uint64_t> refused_busy{0};
  std::atomic<uint64_t> refused_source{0};
  std::atomic<uint64_t> refused_frame{0};
  std::atomic<uint64_t> requests_sent{0};
  std::atomic<uint64_t> answers_received{0};
  std::atomic<uint64_t> requests_failed{0};
  std::atomic<uint64_t> late_answers{0};
  std::atomic<uint64_t> requests_served{0};
  std::atomic<uint64_t> requests_overloaded{0};
  std::atomic<uint64_t> pauses{0};
  std::atomic<uint64_t> frames_sent{0};
  std::atomic<uint64_t> frame_writes{0};
  std::atomic<uint64_t> buffered{0};
  std::atomic<uint64_t> handshaking{0};
  std::atomic<uint64_t> open_links{0};
  std::atomic<uint64_t> open_streams{0};

  ~endpoint() {
    if (ctx != nullptr)
      SSL_CTX_free(ctx);
  }

  connection* make_connection(bool outbound);

  // -- link_endpoint.cpp -------------------------------------------------------
  void on_listen(int status);
  /// Dials `peer` now (a dialer's timer fired, or the first time).
  void dial(dialer* d);
  /// A dialer's attempt ended (`conn` is gone): dial again after back-off.
  void redial_later(dialer* d);
  void update_dialers();
  /// Resolves the members' addresses into `member_ips` (names block: at
  /// start and on membership changes only).
  void resolve_members();
  /// A link to `c->peer_id` opened: serve the connects waiting for it.
  void link_opened(connection* c);
  /// `c` closes: forget it as a link or an attempt.
  void link_closed(connection* c);
  void finish_wait(connect_wait* w, uv_stream_t* s, int status);
  /// Group `p` closes while others stay: its connects and streams go.
  void close_group(group_port* p);
  /// Runs the close callbacks of closing groups whose handles are gone.
  void maybe_fire_close();
  /// Whether nothing of the endpoint is open on the loop any more.
  bool all_closed() const;
  /// Writes every connection's coalesced frames.
  void flush_all();
};

void set_errmsg(raft_uv_transport* t, const std::string& msg);

} // namespace oncegate::link::detail
