// raftcut: an LD_PRELOAD library that turns a SIGKILL into a power cut for
// the files of one directory (the Raft log, `<data-dir>/raft`). Tests only;
// never installed, never shipped. See docs/testing.md, "The Raft log".
//
// Environment
//   ONCEGATE_RAFTCUT_DIR      the directory whose regular files are tracked
//                             (files directly in it or below it); unset: the
//                             library does nothing at all
//   ONCEGATE_RAFTCUT_JOURNAL  an existing directory OUTSIDE the tracked one;
//                             this process appends its undo journal there
//                             (journal-<ns>-<pid>.rcj)
//   ONCEGATE_RAFTCUT_MODE     `real` (default): syncs count;
//                             `ignore-sync`: no sync counts, every change
//                             since the process started is rolled back (the
//                             "Raft log never fsynced" mutant)
//
// Mechanism. Writes go to the real file. Before each modification of a
// tracked file the library appends an undo record to the journal (the old
// bytes of the range, or "all zero", and the old file size); the real call
// follows. When a change becomes durable the library appends a record that
// says so. After the process was SIGKILLed, `tests/process/raftcut.py
// rollback JOURNAL_DIR` applies the undo records of everything that was not
// durable, newest first, so that the files hold what was synced. Files are
// keyed by (device, inode), so records follow a file across renames.
//
// The model
//   lost: every write, pwrite(v), AIO write, ftruncate and fallocate of a
//     tracked file since that file's last completed fsync/fdatasync, all of
//     it (also a write the kernel finished after the kill: an AIO request
//     whose completion the process had not reaped is not durable);
//   kept: everything a completed fsync or fdatasync of the file covered
//     (a SYNC record: all earlier changes of that file are durable); the
//     range of a completed write through a descriptor opened with O_DSYNC
//     or O_SYNC, or issued with RWF_DSYNC/RWF_SYNC, including a kernel AIO
//     write whose completion was reaped with io_getevents (a DURABLE record
//     for that range: older undo records are not applied inside it, and the
//     file keeps at least its end as size); a completed IOCB_CMD_F(D)SYNC;
//   names: creating, renaming and unlinking files are durable at once (as
//     if the directory were synced at once; libraft syncs it after each);
//     a file created unsynced comes back empty, not absent;
//   not simulated: torn or reordered write-back (a real cut may keep any
//     part of the unsynced writes; this is the one state where none is
//     kept), sync_file_range (no durability, so nothing is kept by it),
//     writes through mmap, dup'ed descriptors, copy_file_range/sendfile/
//     splice into a tracked file, io_uring (io_uring_setup fails with ENOSYS
//     in a tracked process, so a user must fall back). The journal itself
//     lives in the page cache: a SIGKILL keeps it, it is not a real cut.
//
// libraft 0.15 + libuv 1.44 (Debian) reach the tracked files through:
// openat (libuv open64), pwrite64/write (libuv, libraft's direct-I/O probe),
// syscall(SYS_pwritev) and syscall(SYS_close) (libuv), ftruncate64, fsync,
// fdatasync, posix_fallocate (libraft), rename, unlink, and kernel AIO via
// syscall(SYS_io_submit / SYS_io_getevents) (libraft's UvWriter: open
// segments are O_DSYNC|O_DIRECT, each write an IOCB_CMD_PWRITEV with
// RWF_NOWAIT and IOCB_FLAG_RESFD, completion read on the loop thread; on
// EAGAIN the same request goes again, blocking, from the thread pool). All of
// these are interposed here, plus their other libc spellings.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/aio_abi.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef RWF_DSYNC
#define RWF_DSYNC 0x00000002
#endif
#ifndef RWF_SYNC
#define RWF_SYNC 0x00000004
#endif

// Journal record types (little-endian; tests/process/raftcut.py reads them).
enum {
  REC_PATH = 1,    // dev, ino, path: the inode's name from now on
  REC_UNDO = 2,    // dev, ino, old_size, n, then n pieces (off, len, zero, data)
  REC_SYNC = 3,    // dev, ino: every earlier change of the file is durable
  REC_DURABLE = 4, // dev, ino, off, len: that range was written durably
  REC_UNLINK = 5,  // dev, ino: the inode lost its (last) name
};

#define MAX_FDS 65536
#define MAX_AIO 1024
#define PIECE 65536

