// commit_floor: the bare durable-commit latency of the disk under the data
// dirs, for bench/run.sh's "unloaded p50 vs floor" target. One SQLite
// connection in WAL mode with synchronous=FULL (what a single node uses for
// its claims) runs one-row transactions back to back: BEGIN, INSERT one row,
// COMMIT (an fsync of the WAL), repeat, for --seconds or --count commits,
// whichever ends first. Each BEGIN..COMMIT is timed; the first --warmup
// commits (file creation, first WAL frames) are not counted.
//
//   commit_floor --dir=DIR [--seconds=10] [--count=0 (no bound)] [--warmup=20]
//                [--shape=row|record]
//
// --shape=record: the row is a claim record's shape instead (a random text
// key with its own unique index, and an index on a time that grows, as
// `records`' primary key and expiry index): three b-trees change per
// commit where `row` changes one. What the difference costs is the part of
// a decision's commit that is the schema's, not the disk's.
//
// Prints one line: RESULT commits=N seconds=S rps=R mean_us=.. p50_us=..
// p90_us=.. p99_us=.. max_us=.. (integers, microseconds), exit 0; on a
// SQLite error a message on stderr, exit 1. DIR is created if missing; the
// database DIR/floor.db (and its -wal/-shm) is removed before and after.
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

bool exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::fprintf(stderr, "commit_floor: %s: %s\n", sql,
                 err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    return false;
  }
  return true;
}

void remove_db(const std::filesystem::path& db) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    std::filesystem::remove(db.string() + suffix, ec);
}

long long percentile(const std::vector<long long>& sorted, double p) {
  if (sorted.empty())
    return 0;
  // nearest rank
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

} // namespace

int main(int argc, char** argv) {
  std::string dir;
  double seconds = 10;
  long long count = 0;
  long long warmup = 20;
  bool record_shape = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      auto n = std::strlen(name);
      return arg.compare(0, n, name) == 0 ? argv[i] + n : nullptr;
    };
    if (auto v = value("--dir="))
      dir = v;
    else if (auto v = value("--seconds="))
      seconds = std::atof(v);
    else if (auto v = value("--count="))
      count = std::atoll(v);
    else if (auto v = value("--warmup="))
      warmup = std::atoll(v);
    else if (arg == "--shape=row")
      record_shape = false;
    else if (arg == "--shape=record")
      record_shape = true;
    else {
      dir.clear();
      break;
    }
  }
  if (dir.empty() || seconds <= 0 || count < 0 || warmup < 0) {
    std::fprintf(stderr, "usage: commit_floor --dir=DIR [--seconds=S] "
                         "[--count=N] [--warmup=N] [--shape=row|record]\n");
    return 2;
  }
  std::filesystem::create_directories(dir);
  auto path = std::filesystem::path{dir} / "floor.db";
  remove_db(path);

  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::fprintf(stderr, "commit_floor: cannot open %s: %s\n", path.c_str(),
                 db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return 1;
  }
  int rc = 1;
  sqlite3_stmt* insert = nullptr;
  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* commit = nullptr;
  std::vector<long long> lat;
  auto step = [&](sqlite3_stmt* st) {
    int r = sqlite3_step(st);
    sqlite3_reset(st);
    if (r != SQLITE_DONE) {
      std::fprintf(stderr, "commit_floor: %s: %s\n", sqlite3_sql(st),
                   sqlite3_errmsg(db));
      return false;
    }
    return true;
  };
  // A row about the size of a claim record (key, fingerprint, times, a
  // short answer).
  const std::string payload(160, 'x');
  clock_type::time_point start{};
  double elapsed = 0;
  if (!exec(db, "PRAGMA journal_mode=WAL") || !exec(db, "PRAGMA synchronous=FULL")
      || !exec(db, record_shape
                     ? "CREATE TABLE floor(id INTEGER PRIMARY KEY, "
                       "k TEXT NOT NULL UNIQUE, v BLOB NOT NULL, "
                       "t INTEGER NOT NULL);"
                       "CREATE INDEX floor_by_t ON floor(t)"
                     : "CREATE TABLE floor(id INTEGER PRIMARY KEY, k TEXT NOT NULL, "
                       "v BLOB NOT NULL, t INTEGER NOT NULL)"))
    goto out;
  if (sqlite3_prepare_v2(db, "INSERT INTO floor(k, v, t) VALUES(?1, ?2, ?3)",
                         -1, &insert, nullptr) != SQLITE_OK
      || sqlite3_prepare_v2(db, "BEGIN", -1, &begin, nullptr) != SQLITE_OK
      || sqlite3_prepare_v2(db, "COMMIT", -1, &commit, nullptr) != SQLITE_OK) {
    std::fprintf(stderr, "commit_floor: prepare: %s\n", sqlite3_errmsg(db));
    goto out;
  }
  lat.reserve(count > 0 ? static_cast<size_t>(count) : 1 << 16);
  {
    auto deadline = clock_type::time_point::max();
    for (long long i = 0;; ++i) {
      bool counted = i >= warmup;
      if (i == warmup) {
        start = clock_type::now();
        deadline = start + std::chrono::duration_cast<clock_type::duration>(
                               std::chrono::duration<double>(seconds));
      }
      // Record keys land anywhere in their index, as senders' keys do.
      auto key = record_shape
                   ? std::to_string((static_cast<unsigned long long>(i) + 1)
                                    * 0x9E3779B97F4A7C15ull)
                   : "f-" + std::to_string(i);
      auto t0 = clock_type::now();
      if (!step(begin))
        goto out;
      sqlite3_bind_text(insert, 1, key.data(), static_cast<int>(key.size()),
                        SQLITE_TRANSIENT);
      sqlite3_bind_blob(insert, 2, payload.data(),
                        static_cast<int>(payload.size()), SQLITE_STATIC);
      sqlite3_bind_int64(insert, 3, i);
      if (!step(insert) || !step(commit))
        goto out;
      auto t1 = clock_type::now();
      if (counted) {
        lat.push_back(
          std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0)
            .count());
        if ((count > 0 && static_cast<long long>(lat.size()) >= count)
            || t1 >= deadline)
          break;
      }
    }
    elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  }
  {
    long long sum = 0;
    for (auto v : lat)
      sum += v;
    std::sort(lat.begin(), lat.end());
    std::printf("RESULT commits=%zu seconds=%.3f rps=%.1f mean_us=%lld "
                "p50_us=%lld p90_us=%lld p99_us=%lld max_us=%lld\n",
                lat.size(), elapsed, elapsed > 0 ? lat.size() / elapsed : 0.0,
                lat.empty() ? 0 : sum / static_cast<long long>(lat.size()),
                percentile(lat, 50), percentile(lat, 90), percentile(lat, 99),
                lat.empty() ? 0 : lat.back());
    rc = 0;
  }
out:
  sqlite3_finalize(insert);
  sqlite3_finalize(begin);
  sqlite3_finalize(commit);
  sqlite3_close(db);
  remove_db(path);
  return rc;
}
