#pragma once

#include <chrono>
#include <cstdint>

#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "common/atoms.hpp"
#include "common/clock.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate {

/// Counters of the alarm actor.
struct alarm_stats {
  uint64_t runs = 0;
  uint64_t purged = 0;
  /// Wall-clock time of the armed alarm (-1: none known).
  int64_t next_due_ms = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, alarm_stats& x) {
  return f(caf::meta::type_name("alarm_stats"), x.runs, x.purged,
           x.next_due_ms);
}

/// The node's one expiry alarm. The durable alarms are the records'
/// `expires_at_ms` values (indexed in SQLite); this actor keeps exactly one
/// delayed message armed for the earliest of them, purges due records in
/// bounded chunks (each its own store operation, so claims interleave), and
/// re-arms. After a restart it starts with a purge, so past-due rows go at
/// once. Correctness never depends on it: claims check expiry themselves,
/// and a stale or early alarm only runs a purge that finds nothing.
///
/// ~~~
///   start ──> purge chunk ──(chunk full)──> purge chunk ...
///                 │
///                 └─(done)─> armed for min(next due, max_interval) ──> tick
/// ~~~
using alarm_actor = caf::typed_actor<
  /// A wake-up; ignored unless `generation` is the armed one.
  caf::reacts_to<tick_atom, uint64_t>,
  /// Answers the counters.
  caf::replies_to<stats_atom>::with<alarm_stats>>;

struct alarm_options {
  /// Records deleted per purge transaction at most.
  uint32_t chunk = 250;
  /// Pause between full chunks, so that claims queued behind a purge get
  /// their transactions first (a backlog of 1M expired records takes
  /// seconds, not milliseconds, and no claim waits for more than a chunk).
  caf::timespan chunk_pause = std::chrono::milliseconds(2);
  /// Longest sleep: bounds how late a record with an earlier expiry than the
  /// armed one (another route's TTL) is purged.
  caf::timespan max_interval = std::chrono::seconds(60);
  /// Wait after a failed purge.
  caf::timespan retry = std::chrono::seconds(1);
  caf::timespan store_timeout = std::chrono::seconds(30);
};

/// Spawns the alarm actor; `now` gives wall-clock milliseconds.
alarm_actor spawn_alarm(caf::actor_system& sys, persistence::store_actor store,
                        alarm_options opts, wall_clock_fn now);

} // namespace oncegate