struct tracked {
  int on;
  int dsync;  // opened with O_DSYNC or O_SYNC
  int shadow; // a read-only descriptor of the same file (no O_DIRECT)
  dev_t dev;
  ino_t ino;
};

struct aio_slot {
  uint64_t iocb; // the iocb's address: io_event.obj
  int kind;      // 1 write, 2 fsync
  int durable;   // the write is synchronous (O_DSYNC / RWF_DSYNC)
  dev_t dev;
  ino_t ino;
  uint64_t off;
};

static struct tracked fds[MAX_FDS];
static struct aio_slot aios[MAX_AIO];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int active;        // the directory is set: track
static int ignore_sync;   // ONCEGATE_RAFTCUT_MODE=ignore-sync
static int journal = -1;
static char dir[PATH_MAX];
static size_t dir_len;

static long (*real_syscall)(long, ...);
static int (*real_open)(const char*, int, ...);
static int (*real_openat)(int, const char*, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec*, int);
static ssize_t (*real_pwritev)(int, const struct iovec*, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec*, int, off_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char*, const char*);
static int (*real_renameat)(int, const char*, int, const char*);
static int (*real_renameat2)(int, const char*, int, const char*, unsigned);
static int (*real_unlink)(const char*);
static int (*real_unlinkat)(int, const char*, int);

static void die(const char* what) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "raftcut: %s (errno %d)\n", what, errno);
  if (n > 0 && real_write != NULL) // not write(): that would re-enter init
    (void)!real_write(2, buf, (size_t)n);
  _exit(97);
}

#define RESOLVE(name) \
  (*(void**)(&real_##name) = dlsym(RTLD_NEXT, #name))

static void init(void) {
  RESOLVE(syscall);
  RESOLVE(open);
  RESOLVE(openat);
  RESOLVE(close);
  RESOLVE(write);
  RESOLVE(pwrite);
  RESOLVE(writev);
  RESOLVE(pwritev);
  RESOLVE(pwritev2);
  RESOLVE(ftruncate);
  RESOLVE(fallocate);
  RESOLVE(posix_fallocate);
  RESOLVE(fsync);
  RESOLVE(fdatasync);
  RESOLVE(rename);
  RESOLVE(renameat);
  RESOLVE(renameat2);
  RESOLVE(unlink);
  RESOLVE(unlinkat);
  const char* d = getenv("ONCEGATE_RAFTCUT_DIR");
  if (d == NULL || *d == '\0')
    return;
  const char* j = getenv("ONCEGATE_RAFTCUT_JOURNAL");
  if (j == NULL || *j == '\0')
    die("ONCEGATE_RAFTCUT_DIR without ONCEGATE_RAFTCUT_JOURNAL");
  const char* m = getenv("ONCEGATE_RAFTCUT_MODE");
  if (m != NULL && *m != '\0') {
    if (strcmp(m, "ignore-sync") == 0)
      ignore_sync = 1;
    else if (strcmp(m, "real") != 0)
      die("unknown ONCEGATE_RAFTCUT_MODE (real, ignore-sync)");
  }
  // The directory may not exist yet (the node creates it): keep its
  // absolute, lexically clean spelling; realpath when it exists.
  char tmp[PATH_MAX];
  if (realpath(d, tmp) == NULL) {
    if (d[0] != '/')
      die("ONCEGATE_RAFTCUT_DIR must exist or be absolute");
    snprintf(tmp, sizeof tmp, "%s", d);
  }
  dir_len = strlen(tmp);
  while (dir_len > 1 && tmp[dir_len - 1] == '/')
    tmp[--dir_len] = '\0';
  memcpy(dir, tmp, dir_len + 1);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/journal-%020lld-%08d.rcj", j,
           (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, (int)getpid());
  journal = (int)real_syscall(SYS_openat, AT_FDCWD, path,
                              O_WRONLY | O_CREAT | O_EXCL | O_APPEND
                                | O_CLOEXEC, 0600);
  if (journal < 0)
    die("cannot create the journal in ONCEGATE_RAFTCUT_JOURNAL");
  const char magic[8] = {'R', 'C', 'J', '1', (char)ignore_sync, 0, 0, 0};
  if (real_write(journal, magic, sizeof magic) != sizeof magic)
    die("cannot write the journal");
  active = 1;
}

static inline void ensure(void) { pthread_once(&once, init); }

// --- journal ----------------------------------------------------------------

static void jwrite(const struct iovec* iov, int n) {
  // One writev per record: with O_APPEND the record lands whole (a record
  // cut short by the kill is dropped by the reader, and its change was
  // never made).
  size_t total = 0;
  for (int i = 0; i < n; ++i)
    total += iov[i].iov_len;
  ssize_t w = real_writev(journal, iov, n);
  if (w < 0 || (size_t)w != total)
    die("journal write failed");
}

static void rec_ids(int type, dev_t dev, ino_t ino, const void* extra,
                    size_t extra_len) {
  uint32_t hdr[2] = {(uint32_t)type, (uint32_t)(16 + extra_len)};
  uint64_t ids[2] = {(uint64_t)dev, (uint64_t)ino};
  struct iovec iov[3] = {{hdr, sizeof hdr}, {ids, sizeof ids},
                         {(void*)extra, extra_len}};
  jwrite(iov, extra_len ? 3 : 2);
}

static void rec_path(dev_t dev, ino_t ino, const char* path) {
  rec_ids(REC_PATH, dev, ino, path, strlen(path));
}

static void rec_sync(dev_t dev, ino_t ino) {
  if (!ignore_sync)
    rec_ids(REC_SYNC, dev, ino, NULL, 0);
}

static void rec_durable(dev_t dev, ino_t ino, uint64_t off, uint64_t len) {
  if (ignore_sync || len == 0)
    return;
  uint64_t r[2] = {off, len};
  rec_ids(REC_DURABLE, dev, ino, r, sizeof r);
}

static int all_zero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i])
      return 0;
  return 1;
}

