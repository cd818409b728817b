// A failing COMMIT on demand for the test node: while the file named by
// ONCEGATE_COMMIT_FAULT_FILE exists, every COMMIT of every SQLite
// connection the process opens becomes a ROLLBACK (sqlite3_commit_hook),
// as a disk error at commit time would; while the file named by
// ONCEGATE_COMMIT_HOLD_FILE exists, every COMMIT waits, as on a stalled
// disk. Tests only.
#pragma once

namespace oncegate::test {

/// Registers the hook for connections opened from now on, if the variable
/// is set. Returns false if SQLite refused the registration.
bool install_commit_fault_from_env();

} // namespace oncegate::test
