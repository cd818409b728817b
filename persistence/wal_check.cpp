// Reads a SQLite WAL file ourselves (https://sqlite.org/fileformat2.html,
// "WAL File Format") to find committed transactions that SQLite's recovery
// would drop. No SQLite call here: the point is to look before SQLite does.
//
// Why the rule in wal_check.hpp proves a loss and stays quiet on a crash:
// - SQLite appends frames of one WAL generation (one salt) in file order
//   and starts the next transaction only after the previous one's commit
//   returned; with `synchronous=FULL` that return came after the fsync of
//   every frame up to its commit frame. So a commit frame followed, in one
//   run of frames that verify from each other's stored checksums, by a later
//   commit frame belonged to a transaction that was complete on disk and
//   acknowledged. If SQLite stops before it, a byte it needed went bad
//   after the fact: a loss.
// - A crash (kill -9, power cut) can leave only the transaction being
//   written torn: some of its frames missing or half written, possibly its
//   commit frame persisted before an earlier frame of it. That is one commit
//   frame after the break at most: no pair, no loss.
// - Frames from before a WAL restart carry the previous salt and never
//   verify; frames a recovery left behind beyond its end (the next writes
//   overwrite them from there on) chain from a history the new frames do not
//   continue, so a run never crosses from new frames into old ones.
// - Under `synchronous=NORMAL` (a cluster node) commits are not fsynced and
//   a power cut may write back frames out of order: the same pattern can
//   appear without damage. Nothing acknowledged depends on the file there
//   (the Raft log does), which is the store's business (sqlite_store.cpp).
// - A damaged WAL header makes SQLite ignore the whole file. A power cut
//   while a header is rewritten (WAL restart) does that legitimately, but
//   only once every frame was copied into the database (the restart
//   requires it): so the committed frames are compared with the database
//   file, and only content the database lacks is a loss.
#include "persistence/wal_check.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errc.hpp"

namespace oncegate::persistence {

namespace {

constexpr uint32_t wal_magic = 0x377f0682; // | 1: big-endian checksums
constexpr uint32_t wal_version = 3007000;
constexpr std::size_t wal_header_size = 32;
constexpr std::size_t frame_header_size = 24;

uint32_t get_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16)
         | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint32_t get_le32(const unsigned char* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16)
         | (uint32_t{p[1]} << 8) | uint32_t{p[0]};
}

using checksum = std::array<uint32_t, 2>;

// SQLite's walChecksumBytes: the input as 32-bit words (big-endian when the
// magic's low bit is set), two running sums.
checksum add_checksum(checksum s, const unsigned char* data, std::size_t n,
                      bool big_endian) {
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    auto x0 = big_endian ? get_be32(data + i) : get_le32(data + i);
    auto x1 = big_endian ? get_be32(data + i + 4) : get_le32(data + i + 4);
    s[0] += x0 + s[1];
    s[1] += x1 + s[0];
  }
  return s;
}

checksum stored_checksum(const unsigned char* p) {
  return {get_be32(p), get_be32(p + 4)};
}

bool valid_page_size(uint32_t n) {
  return n >= 512 && n <= 65536 && (n & (n - 1)) == 0;
}

caf::error read_error(const std::string& path) {
  return make_error(errc::storage_failure,
                    "read " + path + ": " + std::strerror(errno));
}

// Reads exactly `n` bytes at `offset`; false at end of file or on error
// (errno 0 for a short file).
bool read_at(int fd, unsigned char* buf, std::size_t n, uint64_t offset) {
  std::size_t done = 0;
  while (done < n) {
    auto r = ::pread(fd, buf + done, n - done,
                     static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      if (r == 0)
        errno = 0;
      return false;
    }
    done += static_cast<std::size_t>(r);
  }
  return true;
}

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

// One frame as the scan sees it.
struct frame_view {
  uint32_t page = 0;
  bool commit = false;
  // Salt, page number and checksum (from the previous frame's stored one)
  // all verify.
  bool intact = false;
};

// Reads the frames one by one; `visit(k, frame, offset)` gets each.
template <class Visit>
caf::error scan_frames(int fd, const std::string& path, uint64_t frames,
                       uint32_t page_size, const unsigned char* salt,
                       checksum seed, bool big_endian, Visit visit) {
  std::vector<unsigned char> buf(frame_header_size + page_size);
  auto prev = seed;
  for (uint64_t k = 1; k <= frames; ++k) {
    auto offset = wal_header_size + (k - 1) * buf.size();
    if (!read_at(fd, buf.data(), buf.size(), offset))
      return read_error(path);
    frame_view f;
    f.page = get_be32(buf.data());
    f.commit = get_be32(buf.data() + 4) != 0;
    auto sum = add_checksum(prev, buf.data(), 8, big_endian);
    sum = add_checksum(sum, buf.data() + frame_header_size, page_size,
                       big_endian);
    auto stored = stored_checksum(buf.data() + 16);
    f.intact = f.page != 0 && std::memcmp(buf.data() + 8, salt, 8) == 0
               && sum == stored;
    prev = stored;
    visit(k, f, offset);
  }
  return caf::none;
}

// One pass over the WAL; `header` gets the WAL header as read.
caf::expected<wal_report> scan_wal(const std::string& db_path,
                                   std::string& header);

} // namespace

caf::expected<wal_report> check_wal(const std::string& db_path) {
  // A running writer (a backup of a live node) may restart the WAL while it
  // is read: new frames then sit before old ones under another salt, which
  // looks like a loss. A restart rewrites the header, so a loss counts only
  // when the header is the same after the scan as before it.
  for (int attempt = 0;; ++attempt) {
    std::string before;
    auto report = scan_wal(db_path, before);
    if (!report || !report->loss || attempt == 3)
      return report;
    std::string after;
    fd_guard wal{::open((db_path + "-wal").c_str(), O_RDONLY | O_CLOEXEC)};
    unsigned char hdr[wal_header_size];
    if (wal.fd >= 0 && read_at(wal.fd, hdr, sizeof(hdr), 0))
      after.assign(reinterpret_cast<const char*>(hdr), sizeof(hdr));
    if (after == before)
      return report;
  }
}

