#include "service/caller.hpp"

#include <cstdint>
#include <exception>
#include <mutex>
#include <unordered_map>

#include <caf/actor_cast.hpp>
#include <caf/actor_companion.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_execution_unit.hpp>
#include <caf/spawn_options.hpp>

#include "common/inline_execution.hpp"
#include "common/logging.hpp"

namespace oncegate::gateway {

struct actor_caller::state {
  mutable std::mutex mtx;
  std::unordered_map<uint64_t, handler> waiting;
  uint64_t last_id = 0;
  bool stopped = false;

  // The callback waiting for the answer `mid`, taken out (empty if none).
  handler take(caf::message_id mid) {
    std::lock_guard<std::mutex> guard{mtx};
    auto i = waiting.find(mid.request_id().integer_value());
    if (i == waiting.end())
      return {};
    auto h = std::move(i->second);
    waiting.erase(i);
    return h;
  }

  // Runs on the answering actor's thread: an exception must not end that
  // actor (a key actor, the store), so it ends here.
  static void run(handler& h, caf::message& msg) {
    try {
      h(msg);
    } catch (const std::exception& e) {
      log::gateway()->error("caller.answer_failed error={}", e.what());
    } catch (...) {
      log::gateway()->error("caller.answer_failed error=unknown");
    }
  }
};

namespace {

caf::actor_companion* companion_of(const caf::actor& hdl) {
  return static_cast<caf::actor_companion*>(
    caf::actor_cast<caf::abstract_actor*>(hdl));
}

} // namespace

actor_caller::actor_caller(caf::actor_system& sys, bool run_here)
  : sys_(&sys), run_here_(run_here), state_(std::make_shared<state>()) {
  // Hidden: the actor system does not wait for it at its end.
  companion_ = sys.spawn<caf::actor_companion, caf::hidden>();
  companion_of(companion_)->on_enqueue(
    [st = state_](caf::mailbox_element_ptr ptr) {
      if (!ptr || !ptr->mid.is_response())
        return; // nobody sends it anything else
      auto h = st->take(ptr->mid);
      if (!h)
        return;
      auto msg = ptr->move_content_to_message();
      state::run(h, msg);
    });
}

actor_caller::~actor_caller() {
  stop();
}

void actor_caller::stop() {
  {
    std::lock_guard<std::mutex> guard{state_->mtx};
    if (state_->stopped)
      return;
    state_->stopped = true;
  }
  // Replacing the handler waits for the callbacks running under the
  // companion's lock; none runs after. Then the companion terminates, as
  // CAF's own widgets end theirs (libcaf 0.17 declares `disconnect` but
  // does not define it).
  auto companion = companion_of(companion_);
  companion->on_enqueue(nullptr);
  caf::scoped_execution_unit host{sys_};
  companion->cleanup(caf::make_error(caf::exit_reason::user_shutdown), &host);
  std::unordered_map<uint64_t, handler> dropped;
  {
    std::lock_guard<std::mutex> guard{state_->mtx};
    dropped.swap(state_->waiting);
  }
}

std::size_t actor_caller::pending() const {
  std::lock_guard<std::mutex> guard{state_->mtx};
  return state_->waiting.size();
}

actor_caller::ticket actor_caller::enlist(handler on_answer) {
  std::lock_guard<std::mutex> guard{state_->mtx};
  // Never 0 (not a request) and within the request id bits.
  auto id = (++state_->last_id) & caf::message_id::request_id_mask;
  if (id == 0)
    id = ++state_->last_id & caf::message_id::request_id_mask;
  if (state_->stopped)
    return {nullptr, caf::make_message_id(id), false};
  state_->waiting.emplace(id, std::move(on_answer));
  return {caf::actor_cast<caf::strong_actor_ptr>(companion_),
          caf::make_message_id(id), state_->waiting.size() == 1};
}

void actor_caller::deliver(const caf::strong_actor_ptr& dest,
                           caf::message_id mid, bool alone,
                           caf::mailbox_element_ptr elem) {
  if (dest) {
    // Alone in flight (little load) the receiver runs on this thread's
    // loop; with more, a worker runs it beside the sending threads.
    auto here = run_here_ && alone ? inline_exec::here() : nullptr;
    dest->enqueue(std::move(elem), here);
    return;
  }
  if (auto h = state_->take(mid)) {
    auto msg = caf::make_message(
      caf::make_error(caf::sec::invalid_argument, "no receiver"));
    state::run(h, msg);
  }
}

} // namespace oncegate::gateway