// Undo record for a change of [off, off+len) of the file open as `shadow`
// (whose size before the change is `old_size`): the old bytes of the part
// below old_size, in pieces, an all-zero piece without its bytes.
static void rec_undo(int shadow, dev_t dev, ino_t ino, uint64_t old_size,
                     uint64_t off, uint64_t len) {
  uint64_t end = off + len;
  if (end > old_size)
    end = old_size;
  uint64_t n = end > off ? (end - off + PIECE - 1) / PIECE : 0;
  // Body: old_size, n, pieces. Built in memory (pieces are at most PIECE).
  size_t cap = 16 + (size_t)n * (17 + PIECE);
  char* body = malloc(cap);
  if (body == NULL)
    die("out of memory");
  size_t at = 0;
  memcpy(body + at, &old_size, 8), at += 8;
  memcpy(body + at, &n, 8), at += 8;
  for (uint64_t p = off; p < end; p += PIECE) {
    uint64_t plen = end - p < PIECE ? end - p : PIECE;
    char* head = body + at;
    at += 17;
    ssize_t r = pread(shadow, body + at, plen, (off_t)p);
    if (r < 0)
      die("cannot read the old bytes of a tracked file");
    if ((uint64_t)r < plen)
      memset(body + at + r, 0, plen - (uint64_t)r);
    uint8_t zero = (uint8_t)all_zero(body + at, plen);
    memcpy(head, &p, 8);
    memcpy(head + 8, &plen, 8);
    head[16] = (char)zero;
    if (!zero)
      at += plen;
  }
  rec_ids(REC_UNDO, dev, ino, body, at);
  free(body);
}

// --- descriptors ------------------------------------------------------------

static int under_dir(const char* abs) {
  return active && strncmp(abs, dir, dir_len) == 0
         && (abs[dir_len] == '/' || abs[dir_len] == '\0');
}

// The tracked entry of `fd`, or NULL; checks the descriptor still names the
// same file (a close we did not see, then the number reused).
static struct tracked* lookup(int fd, struct stat* st) {
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return NULL;
  struct stat s;
  if (fstat(fd, &s) != 0 || s.st_dev != fds[fd].dev
      || s.st_ino != fds[fd].ino) {
    if (fds[fd].shadow >= 0)
      real_syscall(SYS_close, fds[fd].shadow);
    fds[fd].on = 0;
    return NULL;
  }
  if (st)
    *st = s;
  return &fds[fd];
}

