#include "replication/raft_fsm.hpp"

#include <algorithm>
#include <cstring>

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
}

#include "common/errc.hpp"
#include "common/logging.hpp"
#include "common/stage_trace.hpp"

namespace oncegate::cluster {

raft_fsm_adapter::raft_fsm_adapter(persistence::sqlite_store& db,
                                   bool async_snapshots)
  : db_(db), fsm_(std::make_unique<raft_fsm>()) {
  *fsm_ = raft_fsm{};
  fsm_->version = async_snapshots ? 3 : 2;
  fsm_->data = this;
  fsm_->apply = &raft_fsm_adapter::apply;
  fsm_->snapshot = &raft_fsm_adapter::snapshot;
  fsm_->restore = &raft_fsm_adapter::restore;
  fsm_->snapshot_finalize = &raft_fsm_adapter::snapshot_finalize;
  if (async_snapshots)
    fsm_->snapshot_async = &raft_fsm_adapter::snapshot_async;
}

raft_fsm_adapter::~raft_fsm_adapter() {
  // nop
}

raft_fsm* raft_fsm_adapter::fsm() {
  return fsm_.get();
}

void raft_fsm_adapter::attach(::raft* r) {
  raft_ = r;
}

void raft_fsm_adapter::on_applied(applied_hook fn) {
  on_applied_ = std::move(fn);
}

void raft_fsm_adapter::on_restored(std::function<void()> fn) {
  on_restored_ = std::move(fn);
}

void raft_fsm_adapter::before_snapshot_copy(std::function<bool()> fn) {
  before_copy_ = std::move(fn);
}

void raft_fsm_adapter::bound_log(uint64_t max_bytes, unsigned threshold,
                                 unsigned trailing) {
  max_log_bytes_ = max_bytes;
  threshold_ = std::max(threshold, 1u);
  trailing_ = trailing;
}

void raft_fsm_adapter::snapshot_soon() {
  if (lowered_ || raft_ == nullptr)
    return;
  // libraft takes a snapshot once the entries applied since the last one
  // reach the threshold, checked after each apply.
  auto since = raft_last_applied(raft_) - raft_->log.snapshot.last_index;
  auto threshold = std::clamp<uint64_t>(since, 1, std::max(threshold_, 1u));
  raft_set_snapshot_threshold(raft_, static_cast<unsigned>(threshold));
  lowered_ = true;
  log::cluster()->info("fsm.log_bytes_bound bytes={} entries={}", log_bytes_,
                       since);
}

void raft_fsm_adapter::recount_log() {
  auto& l = raft_->log;
  auto applied = raft_last_applied(raft_);
  auto n = l.back >= l.front ? l.back - l.front : l.size - l.front + l.back;
  uint64_t bytes = 0;
  for (std::size_t i = 0; i < n && l.offset + 1 + i <= applied; ++i)
    bytes += l.entries[(l.front + i) % l.size].buf.len;
  log_bytes_ = bytes;
  entries_ = applied - l.snapshot.last_index;
}

void raft_fsm_adapter::adjust_log_bounds() {
  if (max_log_bytes_ == 0 || raft_ == nullptr)
    return;
  if (log_bytes_ >= max_log_bytes_ / 4 * 3)
    snapshot_soon();
  if (avg_entry_ > 0) {
    auto fits = static_cast<double>(max_log_bytes_ / 4) / avg_entry_;
    auto trailing = static_cast<unsigned>(
      std::clamp(fits, 1.0, static_cast<double>(std::max(trailing_, 1u))));
    raft_set_snapshot_trailing(raft_, trailing);
  }
}

int raft_fsm_adapter::apply(::raft_fsm* fsm, const ::raft_buffer* buf,
                            void** result) {
  auto self = static_cast<raft_fsm_adapter*>(fsm->data);
  *result = nullptr;
  auto defer = self->defer_ && raft_state(self->raft_) != RAFT_LEADER;
  // The leader's state is whole before its entry applies; after a failed
  // write, nothing more queues up behind it.
  if ((!defer || self->flush_failed_) && self->flush())
    return RAFT_IOERR;
  self->log_bytes_ += buf->len;
  ++self->entries_;
  self->avg_entry_ = self->avg_entry_ == 0
                       ? static_cast<double>(buf->len)
                       : 0.99 * self->avg_entry_ + 0.01 * buf->len;
  self->adjust_log_bounds();
  // Inside apply, the entry's index is the last applied one plus one.
  auto index = static_cast<uint64_t>(raft_last_applied(self->raft_)) + 1;
  std::string_view entry{static_cast<const char*>(buf->base), buf->len};
  auto batch = persistence::decode_batch(entry);
  if (!batch) {
    ++self->failures_;
    log::cluster()->error("fsm.bad_entry index={} error={}", index,
                          describe(batch.error()));
    return 0; // every replica skips the same bad entry
  }
  if (defer) {
    self->deferred_.push_back({index, std::move(*batch)});
    return 0;
  }
  stage_trace::mark("fsm.apply", index);
  auto res = persistence::apply_batch(self->db_, index, *batch);
  stage_trace::mark("fsm.applied", index);
  if (!res) {
    ++self->failures_;
    log::cluster()->critical("fsm.apply_failed index={} error={}", index,
                             describe(res.error()));
    return RAFT_IOERR;
  }
  if (self->on_applied_ && !res->empty())
    self->on_applied_(index, *batch, *res);
  self->results_ = std::move(*res);
  *result = &self->results_;
  return 0;
}

bool raft_fsm_adapter::flush_due() const {
  return !flush_failed_ || std::chrono::steady_clock::now() >= retry_at_;
}

uint64_t raft_fsm_adapter::last_deferred() const {
  return deferred_.empty() ? 0 : deferred_.back().index;
}

caf::error raft_fsm_adapter::flush(uint64_t through) {
  // At most this many entries per transaction: a follower catching up
  // applies thousands in one turn.
  constexpr std::size_t max_per_transaction = 1024;
  while (!deferred_.empty() && deferred_.front().index <= through) {
    std::size_t n = 0;
    while (n < deferred_.size() && n < max_per_transaction
           && deferred_[n].index <= through)
      ++n;
    auto end = deferred_.begin() + static_cast<std::ptrdiff_t>(n);
    std::vector<persistence::log_entry> entries(
      std::make_move_iterator(deferred_.begin()), std::make_move_iterator(end));
    deferred_.erase(deferred_.begin(), end);
    stage_trace::mark("fsm.apply", entries.front().index);
    auto res = persistence::apply_entries(db_, entries);
    stage_trace::mark("fsm.applied", entries.back().index);
    if (!res) {
      ++failures_;
      flush_failed_ = true;
      using namespace std::chrono_literals;
      retry_delay_ = std::clamp<std::chrono::milliseconds>(2 * retry_delay_,
                                                           50ms, 5000ms);
      retry_at_ = std::chrono::steady_clock::now() + retry_delay_;
      log::cluster()->critical("fsm.apply_failed index={}..{} error={} "
                               "(retried in {} ms)",
                               entries.front().index, entries.back().index,
                               describe(res.error()), retry_delay_.count());
      deferred_.insert(deferred_.begin(),
                       std::make_move_iterator(entries.begin()),
                       std::make_move_iterator(entries.end()));
      return std::move(res.error());
    }
    flush_failed_ = false;
    retry_delay_ = std::chrono::milliseconds{0};
    if (on_applied_)
      for (std::size_t i = 0; i < entries.size(); ++i)
        if (!(*res)[i].empty())
          on_applied_(entries[i].index, entries[i].batch, (*res)[i]);
  }
  return {};
}

// libraft takes a snapshot at `raft_last_applied`, which the writer has
// committed once the deferred entries are: a read transaction begun then
// sees exactly that state. Failures answer RAFT_BUSY, which libraft
// retries after the next entry; any other error would stop the node.
int raft_fsm_adapter::snapshot(::raft_fsm* fsm, ::raft_buffer* bufs[],
                               unsigned* n) {
  auto self = static_cast<raft_fsm_adapter*>(fsm->data);
  *bufs = nullptr;
  *n = 0;
  auto index = raft_last_applied(self->raft_);
  if (self->flush())
    return RAFT_BUSY;
  if (!self->snapshot_db_) {
    auto db = persistence::sqlite_store::open_reader(self->db_.options());
    if (!db) {
      log::cluster()->error("fsm.snapshot_failed index={} error={}", index,
                            describe(db.error()));
      return RAFT_BUSY;
    }
    self->snapshot_db_ = std::move(*db);
  }
  auto applied = self->snapshot_db_->begin_read();
  if (!applied) {
    log::cluster()->error("fsm.snapshot_failed index={} error={}", index,
                          describe(applied.error()));
    return RAFT_BUSY;
  }
  self->pinned_ = true;
  // The database numbers command entries only: barriers and configuration
  // changes after the last command leave it behind libraft's index.
  log::cluster()->debug("fsm.snapshot index={} applied_index={}", index,
                        *applied);
  if (self->fsm_->snapshot_async != nullptr)
    return 0; // copied by snapshot_async
  return self->copy_pinned(bufs, n) ? 0 : RAFT_BUSY;
}

int raft_fsm_adapter::snapshot_async(::raft_fsm* fsm, ::raft_buffer* bufs[],
                                     unsigned* n) {
  auto self = static_cast<raft_fsm_adapter*>(fsm->data);
  if (self->before_copy_ && !self->before_copy_())
    return RAFT_IOERR;
  return self->copy_pinned(bufs, n) ? 0 : RAFT_IOERR;
}

bool raft_fsm_adapter::copy_pinned(::raft_buffer* bufs[], unsigned* n) {
  // Straight into libraft's buffer: the database is in memory twice at the
  // peak (SQLite's serialisation and this copy), once afterwards.
  void* base = nullptr;
  auto size = snapshot_db_->snapshot_image([&base](std::size_t n) {
    base = raft_malloc(n > 0 ? n : 1);
    return base;
  });
  snapshot_db_->rollback();
  pinned_ = false;
  if (!size) {
    raft_free(base);
    log::cluster()->error("fsm.snapshot_failed error={}",
                          describe(size.error()));
    return false;
  }
  auto array = static_cast<::raft_buffer*>(raft_malloc(sizeof(::raft_buffer)));
  if (array == nullptr) {
    raft_free(base);
    log::cluster()->error("fsm.snapshot_failed error=out_of_memory");
    return false;
  }
  array[0].base = base;
  array[0].len = *size;
  *bufs = array;
  *n = 1;
  return true;
}

// Runs after every snapshot that `snapshot` began, on the loop thread: the
// buffers are ours to free (version 2 and later).
int raft_fsm_adapter::snapshot_finalize(::raft_fsm* fsm, ::raft_buffer* bufs[],
                                        unsigned* n) {
  auto self = static_cast<raft_fsm_adapter*>(fsm->data);
  if (self->pinned_) { // libraft gave up before the copy ran
    self->snapshot_db_->rollback();
    self->pinned_ = false;
  }
  if (*bufs != nullptr) {
    ++self->snapshots_;
    // libraft trimmed its log to the trailing entries and those applied
    // after the snapshot's index (all of them when the snapshot was slow):
    // counted, not estimated. Still past three quarters: another snapshot.
    self->recount_log();
    if (self->lowered_) {
      raft_set_snapshot_threshold(self->raft_, self->threshold_);
      self->lowered_ = false;
    }
    self->adjust_log_bounds();
    log::cluster()->debug("fsm.snapshot_done bytes={}", (*bufs)[0].len);
    for (unsigned i = 0; i < *n; ++i)
      raft_free((*bufs)[i].base);
    raft_free(*bufs);
  }
  *bufs = nullptr;
  *n = 0;
  return 0;
}

// On success the buffer is ours to free; on failure libraft frees it.
int raft_fsm_adapter::restore(::raft_fsm* fsm, ::raft_buffer* buf) {
  auto self = static_cast<raft_fsm_adapter*>(fsm->data);
  std::string_view image{static_cast<const char*>(buf->base), buf->len};
  if (auto err = self->db_.restore_image(image)) {
    ++self->failures_;
    log::cluster()->critical("fsm.restore_failed bytes={} error={}",
                             buf->len, describe(err));
    return RAFT_IOERR;
  }
  raft_free(buf->base);
  // libraft installs a snapshot past everything it applied: the image
  // holds what was queued.
  self->deferred_.clear();
  self->flush_failed_ = false;
  ++self->restores_;
  // libraft restores a snapshot into an empty log (at start, or discarding
  // the whole log to install the leader's): entries applied after it count
  // again from nothing.
  self->log_bytes_ = 0;
  self->entries_ = 0;
  auto applied = self->db_.applied_index();
  log::cluster()->info("fsm.restored bytes={} applied_index={}", image.size(),
                       applied ? *applied : 0);
  if (self->on_restored_)
    self->on_restored_();
  return 0;
}

} // namespace oncegate::cluster
