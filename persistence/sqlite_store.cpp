// The store's connections and transactions: opening (writer, reader),
// the background checkpointer, BEGIN/COMMIT, and the meta values (applied
// index, store clock). The SQL is in sqlite_schema.cpp, records and
// decisions in sqlite_records.cpp, images and backups in sqlite_images.cpp.
#include "persistence/sqlite_store.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errc.hpp"
#include "common/logging.hpp"
#include "common/mutant.hpp"
#include "common/stage_trace.hpp"
#include "persistence/sqlite_store_impl.hpp"
#include "persistence/wal_check.hpp"

namespace oncegate::persistence {

namespace detail {

checkpointer::checkpointer(sqlite3* db, std::string wal_path)
  : db_(db), wal_path_(std::move(wal_path)), thread_([this] { run(); }) {
  // nop
}

checkpointer::~checkpointer() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  sqlite3_close(db_);
}

void checkpointer::poke() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    requested_ = true;
  }
  cv_.notify_one();
}

void checkpointer::write_out() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    write_out_ = true;
  }
  cv_.notify_one();
}

// Writes the WAL's dirty pages out and waits for them: the checkpoint's
// fsync finds little left, and no commit queues behind a large burst. It
// changes neither what is written nor any fsync SQLite asks for.
void checkpointer::write_out_now() {
  auto fd = ::open(wal_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return; // no WAL yet, or gone: nothing to write out
  stage_trace::mark("wal.write_out");
  write_outs_.fetch_add(1, std::memory_order_relaxed);
  ::sync_file_range(fd, 0, 0,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE
                      | SYNC_FILE_RANGE_WAIT_AFTER);
  ::close(fd);
}

void checkpointer::run() {
  std::unique_lock<std::mutex> guard{mtx_};
  for (;;) {
    cv_.wait(guard, [this] { return stop_ || requested_ || write_out_; });
    if (stop_)
      return;
    if (!requested_) {
      write_out_ = false;
      guard.unlock();
      write_out_now();
      guard.lock();
      continue;
    }
    requested_ = false;
    write_out_ = false;
    guard.unlock();
    int log_pages = 0;
    int done_pages = 0;
    stage_trace::mark("checkpoint.begin");
    auto rc = sqlite3_wal_checkpoint_v2(db_, nullptr,
                                        SQLITE_CHECKPOINT_PASSIVE,
                                        &log_pages, &done_pages);
    stage_trace::mark("checkpoint.end", static_cast<uint64_t>(done_pages));
    if (rc != SQLITE_OK && rc != SQLITE_BUSY)
      log::store()->warn("store.checkpoint_failed rc={} msg={}", rc,
                         sqlite3_errmsg(db_));
    else
      log::store()->debug("store.checkpoint wal_pages={} done={}",
                          log_pages, done_pages);
    guard.lock();
  }
}

namespace {

caf::error os_error(const std::string& what) {
  return make_error(errc::storage_failure, what + ": " + std::strerror(errno));
}

// Opens `path` (a file or a directory), fsyncs it, closes it.
caf::error fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0)
    return os_error("open " + path);
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  errno = saved;
  return rc == 0 ? caf::error{} : os_error("fsync " + path);
}