static void untrack(int fd) {
  if (fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return;
  pthread_mutex_lock(&mu);
  if (fds[fd].on) {
    fds[fd].on = 0;
    if (fds[fd].shadow >= 0)
      real_syscall(SYS_close, fds[fd].shadow);
    fds[fd].shadow = -1;
  }
  pthread_mutex_unlock(&mu);
}

// After a successful open: track `fd` when it is a regular file under the
// directory.
static void track(int fd, int flags) {
  if (!active || fd < 0 || fd >= MAX_FDS)
    return;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0)
    return;
  path[n] = '\0';
  if (!under_dir(path))
    return;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return;
  int shadow = (int)real_syscall(SYS_openat, AT_FDCWD, link,
                                 O_RDONLY | O_CLOEXEC, 0);
  if (shadow < 0)
    die("cannot reopen a tracked file for reading");
  pthread_mutex_lock(&mu);
  if (fds[fd].on && fds[fd].shadow >= 0)
    real_syscall(SYS_close, fds[fd].shadow);
  fds[fd].on = 1;
  fds[fd].dsync = (flags & O_DSYNC) != 0; // O_SYNC includes O_DSYNC's bit
  fds[fd].shadow = shadow;
  fds[fd].dev = st.st_dev;
  fds[fd].ino = st.st_ino;
  rec_path(st.st_dev, st.st_ino, path);
  pthread_mutex_unlock(&mu);
}

// Absolute spelling of `path` relative to `dirfd` (its directory resolved).
static int absolute(int dirfd, const char* path, char* out) {
  char base[2 * PATH_MAX + 2];
  if (path[0] == '/') {
    snprintf(base, sizeof base, "%s", path);
  } else {
    char d[PATH_MAX];
    if (dirfd == AT_FDCWD) {
      if (getcwd(d, sizeof d) == NULL)
        return -1;
    } else {
      char link[64];
      snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
      ssize_t n = readlink(link, d, sizeof d - 1);
      if (n <= 0)
        return -1;
      d[n] = '\0';
    }
    snprintf(base, sizeof base, "%s/%s", d, path);
  }
  // realpath of the parent, then the last component as given.
  char* slash = strrchr(base, '/');
  char parent[PATH_MAX];
  if (slash == base) {
    snprintf(parent, sizeof parent, "/");
  } else {
    *slash = '\0';
    if (realpath(base, parent) == NULL)
      return -1;
    *slash = '/';
  }
  int n = snprintf(out, PATH_MAX, "%s%s%s", parent,
                   strcmp(parent, "/") ? "/" : "", slash + 1);
  return n > 0 && n < PATH_MAX ? 0 : -1;
}

// An existing regular file at `abs` under the directory: its identity.
static int tracked_path(const char* abs, struct stat* st) {
  if (!under_dir(abs))
    return 0;
  if (lstat(abs, st) != 0 || !S_ISREG(st->st_mode))
    return 0;
  return 1;
}

// --- the modifying calls ----------------------------------------------------

// Journals a change of [off, off+len) (a write or truncation) of tracked
// `fd`; with `len` = UINT64_MAX the change is a truncation to `off`.
static struct tracked* before_change(int fd, uint64_t off, uint64_t len,
                                     struct stat* st_out) {
  ensure();
  struct stat st;
  if (!active)
    return NULL;
  pthread_mutex_lock(&mu);
  struct tracked* t = lookup(fd, &st);
  if (t != NULL) {
    uint64_t size = (uint64_t)st.st_size;
    if (len == UINT64_MAX) // truncate to off: the bytes beyond it go
      rec_undo(t->shadow, t->dev, t->ino, size, off,
               size > off ? size - off : 0);
    else
      rec_undo(t->shadow, t->dev, t->ino, size, off, len);
    if (st_out)
      *st_out = st;
  }
  pthread_mutex_unlock(&mu);
  return t;
}

static uint64_t iov_len(const struct iovec* iov, int n) {
  uint64_t total = 0;
  for (int i = 0; i < n; ++i)
    total += iov[i].iov_len;
  return total;
}

// The offset a write() at the file position lands at.
static uint64_t position(int fd, struct stat* st) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0 && (fl & O_APPEND))
    return (uint64_t)st->st_size;
  off_t at = lseek(fd, 0, SEEK_CUR);
  return at < 0 ? 0 : (uint64_t)at;
}

