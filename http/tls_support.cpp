#include "http/tls_support.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <openssl/err.h>

namespace oncegate::gateway::detail {

std::string openssl_reason(unsigned long* first) {
  auto code = ERR_get_error();
  if (first != nullptr)
    *first = code;
  std::string res;
  if (code != 0) {
    auto reason = ERR_reason_error_string(code);
    res = reason ? reason : "error " + std::to_string(ERR_GET_REASON(code));
  } else {
    res = "unknown error";
  }
  ERR_clear_error();
  return res;
}

bool read_bounded_file(const std::string& path, std::size_t limit,
                       std::string& out, std::string& error) {
  auto fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  out.clear();
  // One byte more than the bound tells a file at the bound from a larger
  // one without trusting its size (a FIFO has none).
  char buf[16 * 1024];
  for (;;) {
    auto n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error = "cannot read " + path + ": " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > limit) {
      error = path + " is larger than " + std::to_string(limit) + " bytes";
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  return true;
}

} // namespace oncegate::gateway::detail