// A new database takes its name only once it has its header (WAL mode,
// written and synced by the journal-mode change): a database file this
// store made is never empty, so an empty one is refused (it was truncated
// or copied badly, and as a fresh database every key decided before would
// execute again).
caf::error create_database(const std::string& path) {
  auto tmp = path + ".new";
  for (auto suffix : {"", "-wal", "-shm", "-journal"})
    std::remove((tmp + suffix).c_str()); // a start killed halfway
  sqlite3* db = nullptr;
  auto flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
               | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(tmp.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    auto err = sqlite_error(db, ("create " + tmp).c_str());
    sqlite3_close(db);
    return err;
  }
  char* msg = nullptr;
  auto rc = sqlite3_exec(db, "PRAGMA synchronous=FULL; "
                             "PRAGMA journal_mode=WAL",
                         nullptr, nullptr, &msg);
  std::string why = msg ? msg : "";
  sqlite3_free(msg);
  sqlite3_close(db);
  if (rc != SQLITE_OK)
    return make_error(errc::storage_failure,
                      "create " + tmp + ": " + why);
  if (auto err = fsync_path(tmp, O_RDONLY))
    return err;
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return os_error("rename " + tmp + " to " + path);
  auto dir = std::filesystem::path{path}.parent_path().string();
  return fsync_path(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
}

/// A table name from a file on disk, fit for a log line: letters, digits
/// and `_` kept, anything else `?`, at most 40 characters.
std::string printable_name(const unsigned char* text) {
  std::string out;
  for (auto p = text; p && *p && out.size() < 40; ++p)
    out += std::isalnum(*p) || *p == '_' ? static_cast<char>(*p) : '?';
  return out;
}

// Another application's database (a data dir pointed at the wrong place, a
// file copied over ours) is refused before anything writes to it: no WAL
// switch, no table created. Ours holds a schema version in `meta`, or
// nothing but `meta` (a first start stopped before its first migration),
// or no table at all (`create_database`).
caf::error refuse_foreign(sqlite3* db, const std::string& path) {
  std::vector<std::string> tables;
  std::size_t count = 0;
  bool has_meta = false;
  {
    sqlite3_stmt* st = nullptr;
    auto sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
               "  AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name";
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) {
      sqlite3_finalize(st);
      return sqlite_error(db, ("read the tables of " + path).c_str());
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      auto name = sqlite3_column_text(st, 0);
      if (name && std::strcmp(reinterpret_cast<const char*>(name), "meta") == 0)
        has_meta = true;
      if (++count <= 3)
        tables.push_back(printable_name(name));
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
      return sqlite_error(db, ("read the tables of " + path).c_str());
  }
  if (count == 0)
    return caf::none;
  if (has_meta) {
    // A `meta` without our columns is not ours, even alone.
    sqlite3_stmt* st = nullptr;
    bool shaped = sqlite3_prepare_v2(db,
                                     "SELECT value FROM meta"
                                     "  WHERE name = 'schema_version'",
                                     -1, &st, nullptr)
                  == SQLITE_OK;
    auto rc = shaped ? sqlite3_step(st) : SQLITE_DONE;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      return sqlite_error(db, ("read the schema version of " + path).c_str());
    bool versioned = rc == SQLITE_ROW;
    if (versioned || (shaped && count == 1))
      return caf::none;
  }
  std::string list;
  for (auto& name : tables)
    list += (list.empty() ? "" : ", ") + name;
  if (count > tables.size())
    list += " and " + std::to_string(count - tables.size()) + " more";
  return make_error(errc::storage_failure,
                    path + " is not an oncegate database (it holds table "
                    + list + " and no oncegate schema version); give "
                    "oncegate a data dir of its own, or restore its "
                    "database from a backup");
}

// Reads the WAL before SQLite does: opening runs WAL recovery, which
// stops at the first damaged frame, and the first checkpoint after it
// makes whatever came later lost for good. Answers whether a loss was
// found (and accepted), or the refusal.
caf::expected<bool> guard_wal(const store_options& opts) {
  auto report = check_wal(opts.path);
  if (!report)
    return std::move(report.error());
  if (!report->loss)
    return false;
  auto what = describe_wal_loss(opts.path, *report);
  if (opts.sync_commits && !opts.accept_wal_loss)
    return make_error(
      errc::wal_damaged,
      what + ". These were committed and answered: starting would execute "
             "their keys again. Nothing was opened or changed. Recover: "
             "restore the database from a backup (docs/operations.md, \"A "
             "damaged WAL\"), or start once with --accept-wal-loss to drop "
             "them (a copy of the damaged WAL is kept)");
  // Keep the frames for a later look (or a manual rescue) before SQLite
  // drops them.
  auto copy = opts.path + "-wal.damaged-"
              + std::to_string(static_cast<long long>(::time(nullptr)));
  std::error_code ec;
  std::filesystem::copy_file(opts.path + "-wal", copy, ec);
  if (!opts.sync_commits)
    // A cluster node's decisions are durable in its Raft log, which
    // restores the last snapshot and replays what follows at start; and
    // without fsyncs a power cut may write frames back out of order, which
    // looks the same. Nothing to refuse.
    log::store()->error("store.wal_damaged action=replay_from_raft_log "
                        "detail=\"{}\" copy={}",
                        what, ec ? "none (" + ec.message() + ")" : copy);
  else
    log::store()->critical("store.wal_loss_accepted detail=\"{}\" copy={} "
                           "(--accept-wal-loss: keys decided in the dropped "
                           "transactions execute again)",
                           what, ec ? "none (" + ec.message() + ")" : copy);
  return true;
}

} // namespace

} // namespace detail

