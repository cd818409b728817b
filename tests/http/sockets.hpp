#pragma once

// Plain-socket helpers of the HTTP tests, whose clients and servers talk
// raw bytes over 127.0.0.1.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace oncegate::test {

/// The address of `port` on 127.0.0.1 (0: any free port, for a listener).
inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

/// Writes all of `bytes` to `fd`; stops early only when the peer is gone.
inline void send_all(int fd, std::string_view bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    auto n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0)
      return;
    off += static_cast<std::size_t>(n);
  }
}

/// `x` in lower case (ASCII).
inline std::string lower(std::string x) {
  for (auto& c : x)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return x;
}

} // namespace oncegate::test
