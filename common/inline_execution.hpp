#pragma once

// Running the actors a message wakes on the thread that sent it, instead of
// waking a scheduler worker for them. CAF 0.17 lets whoever enqueues a
// message name the execution unit that gets the receiver if the message
// woke it (`enqueue(msg, eu)` calls `eu->exec_later(actor)`); the scheduler
// is only what happens when nobody is named. On an unloaded node a new key
// otherwise costs four thread wake-ups (a worker for the key actor, the
// store's thread, a worker for the key actor's answer, the HTTP thread),
// each tens of microseconds on a paravirtualised VM (docs/benchmarks.md,
// "Session 22"). Nothing about an actor changes: its mailbox still lets one
// thread at a time run it, in order, whichever thread that is (as work
// stealing moves actors between workers).
//
// Two units, for two kinds of thread:
// - `deferring_unit`: a thread with an event loop (the HTTP threads) runs
//   what its sends woke from that loop, after the handler that sent them
//   returned: no actor runs inside the sender's own code, so a callback
//   never runs inside the call that asked for it.
// - `collecting_unit`: a thread with no loop (the store's own thread) runs
//   what its answers woke right after giving them, before it sleeps.
// Both run each actor for a bounded number of messages and a bounded number
// of actors per turn; the rest goes to the scheduler as if no unit had been
// named.

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

#include <caf/execution_unit.hpp>
#include <caf/fwd.hpp>
#include <caf/resumable.hpp>

namespace oncegate::inline_exec {

/// Messages an actor handles per inline turn; then it goes to the scheduler.
constexpr std::size_t max_throughput = 16;

/// Actors run per drain; the ones after go to the scheduler.
constexpr std::size_t max_jobs = 8;

/// Queues work to run later on the calling thread's event loop.
using deferrer = std::function<void(std::function<void()>)>;

/// Collects the actors woken while it is the context, runs them in `run`.
class collecting_unit : public caf::execution_unit {
public:
  explicit collecting_unit(caf::actor_system& sys);
  ~collecting_unit() override;

  void exec_later(caf::resumable* job) override;

  /// Runs what was woken (and what those wake), up to `max_jobs`.
  void run();

private:
  std::deque<caf::resumable*> jobs_;
};

/// Hands the actors woken by sends made with it to an event loop, which
/// runs them on its thread after the current handler. Thread-safe: a loop
/// with several threads may run the drain on another one.
class deferring_unit : public caf::execution_unit {
public:
  deferring_unit(caf::actor_system& sys, deferrer defer);
  ~deferring_unit() override;

  void exec_later(caf::resumable* job) override;

  /// Hands what is queued to the scheduler.
  void flush();

private:
  void drain();

  deferrer defer_;
  std::mutex mtx_;
  std::deque<caf::resumable*> jobs_;
  bool scheduled_ = false;
};

/// Makes this thread's sends (through `here()`) run the actors they wake on
/// this thread's loop. Call once per thread, before its loop runs; the unit
/// lives until the thread ends.
void run_woken_actors_here(caf::actor_system& sys, deferrer defer);

/// Ends `run_woken_actors_here` on this thread (its loop stopped): what
/// is still queued goes to the scheduler. Call before the actor system ends.
void stop_running_here();

/// This thread's unit for sends that may run the receiver here, or null
/// (then the scheduler runs it).
caf::execution_unit* here();

} // namespace oncegate::inline_exec
