// A local request's answer as a callback (`completion<T>`), for callers on
// threads that are not actors: the HTTP threads hand a claim straight to its
// registry shard with one, and the key actor calls it, with no actor of the
// caller's in between (docs/architecture.md, "Components and data path").
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/sec.hpp>

#include "common/record.hpp"

namespace oncegate {

/// Called exactly once: with the result, with an error, or, when the
/// message holding it is dropped unanswered (its actor terminated first),
/// with `sec::request_receiver_down` as it is destroyed. Passed along by
/// move from mailbox to mailbox, so one thread at a time holds it. Local
/// only: it carries a callback, and no node registers it for the wire.
template <class T>
class completion {
public:
  using function = std::function<void(caf::expected<T>)>;

  completion() = default;

  explicit completion(function fn) : st_(std::make_shared<state>()) {
    st_->fn = std::move(fn);
  }

  void operator()(T value) const {
    finish(caf::expected<T>{std::move(value)});
  }

  void fail(caf::error err) const {
    finish(caf::expected<T>{std::move(err)});
  }

private:
  struct state {
    function fn;
    ~state() {
      if (fn)
        fn(caf::expected<T>{caf::make_error(caf::sec::request_receiver_down)});
    }
  };

  void finish(caf::expected<T> x) const {
    if (st_ == nullptr || !st_->fn)
      return;
    auto fn = std::exchange(st_->fn, nullptr);
    fn(std::move(x));
  }

  std::shared_ptr<state> st_;
};

using claim_completion = completion<claim_result>;
using update_completion = completion<update_result>;

} // namespace oncegate

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::claim_completion)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::update_completion)
