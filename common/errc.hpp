#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>

namespace oncegate {

/// Error codes of oncegate. Registered with CAF's error system under the
/// category `oncegate` (see `actors/messages.hpp`), so they travel inside
/// `caf::error` values between actors and nodes.
enum class errc : uint8_t {
  /// Not an error.
  none = 0,
  /// SQLite could not open, prepare or step; the context has its message.
  storage_failure,
  /// A transaction failed to commit; nothing of it is durable.
  commit_failed,
  /// The store is closed or shutting down.
  store_unavailable,
  /// The database was written by a newer schema than this build knows.
  schema_too_new,
  /// A configured limit (open keys, mailbox, queue) is exhausted.
  overloaded,
  /// An actor did not answer within its deadline.
  timeout,
  /// A request carried values that cannot be stored (empty key, ...).
  invalid_argument,
  /// This node cannot decide: it is not the Raft leader and cannot reach
  /// one (nothing happened; retry elsewhere or later).
  not_leader,
  /// Leadership moved while a proposal was in flight: it may still commit,
  /// the outcome is unknown.
  leadership_lost,
  /// The database's WAL holds committed transactions SQLite would drop (a
  /// damaged frame before them): the store refuses to open it.
  wal_damaged,
};

/// Returns the enumerator name, e.g. `"commit_failed"`.
const char* to_string(errc x);

/// The CAF error category atom of `errc`.
constexpr caf::atom_value errc_category = caf::atom("oncegate");

/// Wraps `x` into a `caf::error`, optionally with a human-readable context
/// (e.g. `sqlite3_errmsg`).
caf::error make_error(errc x);
caf::error make_error(errc x, std::string context);

/// Renders `err` for log lines without an actor system at hand:
/// `oncegate.commit_failed: <context>` for our codes, CAF's form otherwise.
std::string describe(const caf::error& err);

/// The same for one of our codes and its context (the actor system's
/// renderer of `errc_category` uses it too).
std::string describe(errc x, const caf::message& context);

/// Returns the `errc` of `err` when it belongs to our category, otherwise
/// `errc::none`.
errc errc_of(const caf::error& err);

} // namespace oncegate
