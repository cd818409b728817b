#include "routing/peer_tls_impl.hpp"

// The socket calls of libcaf_io behind the peer policy (see peer_tls.hpp):
// accept, where a connection from an address that is no member's is closed
// before CAF makes a TLS session for it (with cluster.member-sources-only),
// and epoll_ctl, for the pacing of pending TLS handshakes.
//
// Pacing.
// libcaf_openssl's session answers a write event with "success, 0 bytes"
// while its handshake waits for the peer (session::do_some returns
// rw_state::success on SSL_ERROR_WANT_READ), and CAF's stream keeps its
// write interest because its buffer (the BASP server handshake, queued at
// accept) is still full: epoll reports the socket writable at once, again
// and again, and a connection that never finishes its handshake keeps the
// multiplexer thread busy (about a core) until the deadline.
//
// Here: the epoll_ctl calls libcaf_io makes are interposed and remembered;
// while a handshake step ended in "want read", that socket's EPOLLOUT is
// held back (the peer's bytes arrive as read events, which drive the
// handshake as before); the step that finishes the handshake, or asks to
// write, gives it back. sweep_held() gives every held socket its write
// interest back for one round, which also makes CAF call the handshake
// step again so that the deadline is enforced: the interposed epoll_wait
// runs it every 200 ms while sockets are held (and shortens CAF's wait to
// that), on the multiplexer thread.
//
// A socket is held only while CAF reads it: when CAF stops reading (it
// drains a connection it shuts down by writing), the hold ends.
//
// Every change of a registration happens on the multiplexer thread (CAF's
// own calls, the handshake steps and the sweep, which is posted there), so
// a held socket is always one CAF has registered: CAF deletes a
// registration before it closes the socket, and the deletion drops the
// hold.

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <chrono>

namespace oncegate::tls {

using namespace detail;

namespace {

using epoll_ctl_fn = int (*)(int, int, int, epoll_event*);

struct registration {
  int epfd = -1;
  /// The events CAF asked for.
  epoll_event ev{};
};

struct pacing_state {
  std::mutex mtx;
  /// libcaf_io's registrations, by socket.
  std::unordered_map<int, registration> regs;
  /// Sockets whose EPOLLOUT is held back.
  std::unordered_set<int> held;
  epoll_ctl_fn real = nullptr;
};

pacing_state& pacing() {
  static pacing_state instance;
  return instance;
}

epoll_ctl_fn real_epoll_ctl() {
  static const auto fn = next_symbol<epoll_ctl_fn>("epoll_ctl");
  return fn;
}

// With P.mtx held: registers `fd` with the events CAF asked for, minus
// EPOLLOUT if held.
void apply(pacing_state& P, int fd, const registration& r) {
  auto ev = r.ev;
  if (P.held.count(fd) != 0)
    ev.events &= ~static_cast<uint32_t>(EPOLLOUT);
  real_epoll_ctl()(r.epfd, EPOLL_CTL_MOD, fd, &ev);
}

} // namespace

namespace detail {

bool refuse_stranger(int fd) {
  auto st = current_state();
  if (!st || !st->config.member_sources_only)
    return false;
  std::string ip;
  auto peer = peer_of(fd, &ip);
  if (ip.empty())
    return false; // not an IP socket (the start-up self test's socketpair)
  for (auto& kv : st->member_ips)
    if (kv.second.count(ip) != 0)
      return false;
  event ev;
  ev.kind = event::rejected;
  ev.inbound = true;
  ev.peer = peer;
  ev.reason = "connection from " + ip + ", which is no member's address";
  report(std::move(ev));
  return true;
}

bool from_caf_io(const void* return_address) {
  auto addr = reinterpret_cast<uintptr_t>(return_address);
  return addr >= g().caf_io_lo.load(std::memory_order_relaxed)
         && addr < g().caf_io_hi.load(std::memory_order_relaxed);
}

void hold_writes(int fd) {
  auto& P = pacing();
  std::lock_guard<std::mutex> guard{P.mtx};
  auto r = P.regs.find(fd);
  // Not registered yet (the first step runs before CAF registers the
  // socket): the next step holds it. Not reading: only reads could drive
  // the handshake on, so nothing is held (CAF drains a connection it shuts
  // down by writing).
  if (r == P.regs.end() || (r->second.ev.events & EPOLLIN) == 0
      || !P.held.insert(fd).second)
    return;
  if ((r->second.ev.events & EPOLLOUT) != 0)
    apply(P, fd, r->second);
}

void release_writes(int fd) {
  auto& P = pacing();
  std::lock_guard<std::mutex> guard{P.mtx};
  if (P.held.erase(fd) == 0)
    return;
  auto r = P.regs.find(fd);
  if (r != P.regs.end() && (r->second.ev.events & EPOLLOUT) != 0)
    apply(P, fd, r->second);
}

size_t sweep_held() {
  auto& P = pacing();
  std::lock_guard<std::mutex> guard{P.mtx};
  auto held = std::move(P.held);
  P.held.clear();
  for (auto fd : held) {
    auto r = P.regs.find(fd);
    if (r != P.regs.end() && (r->second.ev.events & EPOLLOUT) != 0)
      apply(P, fd, r->second);
  }
  return held.size();
}

size_t held_count() {
  auto& P = pacing();
  std::lock_guard<std::mutex> guard{P.mtx};
  return P.held.size();
}

} // namespace detail

} // namespace oncegate::tls