using namespace detail;

sqlite_store::impl::~impl() {
  if (db)
    sqlite3_wal_hook(db, nullptr, nullptr);
  ckpt.reset();
  for (auto st : stmts)
    sqlite3_finalize(st);
  if (db) {
    // Fold the WAL into the database so that the next start reads one
    // file; harmless when it cannot (the WAL is replayed on open).
    if (!read_only)
      sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_TRUNCATE,
                                nullptr, nullptr);
    sqlite3_close(db);
  }
}

int sqlite_store::impl::on_wal_commit(void* ctx, sqlite3*, const char*,
                                      int pages) {
  auto self = static_cast<impl*>(ctx);
  auto now = static_cast<uint32_t>(pages);
  if (now >= self->opts.checkpoint_pages) {
    self->ckpt->poke();
    return SQLITE_OK;
  }
  if (self->opts.sync_commits || self->opts.wal_writeout_pages == 0)
    return SQLITE_OK; // every commit was fsynced: nothing piles up
  if (now < self->written_out_pages)
    self->written_out_pages = 0; // the WAL restarted
  if (now - self->written_out_pages >= self->opts.wal_writeout_pages) {
    self->written_out_pages = now;
    self->ckpt->write_out();
  }
  return SQLITE_OK;
}

caf::expected<std::unique_ptr<sqlite_store>>
sqlite_store::open(const store_options& opts) {
  struct stat st {};
  if (::stat(opts.path.c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode) && st.st_size == 0)
      return make_error(errc::storage_failure,
                        opts.path + " is empty: no database this node "
                        "wrote ever is (a truncated file or a failed copy?); "
                        "restore it from a backup, or remove it to start "
                        "with no records");
  } else if (errno == ENOENT) {
    if (auto err = create_database(opts.path))
      return err;
  }
  auto wal_loss = guard_wal(opts);
  if (!wal_loss)
    return std::move(wal_loss.error());
  auto ptr = std::make_unique<impl>();
  ptr->opts = opts;
  auto flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
               | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(opts.path.c_str(), &ptr->db, flags, nullptr)
      != SQLITE_OK)
    return sqlite_error(ptr->db, ("open " + opts.path).c_str());
  sqlite3_extended_result_codes(ptr->db, 1);
  sqlite3_busy_timeout(ptr->db, static_cast<int>(opts.busy_timeout_ms));
  if (auto err = refuse_foreign(ptr->db, opts.path)) {
    // Closing must not write either: no checkpoint of a foreign WAL, and
    // its -wal file left where it is.
    ptr->read_only = true;
    sqlite3_db_config(ptr->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    return err;
  }
  // WAL + FULL: a commit returns only after the WAL frame is fsynced.
  // Automatic checkpoints are off; the checkpointer thread does them.
  for (auto sql : {"PRAGMA journal_mode=WAL",
                   opts.sync_commits ? "PRAGMA synchronous=FULL"
                                     : "PRAGMA synchronous=NORMAL",
                   "PRAGMA wal_autocheckpoint=0", "PRAGMA foreign_keys=OFF"})
    if (auto err = ptr->exec(sql))
      return err;
  {
    // journal_mode answers with the mode it got; anything but WAL (e.g. on a
    // file system without shared memory) would silently change durability.
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(ptr->db, "PRAGMA journal_mode", -1, &st, nullptr);
    std::string mode;
    if (st && sqlite3_step(st) == SQLITE_ROW)
      mode = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (mode != "wal")
      return make_error(errc::storage_failure,
                        "cannot enable WAL journal on " + opts.path);
  }
  if (auto err = ptr->exec(create_meta_sql))
    return err;
  // Statements on `records` compile only once the table exists: prepare the
  // meta ones first, migrate, then prepare everything.
  {
    for (auto id : {stmt_get_version, stmt_set_version})
      if (sqlite3_prepare_v3(ptr->db, statements[id], -1,
                             SQLITE_PREPARE_PERSISTENT, &ptr->stmts[id],
                             nullptr)
          != SQLITE_OK)
        return sqlite_error(ptr->db, statements[id]);
    if (auto err = ptr->migrate())
      return err;
    for (auto id : {stmt_get_version, stmt_set_version}) {
      sqlite3_finalize(ptr->stmts[id]);
      ptr->stmts[id] = nullptr;
    }
  }
  if (auto err = ptr->prepare_all())
    return err;
  // A loss let through: fold what SQLite read into the database and empty
  // the WAL, so that the frames it dropped do not meet the check again at
  // every start.
  if (*wal_loss
      && sqlite3_wal_checkpoint_v2(ptr->db, nullptr,
                                   SQLITE_CHECKPOINT_TRUNCATE, nullptr,
                                   nullptr)
           != SQLITE_OK)
    return sqlite_error(ptr->db, "checkpoint after a WAL loss");
  if (opts.max_pages > 0) {
    auto sql = "PRAGMA max_page_count=" + std::to_string(opts.max_pages);
    if (auto err = ptr->exec(sql.c_str()))
      return err;
  }
  // The checkpointer's own connection.
  sqlite3* ckpt_db = nullptr;
  if (sqlite3_open_v2(opts.path.c_str(), &ckpt_db, SQLITE_OPEN_READWRITE
                                                     | SQLITE_OPEN_NOMUTEX,
                      nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(ckpt_db, "open checkpoint connection");
    sqlite3_close(ckpt_db);
    return err;
  }
  sqlite3_busy_timeout(ckpt_db, static_cast<int>(opts.busy_timeout_ms));
  // A connection learns that the file is in WAL mode only when it first
  // reads it; until then every checkpoint is a no-op answering -1 (the WAL
  // then grew without bound: 5 MB after 300 claims with a 64-page trigger).
  if (sqlite3_exec(ckpt_db, "PRAGMA journal_mode", nullptr, nullptr, nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(ckpt_db, "open checkpoint connection");
    sqlite3_close(ckpt_db);
    return err;
  }
  ptr->ckpt = std::make_unique<checkpointer>(ckpt_db, opts.path + "-wal");
  sqlite3_wal_hook(ptr->db, &impl::on_wal_commit, ptr.get());
  return std::unique_ptr<sqlite_store>{new sqlite_store(std::move(ptr))};
}

caf::expected<std::unique_ptr<sqlite_store>>
sqlite_store::open_reader(const store_options& opts) {
  auto ptr = std::make_unique<impl>();
  ptr->opts = opts;
  ptr->read_only = true;
  // Read-write without create: a WAL reader maps the shared-memory file,
  // and a missing database must fail rather than appear empty.
  if (sqlite3_open_v2(opts.path.c_str(), &ptr->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr)
      != SQLITE_OK)
    return sqlite_error(ptr->db, ("open reader " + opts.path).c_str());
  sqlite3_extended_result_codes(ptr->db, 1);
  sqlite3_busy_timeout(ptr->db, static_cast<int>(opts.busy_timeout_ms));
  // Checkpoints are the writer's: closing the last connection would
  // otherwise checkpoint from whichever thread closes a reader.
  sqlite3_db_config(ptr->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  if (auto err = ptr->exec("PRAGMA query_only=1"))
    return err;
  if (sqlite3_prepare_v3(ptr->db, statements[stmt_get_version], -1,
                         SQLITE_PREPARE_PERSISTENT,
                         &ptr->stmts[stmt_get_version], nullptr)
      != SQLITE_OK)
    return sqlite_error(ptr->db, "read schema version");
  auto v = ptr->read_version();
  if (!v)
    return std::move(v.error());
  if (*v > schema_version)
    return schema_too_new("database schema ", *v);
  if (*v < schema_version)
    return make_error(errc::storage_failure,
                      "database schema " + std::to_string(*v) + " of "
                        + opts.path + " not migrated: open the writer first");
  ptr->version = *v;
  if (auto err = ptr->prepare_all())
    return err;
  return std::unique_ptr<sqlite_store>{new sqlite_store(std::move(ptr))};
}

sqlite_store::sqlite_store(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

sqlite_store::~sqlite_store() {
  // nop
}

caf::error sqlite_store::begin() {
  if (auto err = impl_->step_done(stmt_begin))
    return err;
  impl_->in_txn = true;
  return caf::none;
}

caf::error sqlite_store::commit() {
  auto st = impl_->stmts[stmt_commit];
  stmt_guard guard{st};
  auto rc = sqlite3_step(st);
  if (ONCEGATE_MUTANT("ignore-commit-result"))
    rc = SQLITE_DONE; // mutant: the transaction is gone, the caller is told
                      // it committed
  if (rc != SQLITE_DONE) {
    std::string ctx = "commit: ";
    ctx += sqlite3_errmsg(impl_->db);
    rollback();
    return make_error(errc::commit_failed, std::move(ctx));
  }
  impl_->in_txn = false;
  return caf::none;
}

void sqlite_store::rollback() {
  // After an I/O error SQLite may have rolled back already; then ROLLBACK
  // fails harmlessly with "no transaction is active".
  if (!sqlite3_get_autocommit(impl_->db))
    impl_->step_done(stmt_rollback);
  impl_->in_txn = false;
}

caf::expected<uint64_t> sqlite_store::applied_index() {
  auto st = impl_->stmts[stmt_get_applied];
  stmt_guard guard{st};
  switch (sqlite3_step(st)) {
    case SQLITE_ROW:
      return static_cast<uint64_t>(sqlite3_column_int64(st, 0));
    case SQLITE_DONE:
      return uint64_t{0};
    default:
      return sqlite_error(impl_->db, "read applied index");
  }
}

caf::expected<int64_t> sqlite_store::clock_ms() {
  auto st = impl_->stmts[stmt_get_clock];
  stmt_guard guard{st};
  switch (sqlite3_step(st)) {
    case SQLITE_ROW:
      return sqlite3_column_int64(st, 0);
    case SQLITE_DONE:
      return int64_t{0};
    default:
      return sqlite_error(impl_->db, "read clock");
  }
}

caf::error sqlite_store::set_clock_ms(int64_t now_ms) {
  sqlite3_bind_int64(impl_->stmts[stmt_set_clock], 1, now_ms);
  return impl_->step_done(stmt_set_clock);
}

caf::error sqlite_store::set_applied_index(uint64_t index) {
  sqlite3_bind_int64(impl_->stmts[stmt_set_applied], 1,
                     static_cast<int64_t>(index));
  return impl_->step_done(stmt_set_applied);
}

caf::error sqlite_store::limit_pages(uint64_t pages) {
  auto sql = "PRAGMA max_page_count=" + std::to_string(pages);
  return impl_->exec(sql.c_str());
}

int sqlite_store::version() const {
  return impl_->version;
}

const store_options& sqlite_store::options() const {
  return impl_->opts;
}

uint64_t sqlite_store::wal_writeouts() const {
  return impl_->ckpt ? impl_->ckpt->write_outs() : 0;
}

} // namespace oncegate::persistence
