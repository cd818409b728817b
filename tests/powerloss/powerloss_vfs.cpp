#include "tests/powerloss/powerloss_vfs.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <sqlite3.h>

namespace oncegate::powerloss {

namespace {

constexpr int64_t block_size = 4096;

// The unsynced state of one file path. Invariant: `base_limit <= size` and
// `base_limit <= real_size`; the file as this process sees it is the real
// file's first `base_limit` bytes, zeros up to `size`, with `blocks` laid
// over it.
struct overlay {
  std::mutex mu;
  /// Size as seen through the VFS.
  int64_t size = 0;
  /// Size of the real file (only this VFS writes it while the test runs).
  int64_t real_size = 0;
  /// Bytes of the real file still visible: a truncation since the last sync
  /// hides the real bytes beyond it, even when the file grows again.
  int64_t base_limit = 0;
  /// Written, unsynced blocks (block index to `block_size` bytes).
  std::map<int64_t, std::vector<char>> blocks;

  void reset(int64_t real) {
    blocks.clear();
    size = real_size = base_limit = real;
  }
};

struct registry {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<overlay>> files;
};

registry& files() {
  static registry r;
  return r;
}

sqlite3_vfs* real_vfs = nullptr;
sqlite3_vfs pl_vfs;
std::atomic<int64_t> sync_delay_us{0};

// Our file handle; the real (unix) handle follows it in the same block.
struct pl_file {
  sqlite3_file base;
  /// Null for files that pass through (temporary files).
  std::shared_ptr<overlay>* ov;
};

constexpr size_t real_offset = (sizeof(pl_file) + 15) & ~size_t{15};

sqlite3_file* real_of(sqlite3_file* f) {
  return reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(f)
                                         + real_offset);
}

overlay* overlay_of(sqlite3_file* f) {
  auto p = reinterpret_cast<pl_file*>(f)->ov;
  return p ? p->get() : nullptr;
}

// Reads `n` bytes at `off` as the real file holds them under `ov` (zeros
// past `base_limit`). Called with `ov.mu` held.
int read_base(overlay& ov, sqlite3_file* real, char* buf, int64_t n,
              int64_t off) {
  std::memset(buf, 0, static_cast<size_t>(n));
  auto limit = std::min(ov.base_limit, ov.real_size);
  if (off >= limit)
    return SQLITE_OK;
  auto m = std::min(n, limit - off);
  auto rc = real->pMethods->xRead(real, buf, static_cast<int>(m), off);
  return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_OK : rc;
}

int x_close(sqlite3_file* f) {
  auto real = real_of(f);
  auto rc = real->pMethods ? real->pMethods->xClose(real) : SQLITE_OK;
  // The overlay stays registered: unsynced writes outlive the handle, as
  // they outlive a closed descriptor in a page cache.
  delete reinterpret_cast<pl_file*>(f)->ov;
  reinterpret_cast<pl_file*>(f)->ov = nullptr;
  return rc;
}

int x_read(sqlite3_file* f, void* out, int amt, sqlite3_int64 off) {
  auto real = real_of(f);
  auto ov = overlay_of(f);
  if (!ov)
    return real->pMethods->xRead(real, out, amt, off);
  auto buf = static_cast<char*>(out);
  std::memset(buf, 0, static_cast<size_t>(amt));
  std::lock_guard<std::mutex> guard{ov->mu};
  auto end = std::min<int64_t>(off + amt, ov->size);
  for (auto pos = static_cast<int64_t>(off); pos < end;) {
    auto idx = pos / block_size;
    auto chunk_end = std::min(end, (idx + 1) * block_size);
    auto dst = buf + (pos - off);
    if (auto i = ov->blocks.find(idx); i != ov->blocks.end()) {
      std::memcpy(dst, i->second.data() + (pos - idx * block_size),
                  static_cast<size_t>(chunk_end - pos));
    } else if (auto rc = read_base(*ov, real, dst, chunk_end - pos, pos);
               rc != SQLITE_OK) {
      return rc;
    }
    pos = chunk_end;
  }
  return off + amt > ov->size ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

int x_write(sqlite3_file* f, const void* in, int amt, sqlite3_int64 off) {
  auto real = real_of(f);
  auto ov = overlay_of(f);
  if (!ov)
    return real->pMethods->xWrite(real, in, amt, off);
  auto src = static_cast<const char*>(in);
  std::lock_guard<std::mutex> guard{ov->mu};
  auto end = static_cast<int64_t>(off) + amt;
  for (auto pos = static_cast<int64_t>(off); pos < end;) {
    auto idx = pos / block_size;
    auto start = idx * block_size;
    auto chunk_end = std::min(end, start + block_size);
    auto i = ov->blocks.find(idx);
    if (i == ov->blocks.end()) {
      std::vector<char> b(block_size);
      if (auto rc = read_base(*ov, real, b.data(), block_size, start);
          rc != SQLITE_OK)
        return rc;
      i = ov->blocks.emplace(idx, std::move(b)).first;
    }
    std::memcpy(i->second.data() + (pos - start), src + (pos - off),
                static_cast<size_t>(chunk_end - pos));
    pos = chunk_end;
  }
  ov->size = std::max(ov->size, end);
  return SQLITE_OK;
}

int x_truncate(sqlite3_file* f, sqlite3_int64 n) {
  auto real = real_of(f);
  auto ov = overlay_of(f);
  if (!ov)
    return real->pMethods->xTruncate(real, n);
  std::lock_guard<std::mutex> guard{ov->mu};
  ov->size = n;
  ov->base_limit = std::min<int64_t>(ov->base_limit, n);
  auto first_gone = (n + block_size - 1) / block_size;
  ov->blocks.erase(ov->blocks.lower_bound(first_gone), ov->blocks.end());
  if (n % block_size != 0) {
    if (auto i = ov->blocks.find(n / block_size); i != ov->blocks.end())
      std::fill(i->second.begin() + (n % block_size), i->second.end(), 0);
  }
  return SQLITE_OK;
}

// Writes the overlay to the real file (not synced yet). Called with
// `ov.mu` held.
int flush(overlay& ov, sqlite3_file* real) {
  auto m = real->pMethods;
  if (ov.real_size > ov.base_limit) {
    if (auto rc = m->xTruncate(real, ov.base_limit); rc != SQLITE_OK)
      return rc;
    ov.real_size = ov.base_limit;
  }
  for (auto& [idx, data] : ov.blocks) {
    auto start = idx * block_size;
    auto len = std::min(block_size, ov.size - start);
    if (len <= 0)
      continue;
    if (auto rc = m->xWrite(real, data.data(), static_cast<int>(len), start);
        rc != SQLITE_OK)
      return rc;
    ov.real_size = std::max(ov.real_size, start + len);
  }
  if (ov.real_size != ov.size) {
    if (auto rc = m->xTruncate(real, ov.size); rc != SQLITE_OK)
      return rc;
    ov.real_size = ov.size;
  }
  ov.blocks.clear();
  ov.base_limit = ov.size;
  return SQLITE_OK;
}

int x_sync(sqlite3_file* f, int flags) {
  auto real = real_of(f);
  // The flush latency comes first: until a sync returns, a power cut may
  // lose what it covers, so the overlay is written out only at its end.
  if (auto us = sync_delay_us.load(); us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  if (auto ov = overlay_of(f)) {
    std::lock_guard<std::mutex> guard{ov->mu};
    if (auto rc = flush(*ov, real); rc != SQLITE_OK)
      return rc;
  }
  return real->pMethods->xSync(real, flags);
}

int x_file_size(sqlite3_file* f, sqlite3_int64* out) {
  auto real = real_of(f);
  auto ov = overlay_of(f);
  if (!ov)
    return real->pMethods->xFileSize(real, out);
  std::lock_guard<std::mutex> guard{ov->mu};
  *out = ov->size;
  return SQLITE_OK;
}

int x_lock(sqlite3_file* f, int level) {
  auto real = real_of(f);
  return real->pMethods->xLock(real, level);
}

int x_unlock(sqlite3_file* f, int level) {
  auto real = real_of(f);
  return real->pMethods->xUnlock(real, level);
}

int x_check_reserved_lock(sqlite3_file* f, int* out) {
  auto real = real_of(f);
  return real->pMethods->xCheckReservedLock(real, out);
}

int x_file_control(sqlite3_file* f, int op, void* arg) {
  auto real = real_of(f);
  // Size hints and chunk sizes would make the unix VFS grow the real file
  // behind the overlay's back; both are only hints.
  if (overlay_of(f)
      && (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_CHUNK_SIZE))
    return SQLITE_OK;
  return real->pMethods->xFileControl(real, op, arg);
}

int x_sector_size(sqlite3_file* f) {
  auto real = real_of(f);
  return real->pMethods->xSectorSize(real);
}

int x_device_characteristics(sqlite3_file* f) {
  auto real = real_of(f);
  return real->pMethods->xDeviceCharacteristics(real);
}

int x_shm_map(sqlite3_file* f, int region, int size, int extend,
              void volatile** out) {
  auto real = real_of(f);
  return real->pMethods->xShmMap(real, region, size, extend, out);
}

int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  auto real = real_of(f);
  return real->pMethods->xShmLock(real, offset, n, flags);
}

void x_shm_barrier(sqlite3_file* f) {
  auto real = real_of(f);
  real->pMethods->xShmBarrier(real);
}

int x_shm_unmap(sqlite3_file* f, int delete_flag) {
  auto real = real_of(f);
  return real->pMethods->xShmUnmap(real, delete_flag);
}

// Version 2: no xFetch/xUnfetch, so SQLite never reads the database through
// a memory map of the real file (which would bypass the overlay).
const sqlite3_io_methods pl_methods = {
  2,
  x_close,
  x_read,
  x_write,
  x_truncate,
  x_sync,
  x_file_size,
  x_lock,
  x_unlock,
  x_check_reserved_lock,
  x_file_control,
  x_sector_size,
  x_device_characteristics,
  x_shm_map,
  x_shm_lock,
  x_shm_barrier,
  x_shm_unmap,
  nullptr,
  nullptr,
};

bool durable_kind(int flags) {
  return (flags
          & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL
             | SQLITE_OPEN_SUPER_JOURNAL | SQLITE_OPEN_WAL))
         != 0;
}

int v_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags,
           int* out_flags) {
  auto pf = reinterpret_cast<pl_file*>(f);
  pf->base.pMethods = nullptr;
  pf->ov = nullptr;
  auto real = real_of(f);
  auto rc = real_vfs->xOpen(real_vfs, name, real, flags, out_flags);
  if (rc != SQLITE_OK)
    return rc;
  pf->base.pMethods = &pl_methods;
  if (name == nullptr || !durable_kind(flags))
    return SQLITE_OK;
  std::shared_ptr<overlay> ov;
  {
    std::lock_guard<std::mutex> guard{files().mu};
    auto& slot = files().files[name];
    if (!slot) {
      sqlite3_int64 size = 0;
      if (auto rc2 = real->pMethods->xFileSize(real, &size);
          rc2 != SQLITE_OK) {
        files().files.erase(name);
        return rc2; // SQLite calls xClose, which closes the real file
      }
      slot = std::make_shared<overlay>();
      slot->reset(size);
    }
    ov = slot;
  }
  pf->ov = new std::shared_ptr<overlay>(std::move(ov));
  return SQLITE_OK;
}

