#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace oncegate {

/// Lifecycle of one idempotency record.
///
/// ~~~
///            claim (no upstream)
///   (none) ───────────────────────────────> completed
///      │ claim (upstream)                      ^
///      v                 upstream answered     │
///   in_flight ─────────────────────────────────┘
///      │  └──────── failure before sending ───> (none, released)
///      │  └──────── failure before sending, ──> queued ──(deadline)──> failed
///      │            the route delivers durably    │  ^                   │
///      │                                          │  └──── redeliver ────┘
///      │       in_flight <──── start an attempt ──┘  (durable before it is sent)
///      ├─────────── upstream may have acted ──> in_doubt
///      └─────────── past the forward deadline ─> in_doubt (the alarm)
/// ~~~
///
/// Only completed records expire. An in-flight record has a forward
/// running (or a claimant that died while forwarding): it turns in-doubt
/// once its forward deadline passed. An in-doubt record (the upstream may
/// have acted) stays until an operator settles it. A queued record is the
/// node's to deliver: every attempt so far certainly did not reach the
/// upstream; a failed one is a queued record whose delivery deadline passed
/// (a dead letter). None of these is ever purged or renewed by the clock.
enum class record_state : uint8_t {
  in_flight = 0,
  completed = 1,
  in_doubt = 2,
  queued = 3,
  failed = 4,
};

const char* to_string(record_state x);

/// The outcome of a claim as decided by the store.
enum class decision : uint8_t {
  /// No live record existed: this request owns the key and may execute.
  /// Also the answer when the live record is this very request attempt's
  /// (same fingerprint, owner and non-zero request id): it asks again
  /// because the first answer was lost, and already owns the key.
  accepted = 0,
  /// A live record with the same fingerprint exists.
  duplicate = 1,
  /// A live record with a different fingerprint exists.
  mismatch = 2,
  /// The previous record had expired; it was replaced and this request
  /// owns the key ("expired, then new").
  renewed = 3,
  /// Refused by a guard (`claim_guards`): the claim would have created a
  /// record (no live one existed) but its signal is stale. Nothing is
  /// written.
  stale = 4,
  /// Refused by a guard: the route's cap of new executions per minute is
  /// reached. Nothing is written.
  rate_limited = 5,
  /// Refused: the route is paused (`route_pause`). Nothing is written.
  paused = 6,
};

/// The last `decision` value.
constexpr decision last_decision = decision::paused;

const char* to_string(decision x);

/// Returns whether `x` grants execution to the claimant.
constexpr bool grants(decision x) {
  return x == decision::accepted || x == decision::renewed;
}

/// Returns whether a guard or a pause refused `x` (nothing was written).
constexpr bool refused(decision x) {
  return x == decision::stale || x == decision::rate_limited
         || x == decision::paused;
}

/// One stored idempotency record, keyed by `(route, key)`.
struct record {
  std::string route;
  std::string key;
  record_state state = record_state::completed;
  /// Raw SHA-256 of the canonical payload (32 bytes).
  std::string fingerprint;
  /// Wall-clock milliseconds since the epoch.
  int64_t first_seen_ms = 0;
  int64_t expires_at_ms = 0;
  /// Stored response status, selected headers and body (meaningful when
  /// completed). Headers are `Name: value` lines separated by `\n`.
  uint16_t status = 0;
  std::string headers;
  std::string response;
  /// The request body as received.
  std::string signal;
  /// Id of the node whose gateway made the claim (0: a single node); for
  /// an attempt started from the queue, the node that started it.
  uint64_t owner = 0;
  /// The HTTP request attempt that made the claim (0: none), or the id of
  /// the delivery attempt that runs.
  uint64_t request_id = 0;
  /// Durable delivery (0 when the route does not deliver durably):
  /// attempts started so far (the fence's number), the deadline after which
  /// a queued record fails, and `next_attempt_ms`: when queued, the earliest
  /// start of the next attempt; when in flight, when the running attempt
  /// started (its forward deadline counts from there).
  uint32_t attempts = 0;
  int64_t next_attempt_ms = 0;
  int64_t deliver_by_ms = 0;
  /// The request's Content-Type, to send the signal again.
  std::string signal_type;
  /// Reconciliation of an in-doubt record (a route with `reconcile`): how
  /// often the upstream was asked without a verdict; `next_attempt_ms` is
  /// then when it may be asked again.
  uint32_t reconciles = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, record& x) {
  return f(caf::meta::type_name("record"), x.route, x.key, x.state,
           x.fingerprint, x.first_seen_ms, x.expires_at_ms, x.status,
           x.headers, x.response, x.signal, x.owner, x.request_id,
           x.attempts, x.next_attempt_ms, x.deliver_by_ms, x.signal_type,
           x.reconciles);
}

