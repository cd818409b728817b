#include "persistence/command.hpp"

#include <algorithm>
#include <cstring>

#include "common/errc.hpp"
#include "persistence/codec.hpp"
#include "persistence/sqlite_store.hpp"

namespace oncegate::persistence {

namespace {

// "OGC3": claims carry owner and request id, updates a request id, and
// doubts exist. "OGC1" and "OGC2" entries were never written to a Raft log
// of a released build, so they are refused like any other unknown format.
constexpr uint32_t batch_magic_v3 = 0x3343474F;
// "OGC4": OGC3, plus durable delivery (claims carry a delivery deadline and
// the request's Content-Type; updates an attempt, its node, the proposer's
// time, the next attempt's time and a deadline; the delivery transitions).
// A batch is written as OGC3 unless a command needs OGC4, so that nodes of
// the build before can still read the log of a cluster that does not use
// durable delivery (docs/operations.md, "Upgrades").
constexpr uint32_t batch_magic_v4 = 0x3443474F;
// "OGC5": OGC4, plus every claim's guards (stale, a cap and its scope),
// and pauses. Written only when a batch holds a guarded claim or a pause:
// a cluster whose routes set no `max-age` and no cap, and that pauses
// nothing, writes what the build before reads.
constexpr uint32_t batch_magic_v5 = 0x3543474F;

bool needs_v5(const command& cmd) {
  return (cmd.type == command::kind::claim && used(cmd.claim.guards))
         || cmd.type == command::kind::pause;
}

// The fields of the commands in a batch of format `magic`.
codec::format format_of(uint32_t magic) {
  bool v4 = magic != batch_magic_v3;
  auto guards = magic == batch_magic_v5 ? codec::guard_fields::present
                                        : codec::guard_fields::none;
  return codec::format{v4, false, guards};
}

bool needs_v4(const command& cmd) {
  switch (cmd.type) {
    case command::kind::claim:
      return uses_delivery(cmd.claim);
    case command::kind::update:
      return uses_delivery(cmd.update);
    default:
      return false;
  }
}

caf::error malformed(const char* what) {
  return make_error(errc::invalid_argument,
                    std::string{"malformed log entry: "} + what);
}

} // namespace

std::size_t encoded_size(const command& cmd) {
  switch (cmd.type) {
    case command::kind::claim: {
      auto& c = cmd.claim;
      // OGC4's and OGC5's fields counted always: an upper bound.
      return 1 + 6 * 4 + c.route.size() + c.key.size() + c.fingerprint.size()
             + c.headers.size() + c.response.size() + c.signal.size() + 8 * 4
             + 1 + 2 + 8 + 4 + c.signal_type.size() + 1 + 4 + 4
             + c.guards.cap_scope.size();
    }
    case command::kind::update: {
      auto& u = cmd.update;
      return 1 + 4 * 4 + u.route.size() + u.key.size() + u.headers.size()
             + u.response.size() + 1 + 8 + 2 + 8 + 4 + 8 * 4;
    }
    case command::kind::purge:
      return 1 + 8 + 4;
    case command::kind::doubt:
      return 1 + 8 + 8;
    case command::kind::pause:
      return 1 + 4 + cmd.route.size() + 1 + 8;
  }
  return 0;
}

std::string encode_batch(const std::vector<command>& batch) {
  uint32_t magic = batch_magic_v3;
  if (std::any_of(batch.begin(), batch.end(), needs_v5))
    magic = batch_magic_v5;
  else if (std::any_of(batch.begin(), batch.end(), needs_v4))
    magic = batch_magic_v4;
  auto fmt = format_of(magic);
  codec::writer w;
  w.u32(magic);
  w.u32(static_cast<uint32_t>(batch.size()));
  for (auto& cmd : batch) {
    w.u8(static_cast<uint8_t>(cmd.type));
    switch (cmd.type) {
      case command::kind::claim:
        codec::write(w, cmd.claim, fmt);
        break;
      case command::kind::update:
        codec::write(w, cmd.update, fmt);
        break;
      case command::kind::purge:
        w.i64(cmd.now_ms);
        w.u32(cmd.limit);
        break;
      case command::kind::doubt:
        w.u64(cmd.owner);
        w.i64(cmd.before_ms);
        break;
      case command::kind::pause:
        w.str(cmd.route);
        w.u8(static_cast<uint8_t>(cmd.pause));
        w.i64(cmd.now_ms);
        break;
    }
  }
  return w.finish();
}

caf::expected<std::vector<command>> decode_batch(std::string_view entry) {
  if (entry.size() % 8 != 0)
    return malformed("length is not a multiple of 8");
  codec::reader r{entry};
  uint32_t magic = 0;
  uint32_t count = 0;
  if (!r.u32(magic)
      || (magic != batch_magic_v3 && magic != batch_magic_v4
          && magic != batch_magic_v5))
    return malformed("bad magic");
  auto log_format = format_of(magic);
  // Every command takes at least one byte: a count beyond the size is a lie.
  if (!r.u32(count) || count > entry.size())
    return malformed("bad count");
  std::vector<command> result;
  result.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    command cmd;
    uint8_t kind = 0;
    if (!r.u8(kind))
      return malformed("truncated");
    bool ok = true;
    switch (kind) {
      case static_cast<uint8_t>(command::kind::claim):
        cmd.type = command::kind::claim;
        ok = codec::read(r, cmd.claim, log_format);
        break;
      case static_cast<uint8_t>(command::kind::update):
        cmd.type = command::kind::update;
        ok = codec::read(r, cmd.update, log_format);
        break;
      case static_cast<uint8_t>(command::kind::purge):
        cmd.type = command::kind::purge;
        ok = r.i64(cmd.now_ms) && r.u32(cmd.limit);
        break;
      case static_cast<uint8_t>(command::kind::doubt):
        cmd.type = command::kind::doubt;
        ok = r.u64(cmd.owner) && r.i64(cmd.before_ms);
        break;
      case static_cast<uint8_t>(command::kind::pause):
        // Only in OGC5; a pause that reads nothing is not written.
        cmd.type = command::kind::pause;
        ok = magic == batch_magic_v5
             && r.str(cmd.route, record_bounds::route, "route size")
             && r.enumeration(cmd.pause, pause_op::resume, "pause")
             && cmd.pause != pause_op::read && r.i64(cmd.now_ms);
        break;
      default:
        return malformed("unknown command");
    }
    if (!ok)
      return malformed("truncated or invalid command");
    result.push_back(std::move(cmd));
  }
  if (!r.at_padding())
    return malformed("trailing bytes");
  return result;
}

