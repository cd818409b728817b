#include "actors/key_actor.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include <caf/event_based_actor.hpp>
#include <caf/local_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "common/errc.hpp"
#include "common/stage_trace.hpp"

namespace oncegate {

namespace {

/// What decisions need of a committed record, compactly: a live key actor's
/// memory is the product's memory per open key.
struct cached_record {
  std::array<char, 32> fingerprint{};
  bool fingerprint_ok = false;
  record_state state = record_state::completed;
  uint16_t status = 0;
  int64_t first_seen_ms = 0;
  int64_t expires_at_ms = 0;
  /// The request attempt that claimed it (0: none); unique per node, so a
  /// match sends the claim to the store, which also compares the owner.
  uint64_t request_id = 0;
  /// False when the answer was too large to keep (`max_cached_answer`):
  /// then only claims that need no answer are decided here.
  bool answer_cached = true;
  std::string headers;
  std::string response;
};

struct key_state {
  persistence::store_actor store;
  std::string route;
  std::string key;
  /// The committed record, when known. Empty: ask the store.
  std::optional<cached_record> cached;
  std::size_t max_cached_answer = 4096;

  static inline const char* name = "oncegate.key";
};

using key_pointer = key_actor::stateful_pointer<key_state>;

// Caches what decisions need. The request body can be large and is never
// needed for a decision: it stays in the store only (less memory per live
// key actor).
void remember(key_state& st, const record& rec) {
  auto& c = st.cached.emplace();
  c.fingerprint_ok = rec.fingerprint.size() == c.fingerprint.size();
  if (c.fingerprint_ok)
    std::copy(rec.fingerprint.begin(), rec.fingerprint.end(),
              c.fingerprint.begin());
  c.state = rec.state;
  c.status = rec.status;
  c.first_seen_ms = rec.first_seen_ms;
  c.expires_at_ms = rec.expires_at_ms;
  c.request_id = rec.request_id;
  c.answer_cached = rec.headers.size() + rec.response.size()
                    <= st.max_cached_answer;
  if (c.answer_cached) {
    c.headers = rec.headers;
    c.response = rec.response;
  }
}

// Answers a claim from the cached record, when it is live at the claim's
// own timestamp (the one expiry rule, `live`). A record that looks expired
// goes to the store, which decides at the store's clock.
std::optional<claim_result> decide_cached(const key_state& st,
                                          const claim_request& req) {
  if (!st.cached || !st.cached->fingerprint_ok)
    return std::nullopt;
  auto& c = *st.cached;
  // The one rule (common/record.hpp). This cache keeps no owner: the
  // request attempt that owns the record asking again (its answer was lost
  // with a leader) goes to the store, and so does a record that looks
  // expired (the store decides at its clock) or a free key (only the store
  // grants).
  holder h{c.state, c.expires_at_ms,
           std::string_view{c.fingerprint.data(), c.fingerprint.size()},
           c.request_id, 0, false};
  auto d = decide(&h, req.fingerprint, req.request_id, req.owner, req.now_ms);
  if (!cache_may_answer(d))
    return std::nullopt;
  // The answer is not here: the store has it (a duplicate may replay it).
  if (!c.answer_cached)
    return std::nullopt;
  // The record as the store holds it, without the body (no claim answer
  // carries one) and without the owner and the delivery fields (not kept
  // here; no caller of a claim reads them).
  return claim_result{
    *d, record{st.route, st.key, c.state, std::string{h.fingerprint},
               c.first_seen_ms, c.expires_at_ms, c.status, c.headers,
               c.response, std::string{}, 0, c.request_id, 0, 0, 0,
               std::string{}, 0}};
}

key_actor::behavior_type key_impl(key_pointer self,
                                  persistence::store_actor store,
                                  std::string route, std::string key,
                                  key_actor_options opts) {
  auto& st = self->state;
  st.store = std::move(store);
  st.route = std::move(route);
  st.key = std::move(key);
  st.max_cached_answer = opts.max_cached_answer;
  return {
    [self](claim_atom, claim_request& req) -> caf::result<claim_result> {
      stage_trace::mark("key.claim");
      auto& st = self->state;
      if (auto res = decide_cached(st, req))
        return std::move(*res);
      // `await` keeps every later request of this key in the mailbox until
      // the store answered: one decision at a time per key.
      auto rp = self->make_response_promise<claim_result>();
      // No timeout: a request timeout costs a clock entry per claim, and
      // the store always answers (or fails when it is gone); a stalled disk
      // is bounded for the sender by http.response-timeout.
      self->request(st.store, caf::infinite, claim_atom::value,
                    std::move(req))
        .await(
          [self, rp](claim_result& res) mutable {
            stage_trace::mark("key.decided");
            // A guard's refusal wrote nothing: what was known stays known.
            if (!refused(res.outcome))
              remember(self->state, res.rec);
            rp.deliver(std::move(res));
          },
          [self, rp](caf::error& err) mutable {
            // Forget the cache so the next claim asks the store again.
            self->state.cached.reset();
            rp.deliver(std::move(err));
          });
      return rp;
    },
    [self](update_atom, record_update& upd) {
      auto& st = self->state;
      auto rp = self->make_response_promise<update_result>();
      self->request(st.store, caf::infinite, update_atom::value,
                    std::move(upd))
        .await(
          [self, rp](update_result& res) mutable {
            if (res.current.found)
              remember(self->state, res.current.rec);
            else
              self->state.cached.reset();
            rp.deliver(std::move(res));
          },
          [self, rp](caf::error& err) mutable {
            self->state.cached.reset();
            rp.deliver(std::move(err));
          });
      return rp;
    },
    [self](get_atom) -> caf::result<lookup_result> {
      auto& st = self->state;
      // The cache drops the signal; lookups read the store, which has it.
      auto rp = self->make_response_promise<lookup_result>();
      self->request(st.store, caf::infinite, get_atom::value, st.route,
                    st.key)
        .await(
          [self, rp](lookup_result& res) mutable {
            if (res.found)
              remember(self->state, res.rec);
            rp.deliver(std::move(res));
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](idle_atom) {
      // Every request routed before this message was handled (the registry
      // sent them first, and each awaited its store answer).
      self->quit();
    },
  };
}

} // namespace

key_actor spawn_key_actor(caf::local_actor* parent,
                          persistence::store_actor store, std::string route,
                          std::string key, const key_actor_options& opts) {
  return parent->spawn<caf::monitored>(key_impl, std::move(store),
                                       std::move(route), std::move(key), opts);
}

} // namespace oncegate