/// The one expiry rule: a record in `state` with `expires_at_ms` is still
/// live (decides claims of its key) at `now_ms`. Only completed records
/// expire; in-flight and in-doubt ones are live until a transition.
constexpr bool live(record_state state, int64_t expires_at_ms,
                    int64_t now_ms) {
  return state != record_state::completed || now_ms < expires_at_ms;
}

/// Returns whether `x` is still live at time `now_ms` (see above).
inline bool live(const record& x, int64_t now_ms) {
  return live(x.state, x.expires_at_ms, now_ms);
}

/// What the decision rule needs of the record that holds a key, wherever
/// it is kept (the store's row, a key actor's cache, the HTTP cache).
struct holder {
  record_state state = record_state::completed;
  int64_t expires_at_ms = 0;
  std::string_view fingerprint;
  /// The request attempt that claimed it (0: none) and its node. A cache
  /// that does not keep the owner says so (`owner_known`).
  uint64_t request_id = 0;
  uint64_t owner = 0;
  bool owner_known = true;
};

/// Whether a cache may answer with `d` (a rule's result on its copy of the
/// record): only a duplicate or a mismatch; anything else (a free key, the
/// same attempt, an unknown owner) is the store's to decide.
inline bool cache_may_answer(const std::optional<decision>& d) {
  return d && (*d == decision::duplicate || *d == decision::mismatch);
}

/// The holder view of a whole record.
inline holder holder_of(const record& r) {
  return {r.state, r.expires_at_ms, r.fingerprint, r.request_id, r.owner};
}

/// THE decision rule, the only one: every component that decides a claim
/// calls it. With no holder, or one that is no longer live at `now_ms`
/// (the one expiry rule, `live`): `accepted` (or `renewed` when a dead
/// record is replaced; only the store writes, so only it may act on
/// these), unless a guard refuses a new record (`refusal`: `stale`,
/// `rate_limited` or `paused`; a guard never changes any other answer, so a stale
/// duplicate of a signal executed in time stays a duplicate). A live holder
/// with another payload: `mismatch`. The same request attempt asking again
/// (non-zero id, same id and owner): `accepted` (its first answer was lost;
/// it owns the key already). Otherwise: `duplicate`. Empty when it cannot
/// tell: the request id matches but the owner is unknown (a cache must then
/// ask the store).
std::optional<decision> decide(const holder* h, std::string_view fingerprint,
                               uint64_t request_id, uint64_t owner,
                               int64_t now_ms,
                               std::optional<decision> refusal = {});

/// Route guardrails a claim carries (docs/http-api.md, "Guardrails"). The
/// gateway judges them from the route's options; the store enforces them
/// in the decision, on apply, so every replica refuses alike. They only
/// keep a claim from creating a record (`decide`'s `refusal`).
struct claim_guards {
  /// The claim may not create a record: the signal's own time is older
  /// than the route's `max-age` or ahead of the gateway's clock beyond its
  /// skew, or the signal cannot be judged (no time, no cap member).
  bool stale = false;
  /// The most new records this claim's route (and `cap_scope`) may create
  /// in its partition per minute of the store's clock (0: no cap).
  uint32_t max_new_per_minute = 0;
  /// What the cap counts within the route: empty (the whole route) or a
  /// symbol.
  std::string cap_scope;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, claim_guards& x) {
  return f(caf::meta::type_name("claim_guards"), x.stale,
           x.max_new_per_minute, x.cap_scope);
}