int v_delete(sqlite3_vfs*, const char* name, int sync_dir) {
  std::shared_ptr<overlay> ov;
  {
    std::lock_guard<std::mutex> guard{files().mu};
    if (auto i = files().files.find(name); i != files().files.end()) {
      ov = std::move(i->second);
      files().files.erase(i);
    }
  }
  if (ov) {
    // A handle still open on the deleted file sees an empty one.
    std::lock_guard<std::mutex> guard{ov->mu};
    ov->reset(0);
  }
  return real_vfs->xDelete(real_vfs, name, sync_dir);
}

int v_access(sqlite3_vfs*, const char* name, int flags, int* out) {
  // The unix VFS calls an empty file absent; the overlay knows better.
  if (flags == SQLITE_ACCESS_EXISTS) {
    std::shared_ptr<overlay> ov;
    {
      std::lock_guard<std::mutex> guard{files().mu};
      if (auto i = files().files.find(name); i != files().files.end())
        ov = i->second;
    }
    if (ov) {
      std::lock_guard<std::mutex> guard{ov->mu};
      *out = ov->size > 0 ? 1 : 0;
      return SQLITE_OK;
    }
  }
  return real_vfs->xAccess(real_vfs, name, flags, out);
}

int v_full_pathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return real_vfs->xFullPathname(real_vfs, name, n, out);
}