static void after_write(struct tracked* t, int fd, uint64_t off, ssize_t done,
                        int flags) {
  if (t == NULL || done <= 0)
    return;
  pthread_mutex_lock(&mu);
  struct tracked* now = lookup(fd, NULL);
  if (now != NULL && (now->dsync || (flags & (RWF_DSYNC | RWF_SYNC))))
    rec_durable(now->dev, now->ino, off, (uint64_t)done);
  pthread_mutex_unlock(&mu);
}

static ssize_t do_pwritev(int fd, const struct iovec* iov, int n, off_t off,
                          int flags, int positional, int use_v2) {
  ensure();
  struct tracked* t = NULL;
  uint64_t at = (uint64_t)off;
  if (active && fd >= 0 && fd < MAX_FDS && fds[fd].on) {
    if (!positional) {
      struct stat st;
      if (fstat(fd, &st) == 0)
        at = position(fd, &st);
    }
    t = before_change(fd, at, iov_len(iov, n), NULL);
  }
  ssize_t r;
  if (use_v2)
    r = real_pwritev2(fd, iov, n, off, flags);
  else if (positional)
    r = real_syscall(SYS_pwritev, fd, iov, n, (long)off, (long)(off >> 32));
  else
    r = real_writev(fd, iov, n);
  int saved = errno;
  after_write(t, fd, at, r, flags);
  errno = saved;
  return r;
}

ssize_t write(int fd, const void* buf, size_t count) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_write(fd, buf, count);
  struct iovec iov = {(void*)buf, count};
  return do_pwritev(fd, &iov, 1, 0, 0, 0, 0);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t off) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_pwrite(fd, buf, count, off);
  struct tracked* t = before_change(fd, (uint64_t)off, count, NULL);
  ssize_t r = real_pwrite(fd, buf, count, off);
  int saved = errno;
  after_write(t, fd, (uint64_t)off, r, 0);
  errno = saved;
  return r;
}
ssize_t pwrite64(int fd, const void* buf, size_t count, off_t off)
  __attribute__((alias("pwrite")));

ssize_t writev(int fd, const struct iovec* iov, int n) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_writev(fd, iov, n);
  return do_pwritev(fd, iov, n, 0, 0, 0, 0);
}

ssize_t pwritev(int fd, const struct iovec* iov, int n, off_t off) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_pwritev(fd, iov, n, off);
  return do_pwritev(fd, iov, n, off, 0, 1, 0);
}
ssize_t pwritev64(int fd, const struct iovec* iov, int n, off_t off)
  __attribute__((alias("pwritev")));

ssize_t pwritev2(int fd, const struct iovec* iov, int n, off_t off,
                 int flags) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_pwritev2(fd, iov, n, off, flags);
  if (off == -1) { // at the file position
    struct stat st;
    uint64_t at = 0;
    if (fstat(fd, &st) == 0)
      at = position(fd, &st);
    struct tracked* t = before_change(fd, at, iov_len(iov, n), NULL);
    ssize_t r = real_pwritev2(fd, iov, n, off, flags);
    int saved = errno;
    after_write(t, fd, at, r, flags);
    errno = saved;
    return r;
  }
  return do_pwritev(fd, iov, n, off, flags, 1, 1);
}
ssize_t pwritev64v2(int fd, const struct iovec* iov, int n, off_t off,
                    int flags) __attribute__((alias("pwritev2")));

int ftruncate(int fd, off_t len) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_ftruncate(fd, len);
  before_change(fd, (uint64_t)len, UINT64_MAX, NULL);
  return real_ftruncate(fd, len);
}
int ftruncate64(int fd, off_t len) __attribute__((alias("ftruncate")));

int fallocate(int fd, int mode, off_t off, off_t len) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_fallocate(fd, mode, off, len);
  // Plain allocation changes only the size (the new bytes read as zeros);
  // punching or zeroing a range changes its bytes: keep them.
  if (mode & ~FALLOC_FL_KEEP_SIZE)
    before_change(fd, (uint64_t)off, (uint64_t)len, NULL);
  else
    before_change(fd, (uint64_t)off, 0, NULL);
  return real_fallocate(fd, mode, off, len);
}
int fallocate64(int fd, int mode, off_t off, off_t len)
  __attribute__((alias("fallocate")));

int posix_fallocate(int fd, off_t off, off_t len) {
  ensure();
  if (!active || fd < 0 || fd >= MAX_FDS || !fds[fd].on)
    return real_posix_fallocate(fd, off, len);
  before_change(fd, (uint64_t)off, 0, NULL);
  return real_posix_fallocate(fd, off, len);
}
int posix_fallocate64(int fd, off_t off, off_t len)
  __attribute__((alias("posix_fallocate")));