// libcaf_io's calls of accept and epoll_ctl come here (see above);
// everyone else's go on to libc unchanged.

// The connections from strangers waiting in the listen queue are closed
// here, at most `max_strangers` per call (then "would block": CAF comes
// back while the socket stays readable, after its other events).
extern "C" __attribute__((visibility("default"))) int
accept(int fd, sockaddr* addr, socklen_t* len) {
  using namespace oncegate::tls;
  using accept_fn = int (*)(int, sockaddr*, socklen_t*);
  static const auto real = next_symbol<accept_fn>("accept");
  if (!g().active.load(std::memory_order_acquire)
      || !from_caf_io(__builtin_return_address(0)))
    return real(fd, addr, len);
  constexpr int max_strangers = 64;
  auto capacity = len != nullptr ? *len : 0;
  for (int i = 0; i < max_strangers; ++i) {
    if (len != nullptr)
      *len = capacity;
    auto sock = real(fd, addr, len);
    if (sock < 0 || !refuse_stranger(sock))
      return sock;
    ::close(sock);
  }
  errno = EAGAIN;
  return -1;
}

// While sockets are held, CAF's wait for events lasts `sweep_period` at
// most, and every `sweep_period` the held sockets get their write interest
// back for one round (sweep_held): CAF then calls their handshake step
// again, which enforces the deadline. All of it on the multiplexer thread,
// where CAF makes its own registration changes.
extern "C" __attribute__((visibility("default"))) int
epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout) {
  using namespace oncegate::tls;
  using epoll_wait_fn = int (*)(int, epoll_event*, int, int);
  static const auto real = next_symbol<epoll_wait_fn>("epoll_wait");
  if (!g().active.load(std::memory_order_acquire)
      || !from_caf_io(__builtin_return_address(0)))
    return real(epfd, events, maxevents, timeout);
  constexpr int sweep_period_ms = 200;
  thread_local auto last_sweep = std::chrono::steady_clock::now();
  if (held_count() > 0) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_sweep >= std::chrono::milliseconds(sweep_period_ms)) {
      last_sweep = now;
      sweep_held();
    }
    if (timeout < 0 || timeout > sweep_period_ms)
      timeout = sweep_period_ms;
  } else {
    last_sweep = std::chrono::steady_clock::now();
  }
  return real(epfd, events, maxevents, timeout);
}

extern "C" __attribute__((visibility("default"))) int
epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
  using namespace oncegate::tls;
  auto real = real_epoll_ctl();
  if (!g().active.load(std::memory_order_acquire)
      || !from_caf_io(__builtin_return_address(0)))
    return real(epfd, op, fd, ev);
  auto& P = pacing();
  std::lock_guard<std::mutex> guard{P.mtx};
  if (op == EPOLL_CTL_DEL || ev == nullptr) {
    P.regs.erase(fd);
    P.held.erase(fd);
    return real(epfd, op, fd, ev);
  }
  // A new socket under a reused number, or CAF stopped reading (a hold
  // waits for reads): nothing held.
  if (op == EPOLL_CTL_ADD || (ev->events & EPOLLIN) == 0)
    P.held.erase(fd);
  auto& r = P.regs[fd];
  r.epfd = epfd;
  r.ev = *ev;
  if (P.held.count(fd) == 0)
    return real(epfd, op, fd, ev);
  auto stripped = *ev;
  stripped.events &= ~static_cast<uint32_t>(EPOLLOUT);
  return real(epfd, op, fd, &stripped);
}

void* oncegate::tls::detail::socket_interposer(const char* name) {
  if (std::string_view{name} == "accept")
    return reinterpret_cast<void*>(&accept);
  if (std::string_view{name} == "epoll_wait")
    return reinterpret_cast<void*>(&epoll_wait);
  if (std::string_view{name} == "epoll_ctl")
    return reinterpret_cast<void*>(&epoll_ctl);
  return nullptr;
}
