// Images of the whole database: a pinned read state, snapshots for the
// replicated state machine (serialised in memory), online backups into a
// file, and restoring a snapshot on any replica.
#include "persistence/sqlite_store.hpp"

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errc.hpp"
#include "common/logging.hpp"
#include "persistence/sqlite_store_impl.hpp"

namespace oncegate::persistence {

using namespace detail;

caf::expected<uint64_t> sqlite_store::begin_read() {
  if (auto err = impl_->step_done(stmt_begin_read))
    return err;
  impl_->in_txn = true;
  auto index = applied_index();
  if (!index)
    rollback();
  return index;
}

caf::expected<std::string> sqlite_store::snapshot_image() {
  std::string image;
  auto res = snapshot_image([&image](std::size_t n) -> void* {
    image.resize(n);
    return image.data();
  });
  if (!res)
    return std::move(res.error());
  return image;
}

caf::expected<std::size_t>
sqlite_store::snapshot_image(const std::function<void*(std::size_t)>& alloc) {
  sqlite3_int64 size = 0;
  auto bytes = sqlite3_serialize(impl_->db, "main", &size, 0);
  if (bytes == nullptr)
    return sqlite_error(impl_->db, "serialize database");
  auto n = static_cast<std::size_t>(size);
  auto out = static_cast<unsigned char*>(alloc(n));
  if (out == nullptr) {
    sqlite3_free(bytes);
    return make_error(errc::storage_failure,
                      "snapshot image: out of memory for "
                        + std::to_string(n) + " bytes");
  }
  std::memcpy(out, bytes, n);
  sqlite3_free(bytes);
  // Bytes 18 and 19 of the header say WAL (2); an image is a file of its
  // own, which SQLite opens in memory only as a rollback-journal one (1).
  if (n >= 20)
    out[18] = out[19] = 1;
  return n;
}

caf::error sqlite_store::backup_to(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec))
    return make_error(errc::invalid_argument,
                      "backup: " + path + " exists already");
  auto tmp = path + ".tmp";
  std::filesystem::remove(tmp, ec);
  sqlite3* dest = nullptr;
  if (sqlite3_open_v2(tmp.c_str(), &dest,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                        | SQLITE_OPEN_NOMUTEX,
                      nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(dest, ("backup: open " + tmp).c_str());
    sqlite3_close(dest);
    return err;
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> dest_guard{dest, sqlite3_close};
  // One step copies every page under one read transaction: a consistent
  // copy of one moment.
  auto bk = sqlite3_backup_init(dest, "main", impl_->db, "main");
  if (bk == nullptr)
    return sqlite_error(dest, "backup: init");
  auto rc = sqlite3_backup_step(bk, -1);
  sqlite3_backup_finish(bk);
  if (rc != SQLITE_DONE)
    return sqlite_error(dest, "backup: copy");
  // The copy is in WAL mode like its source: fold the WAL into the file so
  // that the backup is one self-contained file.
  if (sqlite3_exec(dest, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr,
                   nullptr)
        != SQLITE_OK
      || sqlite3_exec(dest, "PRAGMA journal_mode=DELETE", nullptr, nullptr,
                      nullptr)
           != SQLITE_OK)
    return sqlite_error(dest, "backup: finish file");
  dest_guard.reset();
  // A backup holds signal bodies (which may carry passphrases): the owner
  // alone may read it, whatever the umask of whoever made it.
  ::chmod(tmp.c_str(), 0600);
  // Durable before it is visible under its name.
  if (auto fd = ::open(tmp.c_str(), O_RDONLY); fd >= 0) {
    auto synced = ::fsync(fd) == 0;
    ::close(fd);
    if (!synced)
      return make_error(errc::storage_failure, "backup: fsync " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return make_error(errc::storage_failure,
                      "backup: rename to " + path + ": " + ec.message());
  return {};
}

caf::error sqlite_store::restore_image(std::string_view image) {
  auto& x = *impl_;
  if (x.read_only)
    return make_error(errc::invalid_argument,
                      "restore image: read-only connection");
  static constexpr std::string_view magic{"SQLite format 3\0", 16};
  if (image.size() < 100 || image.substr(0, 16) != magic)
    return make_error(errc::invalid_argument,
                      "restore image: not an SQLite database");
  // The image as a read-only in-memory database, without copying it.
  sqlite3* mem = nullptr;
  if (sqlite3_open_v2(":memory:", &mem,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr)
      != SQLITE_OK) {
    auto err = sqlite_error(mem, "restore image: open memory database");
    sqlite3_close(mem);
    return err;
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> mem_guard{mem, sqlite3_close};
  auto data = reinterpret_cast<unsigned char*>(const_cast<char*>(image.data()));
  auto size = static_cast<sqlite3_int64>(image.size());
  if (sqlite3_deserialize(mem, "main", data, size, size,
                          SQLITE_DESERIALIZE_READONLY)
      != SQLITE_OK)
    return sqlite_error(mem, "restore image: deserialize");
  // Check what it is before anything of the live database changes.
  int64_t image_version = 0;
  {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(mem, statements[stmt_get_version], -1, &st,
                           nullptr)
        != SQLITE_OK) {
      sqlite3_finalize(st);
      return make_error(errc::invalid_argument,
                        std::string{"restore image: no oncegate database: "}
                          + sqlite3_errmsg(mem));
    }
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
      image_version = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      return sqlite_error(mem, "restore image: read schema version");
  }
  if (image_version < 1)
    return make_error(errc::invalid_argument,
                      "restore image: no schema version");
  if (image_version > schema_version)
    return schema_too_new("restore image: schema ", image_version);
  // One write transaction on the live database: readers see the old or the
  // new content, and a crash leaves one of them.
  auto backup = sqlite3_backup_init(x.db, "main", mem, "main");
  if (backup == nullptr)
    return sqlite_error(x.db, "restore image: start backup");
  auto rc = sqlite3_backup_step(backup, -1);
  auto finish_rc = sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE || finish_rc != SQLITE_OK) {
    std::string ctx = "restore image: copy: ";
    ctx += sqlite3_errstr(rc != SQLITE_DONE ? rc : finish_rc);
    return make_error(errc::storage_failure, std::move(ctx));
  }
  // The WAL may have grown by the whole image: let the checkpointer fold it
  // in without waiting for the next commit.
  if (x.ckpt)
    x.ckpt->poke();
  if (auto err = x.migrate())
    return err;
  auto applied = applied_index();
  if (!applied)
    return std::move(applied.error());
  log::store()->info("store.restored bytes={} schema={} applied_index={}",
                     image.size(), image_version, *applied);
  return caf::none;
}

} // namespace oncegate::persistence
