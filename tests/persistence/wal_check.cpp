#define CAF_SUITE persistence.wal_check
#include "caf/test/unit_test.hpp"

// A damaged WAL must not silently drop committed transactions: SQLite stops
// replaying at the first bad frame and takes the rest for never written.
// `check_wal` reads the WAL before SQLite does and tells such a loss apart
// from what a crash legitimately leaves: a clean or absent WAL, a torn last
// transaction, frames of an older WAL generation.
//
// Each WAL here is a real one: the store commits keys with checkpoints out
// of reach, and its files are copied aside while it is open (what kill -9
// leaves behind), then bytes of the copy are changed.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/errc.hpp"
#include "persistence/sqlite_store.hpp"
#include "persistence/wal_check.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/sqlite_query.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::make_claim;

namespace fs = std::filesystem;

namespace {

constexpr uint64_t page_size = 4096; // SQLite's default, the store's
constexpr uint64_t frame_size = 24 + page_size;

uint64_t frame_offset(uint64_t k) {
  return 32 + (k - 1) * frame_size;
}

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << data;
}

uint32_t be32(const std::string& s, uint64_t at) {
  auto b = [&](uint64_t i) { return uint32_t{uint8_t(s[at + i])}; };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

struct fixture {
  test::temp_dir dir;
  store_options live_opts;
  store_options opts; // the copy: what a restart would open

  fixture() {
    live_opts.path = dir.file("live.db");
    live_opts.checkpoint_pages = 1'000'000; // no checkpoint meanwhile
    opts = live_opts;
    opts.path = dir.file("copy.db");
  }

  std::string wal() const {
    return opts.path + "-wal";
  }

  // Commits `keys` claims k0, k1, ... one transaction each through `db`.
  static void commit_keys(sqlite_store& db, int from, int to) {
    for (int i = from; i < to; ++i) {
      CAF_REQUIRE(!db.begin());
      CAF_REQUIRE(db.claim(make_claim("k" + std::to_string(i), 1000 + i)));
      CAF_REQUIRE(!db.commit());
    }
  }

  // Copies the open store's files aside, as kill -9 leaves them.
  void copy_aside() {
    fs::remove(opts.path + "-shm");
    for (auto suffix : {"", "-wal"}) {
      fs::remove(opts.path + suffix);
      fs::copy_file(live_opts.path + suffix, opts.path + suffix);
    }
  }

  // A store with `keys` committed keys, copied aside while open.
  void build(int keys) {
    auto db = sqlite_store::open(live_opts);
    CAF_REQUIRE(db);
    commit_keys(**db, 0, keys);
    copy_aside();
  }

  // The frames of the copied WAL: page number and commit mark.
  struct frame {
    uint32_t page;
    bool commit;
    std::string salt;
  };
  std::vector<frame> frames() const {
    auto data = read_file(wal());
    std::vector<frame> res;
    for (uint64_t k = 1; frame_offset(k) + frame_size <= data.size(); ++k) {
      auto at = frame_offset(k);
      res.push_back({be32(data, at), be32(data, at + 4) != 0,
                     data.substr(at + 8, 8)});
    }
    return res;
  }

  void flip(uint64_t offset) {
    auto data = read_file(wal());
    CAF_REQUIRE_LESS(offset, data.size());
    data[offset] = static_cast<char>(data[offset] ^ 0x10);
    write_file(wal(), data);
  }

  // Keys SQLite itself reads from the copy, asked on a further copy (the
  // asking connection recovers the WAL and checkpoints it when it closes).
  int keys_sqlite_reads() {
    auto probe = dir.file("probe.db");
    for (auto suffix : {"", "-wal", "-shm"})
      fs::remove(probe + suffix);
    fs::copy_file(opts.path, probe);
    if (fs::exists(wal()))
      fs::copy_file(wal(), probe + "-wal");
    // Damage early enough drops the table itself.
    if (test::query_int(probe, "SELECT count(*) FROM sqlite_master"
                               "  WHERE name = 'records'")
        == 0)
      return 0;
    auto n = test::query_int(probe, "SELECT count(*) FROM records");
    CAF_REQUIRE_GREATER_OR_EQUAL(n, 0);
    return n;
  }

  wal_report check() {
    auto r = check_wal(opts.path);
    CAF_REQUIRE(r);
    CAF_MESSAGE("frames=" << r->frames << " first_bad=" << r->first_bad_frame
                          << " kept_commit=" << r->last_kept_commit
                          << " later_commits=" << r->later_commits
                          << " loss=" << r->loss);
    return *r;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(wal_check_tests, fixture)

CAF_TEST(an intact wal reports no loss and sqlite reads every frame) {
  build(30);
  auto r = check();
  CAF_CHECK(!r.loss);
  CAF_CHECK_EQUAL(r.first_bad_frame, 0u);
  CAF_CHECK_GREATER(r.frames, 30u);
  CAF_CHECK_EQUAL(r.last_kept_commit, r.frames);
}

CAF_TEST(an absent or empty wal reports no loss) {
  build(3);
  fs::remove(wal());
  CAF_CHECK(!check().loss);
  write_file(wal(), "");
  CAF_CHECK(!check().loss);
  write_file(wal(), std::string(20, 'x')); // shorter than a header
  CAF_CHECK(!check().loss);
}

CAF_TEST(a flipped byte in an early frame is a loss of the later commits) {
  build(30);
  flip(frame_offset(3) + 24 + 2000); // page data of frame 3
  auto r = check();
  CAF_CHECK(r.loss);
  CAF_CHECK_EQUAL(r.first_bad_frame, 3u);
  CAF_CHECK_GREATER_OR_EQUAL(r.later_commits, 25u);
  // The premise: SQLite itself drops them without a word.
  CAF_CHECK_LESS(keys_sqlite_reads(), 10);
  auto text = describe_wal_loss(opts.path, r);
  CAF_MESSAGE(text);
  CAF_CHECK_NOT_EQUAL(text.find("frame 3 of"), std::string::npos);
}

CAF_TEST(a flipped byte in a frame header or checksum is a loss too) {
  build(30);
  flip(frame_offset(4) + 10); // salt-1
  CAF_CHECK(check().loss);
  flip(frame_offset(4) + 10); // undone
  CAF_CHECK(!check().loss);
  flip(frame_offset(4) + 17); // stored checksum-1: frames 4 and 5 fail
  auto r = check();
  CAF_CHECK(r.loss);
  CAF_CHECK_EQUAL(r.first_bad_frame, 4u);
}

CAF_TEST(a torn last transaction is no loss) {
  build(30);
  auto fs_ = frames();
  // The last transaction: the frames after the second-to-last commit.
  auto last = fs_.size();
  CAF_REQUIRE(fs_.back().commit);
  auto first = last - 1;
  while (first > 0 && !fs_[first - 1].commit)
    --first;
  ++first; // 1-based
  CAF_REQUIRE_LESS(first, last); // at least two frames
  // Its first frame never reached the disk, its commit frame did (written
  // back out of order before the power cut): SQLite stops at the hole.
  flip(frame_offset(first) + 24 + 100);
  auto r = check();
  CAF_CHECK(!r.loss);
  CAF_CHECK_EQUAL(r.first_bad_frame, first);
  CAF_CHECK_EQUAL(r.later_commits, 1u);
  // Cut off in its middle instead: no loss either.
  flip(frame_offset(first) + 24 + 100);
  auto data = read_file(wal());
  write_file(wal(), data.substr(0, frame_offset(first) + frame_size + 100));
  r = check();
  CAF_CHECK(!r.loss);
  CAF_CHECK_EQUAL(r.first_bad_frame, 0u);
}

CAF_TEST(frames of an older wal generation are no loss) {
  auto db = sqlite_store::open(live_opts);
  CAF_REQUIRE(db);
  commit_keys(**db, 0, 30);
  // Every frame copied into the database: the next commit restarts the WAL
  // from its first frame with new salts, the older frames stay behind it.
  CAF_REQUIRE_EQUAL(test::exec_sql(live_opts.path,
                                   "PRAGMA wal_checkpoint(PASSIVE)", false),
                    SQLITE_OK);
  commit_keys(**db, 30, 32);
  copy_aside();
  auto fs_ = frames();
  size_t current = 0;
  while (current < fs_.size() && fs_[current].salt == fs_[0].salt)
    ++current;
  CAF_MESSAGE(current << " frames of the current generation, "
                      << fs_.size() - current << " older");
  CAF_REQUIRE_GREATER(fs_.size() - current, 20u);
  auto r = check();
  CAF_CHECK(!r.loss);
  CAF_CHECK_EQUAL(r.first_bad_frame, current + 1);
  CAF_CHECK_EQUAL(keys_sqlite_reads(), 32);
}

CAF_TEST(a damaged wal header is a loss unless the frames are in the database) {
  build(30);
  flip(18); // salt-1 of the header: SQLite ignores the whole WAL
  auto r = check();
  CAF_CHECK(r.header_damaged);
  CAF_CHECK(r.loss);
  CAF_CHECK_LESS(keys_sqlite_reads(), 30);
  // The same damage once every frame was copied into the database (a power
  // cut while the header is rewritten at a WAL restart): nothing lost.
  auto db = sqlite_store::open(live_opts);
  CAF_REQUIRE(db);
  commit_keys(**db, 30, 40);
  CAF_REQUIRE_EQUAL(test::exec_sql(live_opts.path,
                                   "PRAGMA wal_checkpoint(PASSIVE)", false),
                    SQLITE_OK);
  copy_aside();
  flip(18);
  r = check();
  CAF_CHECK(r.header_damaged);
  CAF_CHECK(!r.loss);
  CAF_CHECK_EQUAL(keys_sqlite_reads(), 40);
}

CAF_TEST(the store refuses a lossy wal and leaves it untouched) {
  build(30);
  flip(frame_offset(3) + 24 + 2000);
  auto before = read_file(wal());
  auto refused = sqlite_store::open(opts);
  CAF_REQUIRE(!refused);
  CAF_CHECK_EQUAL(errc_of(refused.error()), errc::wal_damaged);
  CAF_MESSAGE(describe(refused.error()));
  CAF_CHECK_NOT_EQUAL(describe(refused.error()).find("--accept-wal-loss"),
                      std::string::npos);
  CAF_CHECK(read_file(wal()) == before);
  CAF_CHECK(!fs::exists(opts.path + "-shm"));
  // Accepted: it opens, keeps a copy of the damaged WAL and empties it, so
  // the next start is a normal one.
  auto accepting = opts;
  accepting.accept_wal_loss = true;
  {
    auto db = sqlite_store::open(accepting);
    CAF_REQUIRE(db);
    auto n = (*db)->count();
    CAF_REQUIRE(n);
    CAF_CHECK_LESS(*n, 30u);
  }
  size_t copies = 0;
  for (auto& entry : fs::directory_iterator(dir.path()))
    if (entry.path().filename().string().rfind("copy.db-wal.damaged-", 0) == 0
        && read_file(entry.path().string()) == before)
      ++copies;
  CAF_CHECK_EQUAL(copies, 1u);
  CAF_CHECK(sqlite_store::open(opts));
}

CAF_TEST(a cluster node opens a lossy wal: its raft log holds the commits) {
  build(30);
  flip(frame_offset(3) + 24 + 2000);
  auto cluster_opts = opts;
  cluster_opts.sync_commits = false;
  CAF_CHECK(sqlite_store::open(cluster_opts));
  CAF_CHECK(sqlite_store::open(opts)); // the dropped frames are gone now
}

CAF_TEST_FIXTURE_SCOPE_END()
