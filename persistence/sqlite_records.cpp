// Records and decisions: claims (the one rule decides, common/record.hpp),
// transitions, listings, doubts, purges and the reads beside them.
#include "persistence/sqlite_store.hpp"
#include "common/enum_text.hpp"
#include "common/errc.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "persistence/sqlite_store_impl.hpp"

namespace oncegate::persistence {

using namespace detail;

namespace {

// What a cap (`max-new-per-minute`) counts: the grants of the last minute
// of the store's clock.
constexpr int64_t cap_window_ms = 60'000;

} // namespace

record sqlite_store::impl::read_record(sqlite3_stmt* st,
                                       const std::string& route,
                                       const std::string& key) {
  record rec;
  rec.route = route;
  rec.key = key;
  rec.state = static_cast<record_state>(sqlite3_column_int(st, 0));
  rec.fingerprint = column_blob(st, 1);
  rec.first_seen_ms = sqlite3_column_int64(st, 2);
  rec.expires_at_ms = sqlite3_column_int64(st, 3);
  rec.status = static_cast<uint16_t>(sqlite3_column_int(st, 4));
  rec.response = column_blob(st, 5);
  rec.signal = column_blob(st, 6);
  rec.headers = column_blob(st, 7);
  rec.owner = static_cast<uint64_t>(sqlite3_column_int64(st, 8));
  rec.request_id = static_cast<uint64_t>(sqlite3_column_int64(st, 9));
  rec.attempts = static_cast<uint32_t>(sqlite3_column_int64(st, 10));
  rec.next_attempt_ms = sqlite3_column_int64(st, 11);
  rec.deliver_by_ms = sqlite3_column_int64(st, 12);
  rec.signal_type = column_blob(st, 13);
  rec.reconciles = static_cast<uint32_t>(sqlite3_column_int64(st, 14));
  return rec;
}

caf::expected<claim_result> sqlite_store::claim(const claim_request& req,
                                                int64_t now_ms) {
  auto db = impl_->db;
  claim_result result;
  auto bind_new = [&](sqlite3_stmt* st, const record& rec) {
    bind_text(st, 1, rec.route);
    bind_text(st, 2, rec.key);
    sqlite3_bind_int(st, 3, static_cast<int>(rec.state));
    bind_blob(st, 4, rec.fingerprint);
    sqlite3_bind_int64(st, 5, rec.first_seen_ms);
    sqlite3_bind_int64(st, 6, rec.expires_at_ms);
    sqlite3_bind_int(st, 7, rec.status);
    bind_blob(st, 8, rec.response);
    bind_blob(st, 9, rec.signal);
    bind_blob(st, 10, rec.headers);
    sqlite3_bind_int64(st, 11, static_cast<int64_t>(rec.owner));
    sqlite3_bind_int64(st, 12, static_cast<int64_t>(rec.request_id));
    sqlite3_bind_int64(st, 13, rec.attempts);
    sqlite3_bind_int64(st, 14, rec.next_attempt_ms);
    sqlite3_bind_int64(st, 15, rec.deliver_by_ms);
    bind_blob(st, 16, rec.signal_type);
    sqlite3_bind_int64(st, 17, rec.reconciles);
  };
  // Writes `result.rec` with statement `id` (the changes stay readable
  // after the guard reset it).
  // A claim's answer is the decision and its record's metadata, never the
  // request body: the HTTP side has the body it sent, and in a cluster the
  // answer crosses the network (the body stays in the store: `load`).
  auto answer = [&]() -> caf::expected<claim_result> {
    result.rec.signal = std::string{};
    return std::move(result);
  };
  auto write = [&](stmt_id id, const char* what) -> caf::error {
    auto st = impl_->stmts[id];
    stmt_guard guard{st};
    bind_new(st, result.rec);
    if (sqlite3_step(st) != SQLITE_DONE)
      return sqlite_error(db, what);
    return caf::none;
  };
  // A pause and the guards (common/record.hpp) may refuse a new record;
  // they never change any other answer.
  auto refusal = impl_->refusal_of(req, now_ms);
  if (!refusal)
    return std::move(refusal.error());
  if (!*refusal) {
    result.rec = make_record(req, now_ms);
    if (auto err = write(stmt_insert_new, "insert record"))
      return err;
    if (sqlite3_changes(db) == 1) {
      result.outcome = decision::accepted;
      if (auto err = impl_->count_grant(req, now_ms))
        return err;
      return answer();
    }
  }
  bool existed = false;
  {
    auto st = impl_->stmts[stmt_select_record];
    stmt_guard guard{st};
    bind_text(st, 1, req.route);
    bind_text(st, 2, req.key);
    switch (sqlite3_step(st)) {
      case SQLITE_ROW:
        existed = true;
        result.rec = impl::read_record(st, req.route, req.key);
        break;
      case SQLITE_DONE:
        break;
      default:
        return sqlite_error(db, "select record");
    }
  }
  std::optional<holder> h;
  if (existed)
    h = holder_of(result.rec);
  // The one rule decides (common/record.hpp); the store writes when the
  // key is free: no record, or a dead one replaced.
  auto d = *decide(h ? &*h : nullptr, req.fingerprint, req.request_id,
                   req.owner, now_ms, *refusal);
  result.outcome = d;
  if (refused(d)) {
    // Nothing written: the answer names the key only.
    result.rec = record{};
    result.rec.route = req.route;
    result.rec.key = req.key;
    return answer();
  }
  if (d != decision::renewed && (d != decision::accepted || existed))
    return answer(); // duplicate, mismatch, or the same attempt asking again
  result.rec = make_record(req, now_ms);
  if (auto err = write(stmt_upsert_record, "replace record"))
    return err;
  if (auto err = impl_->count_grant(req, now_ms))
    return err;
  return answer();
}

caf::expected<std::optional<decision>>
sqlite_store::impl::refusal_of(const claim_request& req, int64_t now_ms) {
  {
    auto st = stmts[stmt_paused];
    stmt_guard guard{st};
    bind_text(st, 1, req.route);
    switch (sqlite3_step(st)) {
      case SQLITE_ROW:
        return std::optional<decision>{decision::paused};
      case SQLITE_DONE:
        break;
      default:
        return sqlite_error(db, "paused");
    }
  }
  auto& guards = req.guards;
  if (guards.stale)
    return std::optional<decision>{decision::stale};
  if (guards.max_new_per_minute == 0)
    return std::optional<decision>{};
  auto st = stmts[stmt_count_grants];
  stmt_guard guard{st};
  bind_text(st, 1, req.route);
  bind_text(st, 2, guards.cap_scope);
  sqlite3_bind_int64(st, 3, now_ms - cap_window_ms);
  if (sqlite3_step(st) != SQLITE_ROW)
    return sqlite_error(db, "count grants");
  if (sqlite3_column_int64(st, 0) >= guards.max_new_per_minute)
    return std::optional<decision>{decision::rate_limited};
  return std::optional<decision>{};
}

caf::error sqlite_store::impl::count_grant(const claim_request& req,
                                           int64_t now_ms) {
  if (req.guards.max_new_per_minute == 0)
    return caf::none;
  {
    auto st = stmts[stmt_trim_grants];
    stmt_guard guard{st};
    sqlite3_bind_int64(st, 1, now_ms - cap_window_ms);
    sqlite3_bind_int64(st, 2, 64);
    if (sqlite3_step(st) != SQLITE_DONE)
      return sqlite_error(db, "trim grants");
  }
  auto st = stmts[stmt_insert_grant];
  stmt_guard guard{st};
  bind_text(st, 1, req.route);
  bind_text(st, 2, req.guards.cap_scope);
  sqlite3_bind_int64(st, 3, now_ms);
  if (sqlite3_step(st) != SQLITE_DONE)
    return sqlite_error(db, "insert grant");
  return caf::none;
}

caf::expected<update_result> sqlite_store::update(const record_update& upd,
                                                  int64_t now_ms) {
  // Only a final HTTP answer is an outcome, and 204/304 carry no body: an
  // outcome that breaks this (an older or buggy peer) is not applied.
  if (upd.op == transition::complete
      && (upd.status < 200 || upd.status > 599
          || ((upd.status == 204 || upd.status == 304)
              && !upd.response.empty()))) {
    update_result refused;
    auto current = load(upd.route, upd.key);
    if (!current)
      return std::move(current.error());
    refused.current = std::move(*current);
    return refused;
  }
  // One statement per transition, indexed by it; an out-of-range value (a
  // cast from an untrusted integer) changes nothing.
  static constexpr stmt_id by_transition[] = {
    stmt_complete, stmt_release,       stmt_mark_in_doubt, stmt_release_settled,
    stmt_defer,    stmt_start_attempt, stmt_fail,          stmt_redeliver,
    stmt_requeue,  stmt_reconcile_wait};
  static_assert(enum_table_covers(transition::reconcile_wait, by_transition));
  auto op = static_cast<uint8_t>(upd.op);
  if (op >= std::size(by_transition))
    return make_error(errc::invalid_argument, "unknown transition");
  stmt_id id = by_transition[op];
  // The delivery transitions judge time by the proposer's clock, never
  // below the store's.
  auto at = std::max(now_ms, upd.now_ms);
  {
    auto st = impl_->stmts[id];
    stmt_guard guard{st};
    bind_text(st, 1, upd.route);
    bind_text(st, 2, upd.key);
    sqlite3_bind_int64(st, 3, upd.first_seen_ms);
    switch (upd.op) {
      case transition::complete:
        // Its own numbering (written first; kept as it was).
        sqlite3_bind_int(st, 3, upd.status);
        bind_blob(st, 4, upd.response);
        sqlite3_bind_int64(st, 5, upd.first_seen_ms);
        bind_blob(st, 6, upd.headers);
        sqlite3_bind_int64(st, 7, static_cast<int64_t>(upd.request_id));
        sqlite3_bind_int64(st, 8, now_ms);
        break;
      case transition::defer:
        sqlite3_bind_int64(st, 4, static_cast<int64_t>(upd.request_id));
        sqlite3_bind_int64(st, 5, upd.attempt);
        sqlite3_bind_int64(st, 6, upd.next_attempt_ms);
        sqlite3_bind_int64(st, 7, at);
        break;
      case transition::start_attempt:
        sqlite3_bind_int64(st, 4, static_cast<int64_t>(upd.request_id));
        sqlite3_bind_int64(st, 5, upd.attempt);
        sqlite3_bind_int64(st, 6, static_cast<int64_t>(upd.owner));
        sqlite3_bind_int64(st, 7, at);
        break;
      case transition::fail:
        sqlite3_bind_int64(st, 4, at);
        break;
      case transition::redeliver:
        sqlite3_bind_int64(st, 4, upd.deliver_by_ms);
        sqlite3_bind_int64(st, 5, at);
        break;
      case transition::requeue:
        sqlite3_bind_int64(st, 4, at);
        sqlite3_bind_int64(st, 5, upd.deliver_by_ms);
        break;
      case transition::reconcile_wait:
        sqlite3_bind_int64(st, 4, upd.next_attempt_ms);
        break;
      default:
        sqlite3_bind_int64(st, 4, static_cast<int64_t>(upd.request_id));
        break;
    }
    if (sqlite3_step(st) != SQLITE_DONE)
      return sqlite_error(impl_->db, statements[id]);
  }
  update_result result;
  result.applied = sqlite3_changes(impl_->db) > 0;
  auto current = load(upd.route, upd.key);
  if (!current)
    return std::move(current.error());
  result.current = std::move(*current);
  return result;
}

caf::expected<record_page> sqlite_store::list(const std::string& route,
                                              record_state state,
                                              const std::string& after,
                                              uint32_t limit) {
  auto st = impl_->stmts[stmt_list_state];
  stmt_guard guard{st};
  bind_text(st, 1, route);
  sqlite3_bind_int(st, 2, static_cast<int>(state));
  bind_text(st, 3, after);
  sqlite3_bind_int64(st, 4, static_cast<int64_t>(limit) + 1);
  record_page page;
  for (;;) {
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
      break;
    if (rc != SQLITE_ROW)
      return sqlite_error(impl_->db, "list records");
    auto key = column_blob(st, 15);
    if (page.records.size() == limit) {
      page.next_after = page.records.back().key;
      break;
    }
    page.records.push_back(impl::read_record(st, route, key));
  }
  return page;
}

caf::expected<uint64_t> sqlite_store::doubt(uint64_t owner,
                                            int64_t before_ms) {
  auto st = impl_->stmts[stmt_doubt];
  sqlite3_bind_int64(st, 1, static_cast<int64_t>(owner));
  sqlite3_bind_int64(st, 2, before_ms);
  if (auto err = impl_->step_done(stmt_doubt))
    return err;
  return static_cast<uint64_t>(sqlite3_changes(impl_->db));
}

caf::expected<uint64_t> sqlite_store::doubt_in_flight() {
  return doubt(0, std::numeric_limits<int64_t>::max());
}

caf::expected<lookup_result> sqlite_store::load(const std::string& route,
                                                const std::string& key) {
  auto st = impl_->stmts[stmt_select_record];
  stmt_guard guard{st};
  bind_text(st, 1, route);
  bind_text(st, 2, key);
  lookup_result result;
  switch (sqlite3_step(st)) {
    case SQLITE_ROW:
      result.found = true;
      result.rec = impl::read_record(st, route, key);
      return result;
    case SQLITE_DONE:
      return result;
    default:
      return sqlite_error(impl_->db, "load record");
  }
}

caf::expected<uint64_t> sqlite_store::purge(int64_t now_ms, uint32_t limit) {
  auto st = impl_->stmts[stmt_purge];
  stmt_guard guard{st};
  sqlite3_bind_int64(st, 1, now_ms);
  sqlite3_bind_int64(st, 2, limit);
  if (sqlite3_step(st) != SQLITE_DONE)
    return sqlite_error(impl_->db, "purge");
  return static_cast<uint64_t>(sqlite3_changes(impl_->db));
}

caf::expected<int64_t> sqlite_store::next_expiry() {
  auto st = impl_->stmts[stmt_next_expiry];
  stmt_guard guard{st};
  if (sqlite3_step(st) != SQLITE_ROW)
    return sqlite_error(impl_->db, "next expiry");
  if (sqlite3_column_type(st, 0) == SQLITE_NULL)
    return int64_t{-1};
  return sqlite3_column_int64(st, 0);
}

caf::expected<std::vector<record>> sqlite_store::due(int64_t now_ms,
                                                     uint32_t limit) {
  auto st = impl_->stmts[stmt_due];
  stmt_guard guard{st};
  sqlite3_bind_int64(st, 1, now_ms);
  sqlite3_bind_int64(st, 2, limit);
  std::vector<record> out;
  for (;;) {
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
      return out;
    if (rc != SQLITE_ROW)
      return sqlite_error(impl_->db, "due records");
    out.push_back(impl::read_record(st, column_blob(st, 15),
                                    column_blob(st, 16)));
  }
}

caf::expected<int64_t> sqlite_store::next_delivery() {
  auto st = impl_->stmts[stmt_next_delivery];
  stmt_guard guard{st};
  if (sqlite3_step(st) != SQLITE_ROW)
    return sqlite_error(impl_->db, "next delivery");
  if (sqlite3_column_type(st, 0) == SQLITE_NULL)
    return int64_t{-1};
  return sqlite3_column_int64(st, 0);
}

caf::error sqlite_store::pause(const std::string& route, pause_op op,
                               int64_t now_ms) {
  if (op == pause_op::read)
    return caf::none;
  if (op == pause_op::pause) {
    auto current = pauses();
    if (!current)
      return std::move(current.error());
    if (current->size() >= max_pauses)
      return make_error(errc::invalid_argument,
                        "at most " + std::to_string(max_pauses)
                          + " routes are paused at once");
  }
  auto id = op == pause_op::pause ? stmt_pause : stmt_resume;
  auto st = impl_->stmts[id];
  stmt_guard guard{st};
  bind_text(st, 1, route);
  if (op == pause_op::pause)
    sqlite3_bind_int64(st, 2, now_ms);
  if (sqlite3_step(st) != SQLITE_DONE)
    return sqlite_error(impl_->db, op == pause_op::pause ? "pause" : "resume");
  return caf::none;
}

caf::expected<route_pauses> sqlite_store::pauses() {
  auto st = impl_->stmts[stmt_list_pauses];
  stmt_guard guard{st};
  sqlite3_bind_int64(st, 1, static_cast<int64_t>(max_pauses));
  route_pauses out;
  for (;;) {
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
      return out;
    if (rc != SQLITE_ROW)
      return sqlite_error(impl_->db, "paused routes");
    out.push_back(route_pause{column_blob(st, 0), sqlite3_column_int64(st, 1)});
  }
}

caf::expected<uint64_t> sqlite_store::count() {
  auto st = impl_->stmts[stmt_count];
  stmt_guard guard{st};
  if (sqlite3_step(st) != SQLITE_ROW)
    return sqlite_error(impl_->db, "count");
  return static_cast<uint64_t>(sqlite3_column_int64(st, 0));
}

caf::expected<std::vector<unsettled_count>> sqlite_store::unsettled() {
  auto st = impl_->stmts[stmt_unsettled];
  stmt_guard guard{st};
  std::vector<unsettled_count> result;
  for (;;) {
    auto rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
      return result;
    if (rc != SQLITE_ROW)
      return sqlite_error(impl_->db, "count unsettled records");
    unsettled_count x;
    x.route = column_blob(st, 0);
    x.state = static_cast<record_state>(sqlite3_column_int(st, 1));
    x.count = static_cast<uint64_t>(sqlite3_column_int64(st, 2));
    result.push_back(std::move(x));
  }
}

} // namespace oncegate::persistence