namespace {

caf::expected<wal_report> scan_wal(const std::string& db_path,
                                   std::string& header) {
  wal_report report;
  auto path = db_path + "-wal";
  fd_guard wal{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (wal.fd < 0) {
    if (errno == ENOENT)
      return report;
    return read_error(path);
  }
  struct stat st {};
  if (::fstat(wal.fd, &st) != 0)
    return read_error(path);
  auto size = static_cast<uint64_t>(st.st_size);
  // SQLite takes a WAL shorter than its header for an empty one; whatever
  // was in it cannot be told any more.
  if (size < wal_header_size)
    return report;
  unsigned char hdr[wal_header_size];
  if (!read_at(wal.fd, hdr, sizeof(hdr), 0))
    return read_error(path);
  header.assign(reinterpret_cast<const char*>(hdr), sizeof(hdr));
  auto magic = get_be32(hdr);
  auto page_size = get_be32(hdr + 8);
  bool big_endian = (magic & 1) != 0;
  bool header_ok = (magic & ~uint32_t{1}) == wal_magic
                   && get_be32(hdr + 4) == wal_version
                   && valid_page_size(page_size)
                   && add_checksum({0, 0}, hdr, 24, big_endian)
                        == stored_checksum(hdr + 24);
  if (header_ok) {
    report.frames = (size - wal_header_size)
                    / (frame_header_size + page_size);
    bool sqlite_reads = true; // SQLite's replay has not stopped yet
    bool run_has_commit = false;
    auto err = scan_frames(
      wal.fd, path, report.frames, page_size, hdr + 16,
      stored_checksum(hdr + 24), big_endian,
      [&](uint64_t k, const frame_view& f, uint64_t) {
        if (sqlite_reads) {
          if (f.intact) {
            if (f.commit)
              report.last_kept_commit = k;
            return;
          }
          sqlite_reads = false;
          report.first_bad_frame = k;
          return;
        }
        if (!f.intact) {
          run_has_commit = false;
          return;
        }
        if (f.commit) {
          ++report.later_commits;
          report.last_commit_frame = k;
          if (run_has_commit)
            report.loss = true;
          run_has_commit = true;
        }
      });
    if (err)
      return err;
    return report;
  }
  // The header does not verify: SQLite ignores every frame. Judge the
  // frames by the first one's salt and the database's page size.
  report.header_damaged = true;
  report.first_bad_frame = 1;
  fd_guard db{::open(db_path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (db.fd < 0)
    return read_error(db_path);
  if (!valid_page_size(page_size)) {
    unsigned char db_hdr[18];
    if (!read_at(db.fd, db_hdr, sizeof(db_hdr), 0))
      return report; // no database header either: nothing to compare with
    page_size = (uint32_t{db_hdr[16]} << 8) | db_hdr[17];
    if (page_size == 1)
      page_size = 65536;
    if (!valid_page_size(page_size))
      return report;
  }
  if ((magic & ~uint32_t{1}) != wal_magic)
    big_endian = false; // what SQLite writes on this (little-endian) host
  report.frames = (size - wal_header_size) / (frame_header_size + page_size);
  if (report.frames == 0)
    return report;
  unsigned char salt[8];
  if (!read_at(wal.fd, salt, sizeof(salt), wal_header_size + 8))
    return read_error(path);
  // The newest committed version of every page, as far as runs of intact
  // frames ending in a commit frame show it.
  std::unordered_map<uint32_t, uint64_t> newest;
  std::vector<std::pair<uint32_t, uint64_t>> pending; // the run's open txn
  auto err = scan_frames(
    wal.fd, path, report.frames, page_size, salt, stored_checksum(hdr + 24),
    big_endian, [&](uint64_t k, const frame_view& f, uint64_t offset) {
      if (!f.intact) {
        pending.clear();
        return;
      }
      pending.emplace_back(f.page, offset + frame_header_size);
      if (f.commit) {
        ++report.later_commits;
        report.last_commit_frame = k;
        for (auto& [page, at] : pending)
          newest[page] = at;
        pending.clear();
      }
    });
  if (err)
    return err;
  std::vector<unsigned char> in_wal(page_size);
  std::vector<unsigned char> in_db(page_size);
  for (auto& [page, at] : newest) {
    if (!read_at(wal.fd, in_wal.data(), page_size, at))
      return read_error(path);
    if (!read_at(db.fd, in_db.data(), page_size,
                 uint64_t{page - 1} * page_size)
        || in_wal != in_db) {
      report.loss = true;
      break;
    }
  }
  return report;
}

} // namespace

std::string describe_wal_loss(const std::string& db_path,
                              const wal_report& r) {
  auto path = db_path + "-wal";
  if (r.header_damaged)
    return path + " is damaged: its header does not verify, so SQLite would "
           "ignore all " + std::to_string(r.frames) + " frames, and "
           + std::to_string(r.later_commits) + " committed transactions "
           "in them (up to frame " + std::to_string(r.last_commit_frame)
           + ") are not in the database file";
  return path + " is damaged: SQLite stops reading it at frame "
         + std::to_string(r.first_bad_frame) + " of "
         + std::to_string(r.frames) + " (bad checksum or salt) and would drop "
         + std::to_string(r.later_commits) + " intact committed transactions "
         "after it (up to frame " + std::to_string(r.last_commit_frame) + ")";
}

} // namespace oncegate::persistence
