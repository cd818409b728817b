#pragma once

// A test-only SQLite VFS that turns a SIGKILL into a power cut.
//
// It wraps the default ("unix") VFS. Every write to a database, rollback
// journal, super-journal or WAL file stays in this process's memory (an
// overlay per file path, shared by every handle of that path) until the file
// is synced; `xSync` writes that file's overlay to the real file and then
// syncs the real file. Reads, `xFileSize` and `xTruncate` see the overlay, so
// the process itself sees its writes as with any page cache. When the process
// dies, the overlays die with it: the files on disk hold exactly what was
// synced.
//
// The model of a power cut:
// - lost: every write and truncation of a file since that file's last sync
//   (all of them, never a part: this is one legal post-crash state, the one
//   where the disk wrote nothing back on its own; torn or reordered
//   write-backs are not simulated);
// - kept: everything a sync covered;
// - names: creating and deleting a file are durable at once. SQLite's unix
//   VFS syncs the directory at the first sync of a new journal or WAL and
//   on a delete with `dirSync`, which this VFS cannot observe, so a power
//   cut that removes a never-synced new file is not simulated. Renames and
//   deletions outside SQLite are not seen at all;
// - the `-shm` wal-index passes through (it is mmap'd, and SQLite rebuilds it
//   from the WAL when the first connection opens after a crash); temporary
//   files pass through too;
// - memory-mapped reads of the database (`xFetch`) are not offered, so SQLite
//   reads every page through the overlay.
//
// Optionally each sync first waits `sync_delay` (a disk's flush latency)
// and only then writes the overlay out, so that a window between an answer
// and the end of its fsync is wide enough to be hit.

#include <chrono>
#include <cstdint>

struct sqlite3_vfs;

namespace oncegate::powerloss {

/// Registers the power-loss VFS ("oncegate-powerloss"); with `make_default`
/// every later `sqlite3_open*` without a VFS name uses it. Idempotent; call
/// before anything opens a database. Returns an SQLite result code.
int install(bool make_default = true);

/// The registered VFS (null before `install`).
sqlite3_vfs* vfs();

/// Test hook: forgets every write not yet synced, in every file, as a power
/// cut would. Meant for files no SQLite connection holds open (a connection
/// open across a cut keeps caches that no longer match its files).
void cut();

/// Bytes written but not yet synced, over all files.
uint64_t unsynced_bytes();

/// How long each sync additionally waits (default 0).
void set_sync_delay(std::chrono::microseconds delay);

} // namespace oncegate::powerloss
