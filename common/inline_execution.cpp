#include "common/inline_execution.hpp"

#include <memory>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

namespace oncegate::inline_exec {

namespace {

// Hands `job` to the scheduler with the reference its waking added, as if
// it had been woken with no unit named.
void to_scheduler(caf::execution_unit& eu, caf::resumable* job) {
  eu.system().scheduler().enqueue(job);
}

// Runs `job` here for up to `max_throughput` messages, then does with it
// what a scheduler worker does: one that has more to do goes to the
// scheduler, one that waits for messages (or is done) drops the reference
// its waking added.
void resume_once(caf::execution_unit& eu, caf::resumable* job) {
  switch (job->resume(&eu, max_throughput)) {
    case caf::resumable::resume_later:
    case caf::resumable::shutdown_execution_unit:
      to_scheduler(eu, job);
      break;
    case caf::resumable::done:
    case caf::resumable::awaiting_message:
      caf::intrusive_ptr_release(job);
      break;
  }
}

thread_local std::shared_ptr<deferring_unit> this_thread_unit;

} // namespace

collecting_unit::collecting_unit(caf::actor_system& sys)
  : caf::execution_unit(&sys) {
  // nop
}

collecting_unit::~collecting_unit() {
  for (auto job : jobs_)
    to_scheduler(*this, job);
}

void collecting_unit::exec_later(caf::resumable* job) {
  jobs_.push_back(job);
}

void collecting_unit::run() {
  std::size_t ran = 0;
  while (!jobs_.empty()) {
    auto job = jobs_.front();
    jobs_.pop_front();
    if (ran++ < max_jobs)
      resume_once(*this, job);
    else
      to_scheduler(*this, job);
  }
}

deferring_unit::deferring_unit(caf::actor_system& sys, deferrer defer)
  : caf::execution_unit(&sys), defer_(std::move(defer)) {
  // nop
}

deferring_unit::~deferring_unit() {
  for (auto job : jobs_)
    to_scheduler(*this, job);
}

void deferring_unit::exec_later(caf::resumable* job) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    jobs_.push_back(job);
    if (scheduled_)
      return;
    scheduled_ = true;
  }
  // The drain keeps the unit alive: the thread may end before its loop
  // drops what was queued on it.
  auto self = this_thread_unit;
  try {
    if (self.get() == this) {
      defer_([self] { self->drain(); });
      return;
    }
  } catch (...) {
    // fall through: the scheduler runs them
  }
  flush();
}

void deferring_unit::flush() {
  std::deque<caf::resumable*> jobs;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    jobs.swap(jobs_);
    scheduled_ = false;
  }
  for (auto job : jobs)
    to_scheduler(*this, job);
}

void deferring_unit::drain() {
  // Should anything throw out of a turn (CAF catches the actors' own
  // exceptions), what is queued goes to the scheduler and the next wake-up
  // schedules a drain again; the exception goes on to the loop (the HTTP
  // threads' handler guard catches it; on the Raft thread it ends the
  // process, as it would on a CAF worker).
  struct unwind {
    deferring_unit* unit;
    bool done = false;
    ~unwind() {
      if (!done)
        unit->flush();
    }
  } unwinding{this};
  std::size_t ran = 0;
  for (;;) {
    caf::resumable* job;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (jobs_.empty()) {
        scheduled_ = false;
        unwinding.done = true;
        return;
      }
      job = jobs_.front();
      jobs_.pop_front();
    }
    if (ran++ < max_jobs)
      resume_once(*this, job);
    else
      to_scheduler(*this, job);
  }
}

void run_woken_actors_here(caf::actor_system& sys, deferrer defer) {
  this_thread_unit = std::make_shared<deferring_unit>(sys, std::move(defer));
}

void stop_running_here() {
  if (!this_thread_unit)
    return;
  // Whatever the loop did not run any more goes to the scheduler now,
  // while the actor system surely exists.
  auto unit = std::move(this_thread_unit);
  unit->flush();
}

caf::execution_unit* here() {
  return this_thread_unit.get();
}

} // namespace oncegate::inline_exec
