#pragma once

#include <cstdint>
#include <string>

#include <caf/expected.hpp>

namespace oncegate::persistence {

/// What reading a database's `-wal` file ourselves found, before SQLite
/// opened it (opening runs WAL recovery, and the first checkpoint after it
/// would make a loss permanent).
///
/// SQLite replays a WAL frame by frame and stops at the first frame whose
/// salt or cumulative checksum does not match (or at once when the WAL
/// header does not verify), treating everything after as never written: a
/// damaged byte in an early frame silently drops every later transaction.
/// This check tells that apart from the ends a crash legitimately leaves.
///
/// The rule (why it holds: wal_check.cpp): frames are *intact* when their
/// salt is the WAL header's, their page number is set and their checksum
/// verifies from the checksum stored in the frame before them. A loss is
/// proven when, after the frame where SQLite stops, two commit frames lie in
/// one run of consecutive intact frames: the second transaction was written
/// after the first had committed, so the first was complete on disk (and,
/// with `synchronous=FULL`, acknowledged) and is dropped only because an
/// earlier byte went bad. A torn last transaction holds one commit frame at
/// most; frames of an older WAL generation carry other salts.
struct wal_report {
  /// The WAL holds committed transactions SQLite would drop.
  bool loss = false;
  /// The WAL header did not verify (SQLite then ignores the whole file); a
  /// loss is then judged by comparing the committed frames with the
  /// database file.
  bool header_damaged = false;
  /// Whole frames in the file.
  uint64_t frames = 0;
  /// The first frame SQLite rejects (1-based); 0: it reads them all.
  uint64_t first_bad_frame = 0;
  /// The last commit frame SQLite keeps (0: none).
  uint64_t last_kept_commit = 0;
  /// Intact commit frames after `first_bad_frame`: transactions that would
  /// be dropped (the last one may be a torn, never acknowledged one).
  uint64_t later_commits = 0;
  /// The last intact commit frame after `first_bad_frame` (0: none).
  uint64_t last_commit_frame = 0;
};

/// Reads `db_path + "-wal"` (absent or shorter than a WAL header: nothing to
/// lose) and reports what SQLite would drop of it. Reads only; fails with
/// `errc::storage_failure` when the file cannot be read.
caf::expected<wal_report> check_wal(const std::string& db_path);

/// A one-line account of a report with a loss, for messages and logs.
std::string describe_wal_loss(const std::string& db_path,
                              const wal_report& report);

} // namespace oncegate::persistence
