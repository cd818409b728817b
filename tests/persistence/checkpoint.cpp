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