/// Whether any guard is set (a log entry format and a link field that
/// older builds do not read).
inline bool used(const claim_guards& g) {
  return g.stale || g.max_new_per_minute != 0 || !g.cap_scope.empty();
}

/// A request to own `(route, key)`. The store inserts a record built from
/// it unless a live record exists.
struct claim_request {
  std::string route;
  std::string key;
  std::string fingerprint;
  /// The claimant's timestamp; expiry is judged against it, never against
  /// the local clock of whoever evaluates the claim.
  int64_t now_ms = 0;
  int64_t ttl_ms = 0;
  /// State, status and response of the record on success.
  record_state initial_state = record_state::completed;
  uint16_t status = 0;
  std::string headers;
  std::string response;
  std::string signal;
  /// Id of the node whose gateway makes the claim (0: a single node).
  uint64_t owner = 0;
  /// Unique per HTTP request attempt (0: none). The same attempt asking
  /// again (its earlier claim committed, but the answer was lost with a
  /// leader) is recognised by it and gets its own record back as accepted.
  uint64_t request_id = 0;
  /// Durable delivery: the deadline of a queued record (0: the route does
  /// not deliver durably; a failure before sending releases the key) and
  /// the request's Content-Type.
  int64_t deliver_by_ms = 0;
  std::string signal_type;
  /// The route's guardrails as judged for this request.
  claim_guards guards;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, claim_request& x) {
  return f(caf::meta::type_name("claim_request"), x.route, x.key,
           x.fingerprint, x.now_ms, x.ttl_ms, x.initial_state, x.status,
           x.headers, x.response, x.signal, x.owner, x.request_id,
           x.deliver_by_ms, x.signal_type, x.guards);
}

/// Builds the record that a successful claim stores at time `now_ms`.
record make_record(const claim_request& req, int64_t now_ms);

/// `make_record(req, req.now_ms)`.
inline record make_record(const claim_request& req) {
  return make_record(req, req.now_ms);
}

/// The decision on a claim plus the record that is live afterwards (the new
/// one when granted, the existing one otherwise), without its body
/// (`signal` is empty: only the store keeps it).
struct claim_result {
  decision outcome = decision::accepted;
  record rec;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, claim_result& x) {
  return f(caf::meta::type_name("claim_result"), x.outcome, x.rec);
}

/// The answer to a lookup: `found == false` means no record is stored.
struct lookup_result {
  bool found = false;
  record rec;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lookup_result& x) {
  return f(caf::meta::type_name("lookup_result"), x.found, x.rec);
}

/// A state change of an existing record.
enum class transition : uint8_t {
  /// in_flight or in_doubt -> completed(status, response).
  complete = 0,
  /// Any state -> gone: the next claim executes again. Used by the
  /// forward that knows nothing was sent, and by an operator's forced
  /// release.
  release = 1,
  /// in_flight -> in_doubt: the upstream may have acted; never re-executed
  /// automatically.
  in_doubt = 2,
  /// completed, in_doubt, queued or failed -> gone; an in-flight record is
  /// left alone (its forward still runs: releasing it would let a retry
  /// execute beside it). An operator's release.
  release_settled = 3,
  /// in_flight -> queued (`next_attempt_ms`), or failed once `now_ms`
  /// reached the record's delivery deadline: the attempt (`attempt`)
  /// certainly did not reach the upstream. Only for records that deliver
  /// durably.
  defer = 4,
  /// queued -> in_flight as attempt `attempt` (the record's attempts + 1:
  /// one starter wins), run by node `owner` as `request_id`, started at
  /// `now_ms` (before the deadline). Durable before the attempt is sent: a
  /// node that dies after sending leaves it in flight, and the forward
  /// deadline turns it in doubt; it is never sent again blindly.
  start_attempt = 5,
  /// queued -> failed, once `now_ms` reached the delivery deadline.
  fail = 6,
  /// failed -> queued, due at `now_ms`, with the new deadline
  /// `deliver_by_ms`. An operator's redelivery.
  redeliver = 7,
  /// in_doubt -> queued, due at `now_ms`: the upstream, asked by the
  /// record's reconcile URL, answered that it does not have the order.
  /// (Found: `complete` with its answer.)
  requeue = 8,
  /// in_doubt stays, asked again at `next_attempt_ms`: no verdict from the
  /// upstream (`reconciles` counts these).
  reconcile_wait = 9,
};

