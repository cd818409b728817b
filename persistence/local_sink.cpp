#include "persistence/local_sink.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <exception>
#include <string>
#include <utility>

#include <pthread.h>

#include "common/errc.hpp"
#include "common/inline_execution.hpp"
#include "common/logging.hpp"
#include "persistence/sqlite_store.hpp"

namespace oncegate::persistence {

namespace {

// Set on the sink's thread: a batch handed over there is queued, never
// applied inside the store's turn.
thread_local bool on_sink_thread = false;

} // namespace

struct local_sink::committer {
  struct job {
    std::vector<command> batch;
    commit_callback done;
  };

  std::shared_ptr<sqlite_store> db;
  // Only the thread that applies a batch touches it (handed over under
  // `mtx`: one batch is applied at a time, in order).
  uint64_t next_index = 1;
  caf::actor_system* sys = nullptr;
  mutable std::mutex mtx;
  std::condition_variable cv;
  std::deque<job> jobs;
  /// The sink's thread is applying a batch.
  bool busy = false;
  bool stopping = false;
  uint64_t own_commits = 0;

  batch_outcome apply(std::vector<command>& batch) {
    auto results = apply_batch(*db, next_index, batch);
    if (results && results->size() != batch.size())
      results = make_error(errc::storage_failure,
                           "batch " + std::to_string(next_index)
                             + " was applied before");
    if (!results) {
      log::store()->error("store.commit_failed batch={} error={}",
                          batch.size(), describe(results.error()));
      return results;
    }
    ++next_index;
    return results;
  }

  static void run(std::shared_ptr<committer> self);
};

local_sink::local_sink(std::shared_ptr<sqlite_store> db,
                       std::shared_ptr<sqlite_store> reader,
                       caf::actor_system* sys)
  : reader_(std::move(reader)), sys_(sys),
    c_(std::make_shared<committer>()) {
  c_->db = std::move(db);
  c_->sys = sys;
  // Continue the numbering where the file left it.
  if (auto applied = c_->db->applied_index())
    c_->next_index = *applied + 1;
  if (reader_)
    thread_ = std::thread{[c = c_] { committer::run(c); }};
}

local_sink::~local_sink() {
  if (!thread_.joinable())
    return;
  {
    std::lock_guard<std::mutex> guard{c_->mtx};
    c_->stopping = true;
  }
  c_->cv.notify_one();
  // Destroyed on its own thread (the store exited in a turn it ran there):
  // it applies what it holds and ends on its own.
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();
  else
    thread_.join();
}

sink_traits local_sink::traits() const {
  // One batch at a time (see the class), unbounded in bytes (nothing keeps
  // a batch in memory after COMMIT), and what is queued at exit still
  // commits: all of it where the store commits itself, the batch it holds
  // where the sink's thread does (the store then fails what it queued
  // behind it unsent; at exit the HTTP requests are all answered).
  sink_traits res;
  res.max_in_flight = 1;
  res.settle_where_learnt = reader_ && sys_;
  return res;
}

sqlite_store& local_sink::reader() {
  return reader_ ? *reader_ : *c_->db;
}

int64_t local_sink::stamp(int64_t requested_ms) {
  return requested_ms;
}

caf::error local_sink::refusal() {
  return {};
}

std::optional<batch_outcome> local_sink::commit(std::vector<command>& batch,
                                                commit_callback done) {
  if (!reader_)
    return c_->apply(batch);
  {
    std::lock_guard<std::mutex> guard{c_->mtx};
    // Here only with nothing ahead of it (batches are numbered in order;
    // the store waits for each outcome, but the sink does not rely on it);
    // the store hands no other batch over before this call returns.
    if (on_sink_thread || !inline_exec::here() || c_->busy
        || !c_->jobs.empty()) {
      c_->jobs.push_back(committer::job{std::move(batch), std::move(done)});
      c_->cv.notify_one();
      return std::nullopt;
    }
  }
  return c_->apply(batch);
}

uint64_t local_sink::committed_on_own_thread() const {
  std::lock_guard<std::mutex> guard{c_->mtx};
  return c_->own_commits;
}

void local_sink::committer::run(std::shared_ptr<committer> self) {
  on_sink_thread = true;
  // Its own name in `top -H` and /proc (bench/threads.sh).
  pthread_setname_np(pthread_self(), "oncegate.commit");
  // What the outcomes wake (the store) runs here after each callback.
  std::vector<std::function<void()>> woken;
  if (self->sys)
    inline_exec::run_woken_actors_here(
      *self->sys, [&woken](std::function<void()> fn) {
        woken.push_back(std::move(fn));
      });
  struct unhook {
    bool on;
    ~unhook() {
      if (on)
        inline_exec::stop_running_here();
    }
  } unhooking{self->sys != nullptr};
  std::unique_lock<std::mutex> guard{self->mtx};
  for (;;) {
    self->cv.wait(guard,
                  [&] { return !self->jobs.empty() || self->stopping; });
    if (self->jobs.empty())
      return; // stopping, nothing held
    auto next = std::move(self->jobs.front());
    self->jobs.pop_front();
    self->busy = true;
    guard.unlock();
    batch_outcome out = make_error(errc::storage_failure, "not applied");
    try {
      out = self->apply(next.batch);
    } catch (const std::exception& e) {
      // No actor around to catch it (on the HTTP thread or a worker CAF
      // would): the batch fails as a failed COMMIT does, not the process.
      self->db->rollback();
      out = make_error(errc::storage_failure,
                       std::string{"commit threw: "} + e.what());
    }
    guard.lock();
    self->busy = false;
    ++self->own_commits;
    // Nothing of the writer is touched after this: the next batch may be
    // applied by another thread as soon as the store learns the outcome.
    guard.unlock();
    next.done(std::move(out));
    next.done = nullptr;
    for (size_t i = 0; i < woken.size(); ++i)
      woken[i]();
    woken.clear();
    guard.lock();
  }
}

} // namespace oncegate::persistence
