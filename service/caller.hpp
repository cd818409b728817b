// Asking the node's actors from threads that are not actors (asio's, the
// Raft loop) with no actor in between: the request goes into the receiver's
// mailbox at once, and the answer is handed to its callback on the thread
// of the actor that answered. Knows nothing of clusters (routing/ does).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <caf/detail/type_list.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/message.hpp>
#include <caf/message_id.hpp>
#include <caf/response_type.hpp>

#include "service/bridge.hpp"

namespace oncegate::gateway {

/// Sends requests on behalf of code that is not an actor and runs each
/// answer's callback where the answer arrives, on the answering actor's
/// thread (an actor's `delegate` answers from the delegate). Today a bridge
/// actor did that: one more mailbox, one more turn of a worker each way.
///
/// The sender the receivers see is a CAF companion actor (an actor that
/// runs no behaviour and hands what it receives to a callback): registries,
/// key actors and the store serve it exactly as any other requester. An
/// answer runs its callback once, under the companion's lock, so `stop`
/// returns only after every running callback returned; callbacks must not
/// block and must not call `stop`. A receiver that is gone answers at once
/// (CAF bounces the request), possibly on the calling thread.
///
/// Requests carry no timeout (the node's own actors always answer: the
/// store settles every command, a Raft leader that cannot commit fails what
/// it holds), as the bridge's requests to them did.
class actor_caller {
public:
  /// With `run_here`, a request sent while no other is in flight from a
  /// thread that runs woken actors itself (`inline_exec::here()`, the HTTP
  /// threads) wakes its receiver there instead of on a scheduler worker.
  explicit actor_caller(caf::actor_system& sys, bool run_here = false);
  ~actor_caller();

  actor_caller(const actor_caller&) = delete;
  actor_caller& operator=(const actor_caller&) = delete;

  /// Asks `dest` (a typed actor accepting `xs...` with the one answer `T`)
  /// and calls `done` with the answer or the failure, exactly once unless
  /// `stop` came first.
  template <class T, class Handle, class... Ts>
  void ask(const Handle& dest, std::function<void(reply<T>)> done,
           Ts&&... xs) {
    using answer = caf::response_type_t<
      typename Handle::signatures,
      typename caf::detail::strip_and_convert<Ts>::type...>;
    static_assert(std::is_same<answer, caf::detail::type_list<T>>::value,
                  "the receiver does not answer this request with T");
    auto sys = sys_;
    auto ticket = enlist([sys, done = std::move(done)](caf::message& msg) {
      if (msg.match_elements<T>())
        done(success(std::move(msg.get_mutable_as<T>(0))));
      else if (msg.match_elements<caf::error>())
        done(failure<T>(*sys, msg.get_as<caf::error>(0)));
      else
        done(failure<T>(*sys, caf::make_error(caf::sec::unexpected_response)));
    });
    if (!ticket.sender)
      return; // stopped: nothing is sent (nobody would hear the answer)
    deliver(caf::actor_cast<caf::strong_actor_ptr>(dest), ticket.mid,
            ticket.alone,
            caf::make_mailbox_element(std::move(ticket.sender), ticket.mid,
                                      {}, std::forward<Ts>(xs)...));
  }

  /// Answers arriving later are dropped, callbacks still waiting are
  /// destroyed without being called (the owner is going away), and later
  /// requests are not sent (a claim nobody hears must not be decided).
  /// Idempotent.
  void stop();

  /// Requests sent and not answered yet.
  std::size_t pending() const;

private:
  using handler = std::function<void(caf::message&)>;

  // Registers `on_answer`: the sender and the request id to send with (no
  // sender once stopped), and whether it is the only request in flight.
  struct ticket {
    caf::strong_actor_ptr sender;
    caf::message_id mid;
    /// No other request of this caller is in flight.
    bool alone;
  };
  ticket enlist(handler on_answer);

  // Enqueues `elem` at `dest`; a missing receiver fails the request.
  void deliver(const caf::strong_actor_ptr& dest, caf::message_id mid,
               bool alone,
               caf::mailbox_element_ptr elem);

  struct state;
  caf::actor_system* sys_;
  bool run_here_;
  caf::actor companion_;
  std::shared_ptr<state> state_;
};

} // namespace oncegate::gateway