void* v_dl_open(sqlite3_vfs*, const char* name) {
  return real_vfs->xDlOpen(real_vfs, name);
}

void v_dl_error(sqlite3_vfs*, int n, char* out) {
  real_vfs->xDlError(real_vfs, n, out);
}

void (*v_dl_sym(sqlite3_vfs*, void* h, const char* sym))(void) {
  return real_vfs->xDlSym(real_vfs, h, sym);
}

void v_dl_close(sqlite3_vfs*, void* h) {
  real_vfs->xDlClose(real_vfs, h);
}

int v_randomness(sqlite3_vfs*, int n, char* out) {
  return real_vfs->xRandomness(real_vfs, n, out);
}

int v_sleep(sqlite3_vfs*, int us) {
  return real_vfs->xSleep(real_vfs, us);
}

int v_current_time(sqlite3_vfs*, double* out) {
  return real_vfs->xCurrentTime(real_vfs, out);
}

int v_get_last_error(sqlite3_vfs*, int n, char* out) {
  return real_vfs->xGetLastError(real_vfs, n, out);
}

int v_current_time_int64(sqlite3_vfs*, sqlite3_int64* out) {
  return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

int v_set_system_call(sqlite3_vfs*, const char* name,
                      sqlite3_syscall_ptr ptr) {
  return real_vfs->xSetSystemCall(real_vfs, name, ptr);
}

sqlite3_syscall_ptr v_get_system_call(sqlite3_vfs*, const char* name) {
  return real_vfs->xGetSystemCall(real_vfs, name);
}

const char* v_next_system_call(sqlite3_vfs*, const char* name) {
  return real_vfs->xNextSystemCall(real_vfs, name);
}

} // namespace

