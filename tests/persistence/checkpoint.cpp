#define CAF_SUITE persistence.checkpoint
#include "caf/test/unit_test.hpp"

// The background checkpointer folds the WAL into the database file while
// the writer commits: the WAL stays bounded instead of holding every page
// ever written.

#include <chrono>
#include <filesystem>
#include <thread>

#include "persistence/sqlite_store.hpp"
#include "tests/common/fixture.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using oncegate::test::make_claim;

CAF_TEST(the checkpointer folds the wal into the database file) {
  test::temp_dir dir;
  store_options opts;
  opts.path = dir.file("store.db");
  opts.checkpoint_pages = 16;
  auto res = sqlite_store::open(opts);
  CAF_REQUIRE(res);
  auto& db = **res;
  auto db_size = [&] {
    std::error_code ec;
    auto n = std::filesystem::file_size(opts.path, ec);
    return ec ? uintmax_t{0} : n;
  };
  auto initial = db_size();
  // 400 commits of a 2 KiB signal each: about 1 MB of pages through the WAL.
  for (int i = 0; i < 400; ++i) {
    CAF_REQUIRE(!db.begin());
    CAF_REQUIRE(db.claim(make_claim("k" + std::to_string(i), 1000,
                                    std::string(2048, 'x'))));
    CAF_REQUIRE(!db.commit());
  }
  // The checkpoints run on their own thread: wait for one, bounded.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (db_size() <= initial + 64 * 1024
         && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CAF_MESSAGE("database file " << initial << " -> " << db_size() << " bytes");
  CAF_CHECK_GREATER(db_size(), initial + 64 * 1024);
}

CAF_TEST(without an fsync per commit the wal is written out as it grows) {
  // A cluster node's commits skip the fsync: the checkpointer writes the
  // WAL out every `wal_writeout_pages`, so no checkpoint flushes it at once.
  test::temp_dir dir;
  auto commit_many = [](sqlite_store& db) {
    for (int i = 0; i < 100; ++i) {
      CAF_REQUIRE(!db.begin());
      CAF_REQUIRE(db.claim(make_claim("k" + std::to_string(i), 1000,
                                      std::string(2048, 'x'))));
      CAF_REQUIRE(!db.commit());
    }
  };
  store_options opts;
  opts.path = dir.file("normal.db");
  opts.sync_commits = false;
  opts.checkpoint_pages = 100000;
  opts.wal_writeout_pages = 8;
  auto res = sqlite_store::open(opts);
  CAF_REQUIRE(res);
  commit_many(**res);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((*res)->wal_writeouts() < 2
         && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CAF_CHECK_GREATER_OR_EQUAL((*res)->wal_writeouts(), 2u);
  // Off: never.
  opts.path = dir.file("off.db");
  opts.wal_writeout_pages = 0;
  auto off = sqlite_store::open(opts);
  CAF_REQUIRE(off);
  commit_many(**off);
  CAF_CHECK_EQUAL((*off)->wal_writeouts(), 0u);
  // Every commit fsynced (a single node): nothing piles up, never asked.
  opts.path = dir.file("full.db");
  opts.sync_commits = true;
  opts.wal_writeout_pages = 8;
  auto full = sqlite_store::open(opts);
  CAF_REQUIRE(full);
  commit_many(**full);
  CAF_CHECK_EQUAL((*full)->wal_writeouts(), 0u);
}
