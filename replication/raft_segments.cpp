#include "replication/raft_segments.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <caf/expected.hpp>

#include "common/errc.hpp"
#include "common/logging.hpp"

namespace oncegate::cluster {

namespace {

/// The zeros a file must end with to be left as it is.
constexpr std::size_t zero_tail_bytes = 1024 * 1024;

caf::error os_failure(const std::string& what) {
  return make_error(errc::storage_failure,
                    what + ": " + std::strerror(errno));
}

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

// Whether the last `zero_tail_bytes` of the file (all of it, if smaller)
// are zeros.
caf::expected<bool> ends_with_zeros(int fd, off_t size,
                                    const std::string& path) {
  auto len = static_cast<std::size_t>(
    std::min<off_t>(size, static_cast<off_t>(zero_tail_bytes)));
  std::vector<char> buf(len);
  std::size_t got = 0;
  while (got < len) {
    auto n = ::pread(fd, buf.data() + got, len - got,
                     size - static_cast<off_t>(len) + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0)
      return make_error(errc::storage_failure,
                        "read " + path + ": shorter than its size");
    if (n < 0)
      return os_failure("read " + path);
    got += static_cast<std::size_t>(n);
  }
  return std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; });
}

} // namespace

caf::error pad_open_segments(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator{dir, ec};
       !ec && it != std::filesystem::directory_iterator{}; it.increment(ec)) {
    // libraft's open segments only (`open-` and digits), regular files
    // only: anything else there is not ours to change.
    auto name = it->path().filename().string();
    if (name.rfind("open-", 0) != 0 || name.size() == 5
        || name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec) || it->is_symlink(type_ec))
      continue;
    auto path = it->path().string();
    fd_guard f{::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW)};
    if (f.fd < 0)
      return os_failure("open " + path);
    struct stat st {};
    if (::fstat(f.fd, &st) != 0)
      return os_failure("stat " + path);
    if (!S_ISREG(st.st_mode) || st.st_size == 0)
      continue; // libraft removes an empty one
    auto zeros = ends_with_zeros(f.fd, st.st_size, path);
    if (!zeros)
      return std::move(zeros.error());
    if (*zeros)
      continue;
    auto size = st.st_size + static_cast<off_t>(open_segment_pad_bytes);
    if (::ftruncate(f.fd, size) != 0)
      return os_failure("extend " + path);
    if (::fsync(f.fd) != 0)
      return os_failure("fsync " + path);
    log::cluster()->info("raft.open_segment_padded file={} size={} "
                         "pad={}",
                         name, st.st_size, open_segment_pad_bytes);
  }
  if (ec)
    return make_error(errc::storage_failure,
                      "list raft dir " + dir + ": " + ec.message());
  return caf::none;
}

} // namespace oncegate::cluster