int64_t leader_stamp(const std::vector<command>& batch) {
  int64_t stamp = 0;
  for (auto& cmd : batch) {
    if (cmd.type == command::kind::claim)
      stamp = std::max(stamp, cmd.claim.now_ms);
    else if (cmd.type == command::kind::purge
             || cmd.type == command::kind::pause)
      stamp = std::max(stamp, cmd.now_ms);
  }
  return stamp;
}

namespace {

// Entry `index` inside the caller's transaction: its commands, the store's
// clock and the applied index; `skipped` when it was applied before. An
// error leaves the transaction to be rolled back.
caf::expected<std::vector<command_result>>
apply_in_transaction(sqlite_store& db, uint64_t index,
                     const std::vector<command>& batch, bool& skipped) {
  std::vector<command_result> results;
  auto applied = db.applied_index();
  if (!applied)
    return std::move(applied.error());
  skipped = index <= *applied;
  if (skipped)
    return results;
  // The store's clock: the latest time a claim or purge carried, never
  // moving backwards. Every replica computes it from the same entries, so they all
  // decide at the same time; a proposer whose clock is behind (a new leader,
  // a clock stepped back) cannot make records live longer or shorter than
  // they were decided, and one that is ahead moves time forward for all.
  auto clock = db.clock_ms();
  if (!clock)
    return std::move(clock.error());
  auto now = *clock;
  auto start_clock = now;
  results.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    auto& cmd = batch[i];
    switch (cmd.type) {
      case command::kind::claim: {
        now = std::max(now, cmd.claim.now_ms);
        auto res = db.claim(cmd.claim, now);
        if (!res)
          return std::move(res.error());
        results[i].claim = std::move(*res);
        break;
      }
      case command::kind::update: {
        now = std::max(now, cmd.update.now_ms);
        auto res = db.update(cmd.update, now);
        if (!res)
          return std::move(res.error());
        results[i].update = std::move(*res);
        break;
      }
      case command::kind::purge: {
        now = std::max(now, cmd.now_ms);
        auto res = db.purge(now, cmd.limit);
        if (!res)
          return std::move(res.error());
        results[i].purged = *res;
        break;
      }
      case command::kind::doubt: {
        auto res = db.doubt(cmd.owner, cmd.before_ms);
        if (!res)
          return std::move(res.error());
        results[i].doubted = *res;
        break;
      }
      case command::kind::pause: {
        now = std::max(now, cmd.now_ms);
        // A pause beyond the bound changes nothing (every replica refuses
        // it alike); other errors fail the entry.
        if (auto err = db.pause(cmd.route, cmd.pause, now);
            err && errc_of(err) != errc::invalid_argument)
          return err;
        auto res = db.pauses();
        if (!res)
          return std::move(res.error());
        results[i].pauses = std::move(*res);
        break;
      }
    }
  }
  if (now != start_clock)
    if (auto err = db.set_clock_ms(now))
      return err;
  if (auto err = db.set_applied_index(index))
    return err;
  return results;
}

} // namespace

caf::expected<std::vector<command_result>>
apply_batch(sqlite_store& db, uint64_t index,
            const std::vector<command>& batch) {
  if (auto err = db.begin())
    return err;
  bool skipped = false;
  auto results = apply_in_transaction(db, index, batch, skipped);
  if (!results || skipped) {
    db.rollback();
    return results;
  }
  if (auto err = db.commit())
    return err;
  return results;
}

caf::expected<std::vector<std::vector<command_result>>>
apply_entries(sqlite_store& db, const std::vector<log_entry>& entries) {
  std::vector<std::vector<command_result>> results;
  if (entries.empty())
    return results;
  if (auto err = db.begin())
    return err;
  results.reserve(entries.size());
  for (auto& e : entries) {
    bool skipped = false;
    auto res = apply_in_transaction(db, e.index, e.batch, skipped);
    if (!res) {
      db.rollback();
      return std::move(res.error());
    }
    results.push_back(std::move(*res));
  }
  if (auto err = db.commit())
    return err;
  return results;
}

} // namespace oncegate::persistence