// Journals a sync of `fd` that succeeded (`rv`, what the real call
// returned, is 0); returns `rv` with errno as the real call left it.
static int after_sync(int fd, int rv) {
  int saved = errno;
  if (rv == 0 && active && fd >= 0 && fd < MAX_FDS && fds[fd].on) {
    pthread_mutex_lock(&mu);
    struct tracked* t = lookup(fd, NULL);
    if (t != NULL)
      rec_sync(t->dev, t->ino);
    pthread_mutex_unlock(&mu);
  }
  errno = saved;
  return rv;
}

int fsync(int fd) {
  ensure();
  return after_sync(fd, real_fsync(fd));
}

int fdatasync(int fd) {
  ensure();
  return after_sync(fd, real_fdatasync(fd));
}

int close(int fd) {
  ensure();
  untrack(fd);
  return real_close(fd);
}

// --- opening ----------------------------------------------------------------

// O_TRUNC of an existing tracked file is a truncation to 0: journal it
// before the open does it.
static void before_open(int dirfd, const char* path, int flags) {
  if (!active || !(flags & O_TRUNC) || (flags & O_ACCMODE) == O_RDONLY)
    return;
  char abs[PATH_MAX];
  struct stat st;
  if (absolute(dirfd, path, abs) != 0 || !tracked_path(abs, &st))
    return;
  int shadow = (int)real_syscall(SYS_openat, AT_FDCWD, abs,
                                 O_RDONLY | O_CLOEXEC, 0);
  if (shadow < 0)
    return;
  pthread_mutex_lock(&mu);
  rec_path(st.st_dev, st.st_ino, abs);
  rec_undo(shadow, st.st_dev, st.st_ino, (uint64_t)st.st_size, 0,
           (uint64_t)st.st_size);
  pthread_mutex_unlock(&mu);
  real_syscall(SYS_close, shadow);
}

static int open_common(int dirfd, const char* path, int flags, mode_t mode) {
  ensure();
  before_open(dirfd, path, flags);
  int fd = real_openat(dirfd, path, flags, mode);
  if (fd >= 0 && active) {
    int saved = errno;
    track(fd, flags);
    errno = saved;
  }
  return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE
           ? (mode_t)va_arg(ap, int)
           : 0;
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_common(AT_FDCWD, path, flags, mode);
}
int open64(const char* path, int flags, ...) __attribute__((alias("open")));

int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_common(dirfd, path, flags, mode);
}
int openat64(int dirfd, const char* path, int flags, ...)
  __attribute__((alias("openat")));

int __open_2(const char* path, int flags) {
  return open_common(AT_FDCWD, path, flags, 0);
}
int __open64_2(const char* path, int flags) __attribute__((alias("__open_2")));
int __openat_2(int dirfd, const char* path, int flags) {
  return open_common(dirfd, path, flags, 0);
}
int __openat64_2(int dirfd, const char* path, int flags)
  __attribute__((alias("__openat_2")));

int creat(const char* path, mode_t mode) {
  return open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}
int creat64(const char* path, mode_t mode) __attribute__((alias("creat")));

// --- names ------------------------------------------------------------------

// The inode lost its last name (under `mu`): journal it and stop tracking
// its open descriptors and AIO requests. Its contents no longer matter, and
// its inode number may soon name a new file: no record of the old one may
// follow the UNLINK.
static void unlinked(dev_t dev, ino_t ino) {
  rec_ids(REC_UNLINK, dev, ino, NULL, 0);
  for (int fd = 0; fd < MAX_FDS; ++fd)
    if (fds[fd].on && fds[fd].dev == dev && fds[fd].ino == ino) {
      fds[fd].on = 0;
      if (fds[fd].shadow >= 0)
        real_syscall(SYS_close, fds[fd].shadow);
      fds[fd].shadow = -1;
    }
  for (int i = 0; i < MAX_AIO; ++i)
    if (aios[i].iocb != 0 && aios[i].dev == dev && aios[i].ino == ino)
      aios[i].iocb = 0;
}