int install(bool make_default) {
  static std::mutex mu;
  std::lock_guard<std::mutex> guard{mu};
  if (real_vfs == nullptr) {
    auto real = sqlite3_vfs_find("unix");
    if (real == nullptr)
      return SQLITE_ERROR;
    real_vfs = real;
    pl_vfs = sqlite3_vfs{};
    pl_vfs.iVersion = std::min(real->iVersion, 3);
    pl_vfs.szOsFile = static_cast<int>(real_offset) + real->szOsFile;
    pl_vfs.mxPathname = real->mxPathname;
    pl_vfs.zName = "oncegate-powerloss";
    pl_vfs.xOpen = v_open;
    pl_vfs.xDelete = v_delete;
    pl_vfs.xAccess = v_access;
    pl_vfs.xFullPathname = v_full_pathname;
    pl_vfs.xDlOpen = v_dl_open;
    pl_vfs.xDlError = v_dl_error;
    pl_vfs.xDlSym = v_dl_sym;
    pl_vfs.xDlClose = v_dl_close;
    pl_vfs.xRandomness = v_randomness;
    pl_vfs.xSleep = v_sleep;
    pl_vfs.xCurrentTime = v_current_time;
    pl_vfs.xGetLastError = v_get_last_error;
    pl_vfs.xCurrentTimeInt64 = v_current_time_int64;
    pl_vfs.xSetSystemCall = v_set_system_call;
    pl_vfs.xGetSystemCall = v_get_system_call;
    pl_vfs.xNextSystemCall = v_next_system_call;
  }
  return sqlite3_vfs_register(&pl_vfs, make_default ? 1 : 0);
}

sqlite3_vfs* vfs() {
  return real_vfs ? &pl_vfs : nullptr;
}

void cut() {
  std::lock_guard<std::mutex> guard{files().mu};
  for (auto& [name, ov] : files().files) {
    std::lock_guard<std::mutex> g{ov->mu};
    ov->reset(ov->real_size);
  }
}

uint64_t unsynced_bytes() {
  uint64_t total = 0;
  std::lock_guard<std::mutex> guard{files().mu};
  for (auto& [name, ov] : files().files) {
    std::lock_guard<std::mutex> g{ov->mu};
    total += ov->blocks.size() * static_cast<uint64_t>(block_size);
  }
  return total;
}

void set_sync_delay(std::chrono::microseconds delay) {
  sync_delay_us = delay.count();
}

} // namespace oncegate::powerloss