const char* to_string(transition x);

/// Changes the record of `(route, key)`.
struct record_update {
  std::string route;
  std::string key;
  transition op = transition::complete;
  /// The record instance meant (its `first_seen_ms`), so that an update for
  /// an expired and re-claimed key cannot touch its successor; 0 = whatever
  /// record is stored (operator actions).
  int64_t first_seen_ms = 0;
  /// For `complete`: the outcome to store.
  uint16_t status = 0;
  std::string headers;
  std::string response;
  /// The request attempt meant (`record::request_id`); 0 = any. A gateway
  /// that gave up on a claim of unknown outcome releases only its own.
  uint64_t request_id = 0;
  /// Durable delivery (see the transitions): the attempt meant or started,
  /// its node, the proposer's time, when the next attempt may start, a new
  /// deadline.
  uint32_t attempt = 0;
  uint64_t owner = 0;
  int64_t now_ms = 0;
  int64_t next_attempt_ms = 0;
  int64_t deliver_by_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, record_update& x) {
  return f(caf::meta::type_name("record_update"), x.route, x.key, x.op,
           x.first_seen_ms, x.status, x.headers, x.response, x.request_id,
           x.attempt, x.owner, x.now_ms, x.next_attempt_ms, x.deliver_by_ms);
}

/// Whether an update needs the durable-delivery fields (a log entry format
/// that older builds do not read).
inline bool uses_delivery(const record_update& x) {
  return x.op >= transition::defer || x.attempt != 0 || x.owner != 0
         || x.now_ms != 0 || x.next_attempt_ms != 0 || x.deliver_by_ms != 0;
}

/// The same for a claim.
inline bool uses_delivery(const claim_request& x) {
  return x.deliver_by_ms != 0 || !x.signal_type.empty();
}

/// How an attempt to send a claimed key's signal fared upstream: the part
/// of a key's lifecycle after `in_flight` (see `record_state`).
enum class delivery : uint8_t {
  /// A final answer: the record completes with it.
  answered = 0,
  /// Nothing reached the upstream: the key is released (a retry executes),
  /// or, if the record delivers durably, queued for another attempt.
  not_sent = 1,
  /// It may have reached the upstream: in doubt, never executed again
  /// automatically.
  maybe_sent = 2,
};

/// Which attempt of which record a delivery is about.
struct delivery_attempt {
  std::string route;
  std::string key;
  /// The record instance (`record::first_seen_ms`).
  int64_t first_seen_ms = 0;
  /// Durable delivery: the attempt's number and request id (0: the claim's
  /// own first attempt on a route without durable delivery), and when a
  /// next attempt may start if this one was not sent (0: release instead).
  uint32_t attempt = 0;
  uint64_t request_id = 0;
  int64_t retry_at_ms = 0;
  /// The time of the outcome (the proposer's clock).
  int64_t now_ms = 0;
};

/// The release that undoes claim attempt `req` should it have committed,
/// and nothing else: it names the attempt by its request id, so a record
/// that another attempt (another node's, or this node's next one) made of
/// the same key is left alone. A gateway sends it when it gave up on the
/// claim's answer.
record_update release_of(const claim_request& req);

/// The one rule for what a delivery makes of the in-flight record of an
/// attempt; for `answered`, the answer to store (`headers` as in
/// `record::headers`).
record_update after_delivery(const delivery_attempt& a, delivery d,
                             uint16_t status = 0, std::string headers = {},
                             std::string response = {});

/// Whether an update applied, and the record as it is afterwards.
struct update_result {
  bool applied = false;
  lookup_result current;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, update_result& x) {
  return f(caf::meta::type_name("update_result"), x.applied, x.current);
}