static int do_rename(int olddirfd, const char* oldpath, int newdirfd,
                     const char* newpath, unsigned flags, int which) {
  ensure();
  char from[PATH_MAX], to[PATH_MAX];
  struct stat sf, st;
  int have_from = 0, have_to = 0;
  if (active && absolute(olddirfd, oldpath, from) == 0
      && absolute(newdirfd, newpath, to) == 0) {
    have_from = tracked_path(from, &sf) || (under_dir(to)
                                            && lstat(from, &sf) == 0
                                            && S_ISREG(sf.st_mode));
    have_to = tracked_path(to, &st);
  }
  int rv;
  if (which == 0)
    rv = real_rename(oldpath, newpath);
  else if (which == 1)
    rv = real_renameat(olddirfd, oldpath, newdirfd, newpath);
  else
    rv = real_renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
  if (rv == 0 && (have_from || have_to)) {
    int saved = errno;
    pthread_mutex_lock(&mu);
    if (have_to && !(flags & RENAME_EXCHANGE)
        && !(have_from && st.st_ino == sf.st_ino && st.st_dev == sf.st_dev)
        && st.st_nlink <= 1)
      unlinked(st.st_dev, st.st_ino);
    if (have_from)
      rec_path(sf.st_dev, sf.st_ino, to);
    if (have_to && (flags & RENAME_EXCHANGE))
      rec_path(st.st_dev, st.st_ino, from);
    pthread_mutex_unlock(&mu);
    errno = saved;
  }
  return rv;
}

int rename(const char* a, const char* b) {
  return do_rename(AT_FDCWD, a, AT_FDCWD, b, 0, 0);
}
int renameat(int da, const char* a, int db, const char* b) {
  return do_rename(da, a, db, b, 0, 1);
}
int renameat2(int da, const char* a, int db, const char* b, unsigned flags) {
  return do_rename(da, a, db, b, flags, 2);
}

static int do_unlink(int dirfd, const char* path, int flags, int which) {
  ensure();
  char abs[PATH_MAX];
  struct stat st;
  int have = active && !(flags & AT_REMOVEDIR)
             && absolute(dirfd, path, abs) == 0 && tracked_path(abs, &st);
  int rv = which == 0 ? real_unlink(path) : real_unlinkat(dirfd, path, flags);
  if (rv == 0 && have && st.st_nlink <= 1) {
    int saved = errno;
    pthread_mutex_lock(&mu);
    unlinked(st.st_dev, st.st_ino);
    pthread_mutex_unlock(&mu);
    errno = saved;
  }
  return rv;
}

int unlink(const char* path) { return do_unlink(AT_FDCWD, path, 0, 0); }
int unlinkat(int dirfd, const char* path, int flags) {
  return do_unlink(dirfd, path, flags, 1);
}

// --- kernel AIO and the raw syscalls libuv and libraft make -----------------

static struct aio_slot* aio_find(uint64_t iocb) {
  for (int i = 0; i < MAX_AIO; ++i)
    if (aios[i].iocb == iocb)
      return &aios[i];
  return NULL;
}

static long aio_submit(long ctx, long nr, struct iocb** iocbs) {
  if (active && nr > 0) {
    for (long i = 0; i < nr; ++i) {
      struct iocb* cb = iocbs[i];
      int fd = (int)cb->aio_fildes;
      if (fd < 0 || fd >= MAX_FDS || !fds[fd].on)
        continue;
      int op = cb->aio_lio_opcode;
      uint64_t len = 0;
      int kind = 0;
      if (op == IOCB_CMD_PWRITE) {
        len = cb->aio_nbytes, kind = 1;
      } else if (op == IOCB_CMD_PWRITEV) {
        len = iov_len((const struct iovec*)(uintptr_t)cb->aio_buf,
                      (int)cb->aio_nbytes);
        kind = 1;
      } else if (op == IOCB_CMD_FSYNC || op == IOCB_CMD_FDSYNC) {
        kind = 2;
      } else {
        continue;
      }
      struct tracked* t = kind == 1
        ? before_change(fd, (uint64_t)cb->aio_offset, len, NULL)
        : fds[fd].on ? &fds[fd] : NULL;
      if (t == NULL)
        continue;
      pthread_mutex_lock(&mu);
      struct aio_slot* s = aio_find((uint64_t)(uintptr_t)cb);
      if (s == NULL)
        s = aio_find(0);
      if (s == NULL)
        die("too many AIO requests in flight");
      s->iocb = (uint64_t)(uintptr_t)cb;
      s->kind = kind;
      s->durable = t->dsync
                   || (cb->aio_rw_flags & (RWF_DSYNC | RWF_SYNC)) != 0;
      s->dev = t->dev;
      s->ino = t->ino;
      s->off = (uint64_t)cb->aio_offset;
      pthread_mutex_unlock(&mu);
    }
  }
  long r = real_syscall(SYS_io_submit, ctx, nr, iocbs);
  if (active && nr > 0) {
    // Requests not submitted never complete: forget them.
    int saved = errno;
    long from = r < 0 ? 0 : r;
    pthread_mutex_lock(&mu);
    for (long i = from; i < nr; ++i) {
      struct aio_slot* s = aio_find((uint64_t)(uintptr_t)iocbs[i]);
      if (s != NULL)
        s->iocb = 0;
    }
    pthread_mutex_unlock(&mu);
    errno = saved;
  }
  return r;
}

