// Helpers of the suites that run real nodes in process (node link, Raft,
// cluster node): a free loopback port, and a bounded poll.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "caf/test/unit_test.hpp"

namespace oncegate::test {

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0,
/// then closed).
inline uint16_t free_port() {
  auto fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  CAF_REQUIRE_EQUAL(::bind(fd, reinterpret_cast<sockaddr*>(&addr),
                           sizeof(addr)),
                    0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// Polls `pred` every 5 ms for at most `bound`; its last answer.
inline bool wait_for(const std::function<bool()>& pred,
                     std::chrono::milliseconds bound) {
  auto until = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < until) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

} // namespace oncegate::test