/// A page of records in one state (operators list in-doubt keys).
struct record_page {
  std::vector<record> records;
  /// Key to continue after (empty: no more).
  std::string next_after;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, record_page& x) {
  return f(caf::meta::type_name("record_page"), x.records, x.next_after);
}

/// The delivery queue as a node's store sees it: queued records due now
/// (with their signals) and the earliest next attempt of the rest (-1: no
/// queued record).
struct delivery_queue {
  std::vector<record> due;
  int64_t next_ms = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, delivery_queue& x) {
  return f(caf::meta::type_name("delivery_queue"), x.due, x.next_ms);
}

/// A paused route (`oncegate routes pause`): while it is, a claim that
/// would create a record is refused (`decision::paused`) and its queued
/// records are not delivered. Kept in every partition's state, so every
/// leader refuses alike.
struct route_pause {
  std::string route;
  /// The store's clock when it was paused.
  int64_t since_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, route_pause& x) {
  return f(caf::meta::type_name("route_pause"), x.route, x.since_ms);
}

/// The paused routes, by name.
using route_pauses = std::vector<route_pause>;

/// What a pause request does.
enum class pause_op : uint8_t {
  /// Reads the paused routes.
  read = 0,
  /// Pauses a route (a paused route stays paused since its first pause).
  pause = 1,
  /// Resumes a route.
  resume = 2,
};

/// How many routes may be paused at once (bounds what a node reads from
/// another).
constexpr std::size_t max_pauses = 1024;

/// How many unsettled records of one route are in one state.
struct unsettled_count {
  std::string route;
  record_state state = record_state::in_flight;
  uint64_t count = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, unsettled_count& x) {
  return f(caf::meta::type_name("unsettled_count"), x.route, x.state,
           x.count);
}

/// What one purge chunk did.
struct purge_result {
  uint64_t purged = 0;
  /// Earliest `expires_at_ms` left in the store, or -1 when it is empty.
  int64_t next_due_ms = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, purge_result& x) {
  return f(caf::meta::type_name("purge_result"), x.purged, x.next_due_ms);
}

/// The hard bounds of what a record holds. Every configurable limit of the
/// HTTP side lies below them (route names 64 bytes, keys 255, bodies and
/// upstream answers at most 16 MiB), so they never refuse a request of this
/// node; they bound what arrives from outside the process (another node's
/// message) before it can reach a store batch.
namespace record_bounds {
constexpr std::size_t route = 64;
constexpr std::size_t key = 1024;
constexpr std::size_t fingerprint = 32;
constexpr std::size_t headers = 64 * 1024;
constexpr std::size_t response = 16 * 1024 * 1024;
constexpr std::size_t signal = 64 * 1024 * 1024;
/// Records in one page of a listing (GET /v1/keys?limit=1..1000).
constexpr uint32_t list_page = 1000;
/// A request's Content-Type kept for another delivery attempt.
constexpr std::size_t signal_type = 1024;
/// Delivery attempts of one record (a day of retries every second).
constexpr uint32_t attempts = 100000;
/// Ten years: no route lives longer.
constexpr int64_t ttl_ms = int64_t{10} * 366 * 24 * 3600 * 1000;
/// A cap's scope (a symbol).
constexpr std::size_t cap_scope = 64;
/// New executions per minute a route's cap may allow.
constexpr uint32_t max_new_per_minute = 1000000;
} // namespace record_bounds

/// Why `req` cannot be a claim (enums out of range, sizes beyond
/// `record_bounds`, a status that is no HTTP status, times that are no
/// times), as a short reason for logs; nullptr when it can.
const char* malformed(const claim_request& req);

/// The same for an update.
const char* malformed(const record_update& upd);

/// The same for a route and key (lookups).
const char* malformed_key(std::string_view route, std::string_view key);

/// The one string `(route, key)` is indexed by (registries, caches). Route
/// names never contain NUL, so the pair maps to one string only.
std::string routing_key(const std::string& route, const std::string& key);

} // namespace oncegate