static void aio_reaped(struct io_event* ev, long n) {
  if (!active || n <= 0)
    return;
  pthread_mutex_lock(&mu);
  for (long i = 0; i < n; ++i) {
    struct aio_slot* s = aio_find(ev[i].obj);
    if (s == NULL || ev[i].obj == 0)
      continue;
    if (s->kind == 1 && s->durable && ev[i].res > 0)
      rec_durable(s->dev, s->ino, s->off, (uint64_t)ev[i].res);
    else if (s->kind == 2 && ev[i].res == 0)
      rec_sync(s->dev, s->ino);
    s->iocb = 0;
  }
  pthread_mutex_unlock(&mu);
}

long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long),
       a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
  va_end(ap);
  ensure();
  if (!active)
    return real_syscall(n, a1, a2, a3, a4, a5, a6);
  switch (n) {
    case SYS_io_submit:
      return aio_submit(a1, a2, (struct iocb**)a3);
    case SYS_io_getevents:
    case SYS_io_pgetevents: { // both take the events array fourth
      long r = real_syscall(n, a1, a2, a3, a4, a5, a6);
      int saved = errno;
      aio_reaped((struct io_event*)a4, r);
      errno = saved;
      return r;
    }
    case SYS_io_uring_setup:
      errno = ENOSYS;
      return -1;
    case SYS_close:
      untrack((int)a1);
      return real_syscall(n, a1);
    case SYS_write:
      return write((int)a1, (const void*)a2, (size_t)a3);
    case SYS_pwrite64:
      return pwrite((int)a1, (const void*)a2, (size_t)a3, (off_t)a4);
    case SYS_writev:
      return writev((int)a1, (const struct iovec*)a2, (int)a3);
    case SYS_pwritev:
      // (fd, iov, n, pos_l, pos_h): on a 64-bit kernel pos_l is the whole
      // offset (libuv passes offset, offset >> 32).
      return pwritev((int)a1, (const struct iovec*)a2, (int)a3, (off_t)a4);
    case SYS_pwritev2:
      return pwritev2((int)a1, (const struct iovec*)a2, (int)a3, (off_t)a4,
                      (int)a6);
    case SYS_ftruncate:
      return ftruncate((int)a1, (off_t)a2);
    case SYS_fallocate:
      return fallocate((int)a1, (int)a2, (off_t)a3, (off_t)a4);
    case SYS_fsync:
      return fsync((int)a1);
    case SYS_fdatasync:
      return fdatasync((int)a1);
    case SYS_open:
      return open_common(AT_FDCWD, (const char*)a1, (int)a2, (mode_t)a3);
    case SYS_openat:
      return open_common((int)a1, (const char*)a2, (int)a3, (mode_t)a4);
    case SYS_rename:
      return rename((const char*)a1, (const char*)a2);
    case SYS_renameat:
      return renameat((int)a1, (const char*)a2, (int)a3, (const char*)a4);
    case SYS_renameat2:
      return renameat2((int)a1, (const char*)a2, (int)a3, (const char*)a4,
                       (unsigned)a5);
    case SYS_unlink:
      return unlink((const char*)a1);
    case SYS_unlinkat:
      return unlinkat((int)a1, (const char*)a2, (int)a3);
    default:
      return real_syscall(n, a1, a2, a3, a4, a5, a6);
  }
}

__attribute__((constructor)) static void raftcut_start(void) { ensure(); }
