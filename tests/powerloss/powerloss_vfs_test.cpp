#define CAF_SUITE powerloss.vfs
#include "caf/test/unit_test.hpp"

#include "tests/powerloss/powerloss_vfs.hpp"

#include "tests/common/sqlite_query.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <sqlite3.h>

namespace pl = oncegate::powerloss;

namespace {

struct fixture {
  std::filesystem::path dir;

  fixture() {
    CAF_REQUIRE_EQUAL(pl::install(false), SQLITE_OK);
    char tmpl[] = "/tmp/oncegate-pl-XXXXXX";
    CAF_REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }

  ~fixture() {
    pl::cut();
    std::filesystem::remove_all(dir);
  }

  // What the disk holds, read past every VFS.
  std::string on_disk(const std::string& name) {
    std::ifstream in(dir / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in),
            std::istreambuf_iterator<char>()};
  }

  // A raw file handle of the power-loss VFS, as SQLite would open a
  // database file.
  struct file {
    sqlite3_file* f = nullptr;
    explicit file(const std::filesystem::path& p) {
      auto v = pl::vfs();
      f = static_cast<sqlite3_file*>(std::calloc(1, v->szOsFile));
      auto rc = v->xOpen(v, p.c_str(), f,
                         SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_READWRITE
                           | SQLITE_OPEN_CREATE,
                         nullptr);
      CAF_REQUIRE_EQUAL(rc, SQLITE_OK);
    }
    ~file() {
      f->pMethods->xClose(f);
      std::free(f);
    }
    void write(const std::string& s, int64_t off) {
      CAF_REQUIRE_EQUAL(f->pMethods->xWrite(f, s.data(),
                                            static_cast<int>(s.size()), off),
                        SQLITE_OK);
    }
    std::string read(int n, int64_t off) {
      std::string s(static_cast<size_t>(n), '?');
      f->pMethods->xRead(f, s.data(), n, off);
      return s;
    }
    int64_t size() {
      sqlite3_int64 n = -1;
      f->pMethods->xFileSize(f, &n);
      return n;
    }
    void truncate(int64_t n) {
      CAF_REQUIRE_EQUAL(f->pMethods->xTruncate(f, n), SQLITE_OK);
    }
    void sync() {
      CAF_REQUIRE_EQUAL(f->pMethods->xSync(f, SQLITE_SYNC_NORMAL), SQLITE_OK);
    }
  };

  // Runs `use` on a handle of `name` of its own, closed again afterwards.
  template <class Use>
  void with_file(const std::string& name, Use use) {
    file f{dir / name};
    use(f);
  }

  // Cuts the power, then opens `name` again: a handle of the process that
  // runs after the cut.
  file after_cut(const std::string& name) {
    pl::cut();
    return file{dir / name};
  }

  // Opens `name` through the power-loss VFS, makes a table with one row
  // with the given `synchronous` setting, and closes the connection.
  void insert_row(const std::string& name, const char* synchronous) {
    sqlite3* db = nullptr;
    auto path = (dir / name).string();
    CAF_REQUIRE_EQUAL(sqlite3_open_v2(path.c_str(), &db,
                                      SQLITE_OPEN_READWRITE
                                        | SQLITE_OPEN_CREATE,
                                      "oncegate-powerloss"),
                      SQLITE_OK);
    auto sql = std::string{"PRAGMA journal_mode=WAL; PRAGMA synchronous="}
               + synchronous + "; CREATE TABLE t(x); INSERT INTO t VALUES(42);";
    CAF_REQUIRE_EQUAL(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr),
                      SQLITE_OK);
    sqlite3_close(db);
  }

  // Rows of `t` in `name` as the plain unix VFS sees it (-1: no table).
  int rows(const std::string& name) {
    return oncegate::test::query_int((dir / name).string(),
                                     "SELECT count(*) FROM t",
                                     SQLITE_OPEN_READWRITE, "unix");
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(powerloss_vfs_tests, fixture)

CAF_TEST(an unsynced write is seen by the process but not on disk) {
  file f{dir / "a"};
  f.write("hello", 0);
  CAF_CHECK_EQUAL(f.read(5, 0), "hello");
  CAF_CHECK_EQUAL(f.size(), 5);
  CAF_CHECK_EQUAL(on_disk("a"), "");
  CAF_CHECK_EQUAL(pl::unsynced_bytes(), 4096u);
}

CAF_TEST(a power cut loses the unsynced write) {
  with_file("a", [](file& f) { f.write("hello", 0); });
  auto f = after_cut("a");
  CAF_CHECK_EQUAL(f.size(), 0);
  CAF_CHECK_EQUAL(on_disk("a"), "");
  CAF_CHECK_EQUAL(pl::unsynced_bytes(), 0u);
}

CAF_TEST(a synced write survives a power cut) {
  with_file("a", [](file& f) {
    f.write("hello", 0);
    f.sync();
    f.write("HE", 0);
  });
  CAF_CHECK_EQUAL(on_disk("a"), "hello");
  auto f = after_cut("a");
  CAF_CHECK_EQUAL(f.read(5, 0), "hello");
}

CAF_TEST(every handle of a path shares its unsynced writes) {
  file a{dir / "a"};
  file b{dir / "a"};
  a.write("abc", 5000);
  CAF_CHECK_EQUAL(b.size(), 5003);
  CAF_CHECK_EQUAL(b.read(3, 5000), "abc");
  CAF_CHECK_EQUAL(b.read(2, 4095), std::string(2, '\0'));
  b.sync();
  CAF_CHECK_EQUAL(on_disk("a").size(), 5003u);
}

CAF_TEST(a truncation is unsynced like a write) {
  with_file("a", [this](file& f) {
    f.write(std::string(10000, 'x'), 0);
    f.sync();
    f.truncate(100);
    f.write("end", 200);
    CAF_CHECK_EQUAL(f.size(), 203);
    CAF_CHECK_EQUAL(f.read(100, 100), std::string(100, '\0'));
    CAF_CHECK_EQUAL(on_disk("a"), std::string(10000, 'x'));
  });
  auto f = after_cut("a");
  CAF_CHECK_EQUAL(f.size(), 10000);
  f.truncate(100);
  f.write("end", 200);
  f.sync();
  CAF_CHECK_EQUAL(on_disk("a"), std::string(100, 'x') + std::string(100, '\0')
                                  + "end");
}

CAF_TEST(a commit without fsync is lost and one with fsync is kept) {
  insert_row("off.db", "OFF");
  insert_row("full.db", "FULL");
  pl::cut();
  CAF_CHECK_EQUAL(rows("off.db"), -1);
  CAF_CHECK_EQUAL(rows("full.db"), 1);
}

CAF_TEST_FIXTURE_SCOPE_END()
