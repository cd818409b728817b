#define CAF_SUITE common.inline_execution
#include "caf/test/dsl.hpp"

// The bounds of running woken actors on the sending thread: at most
// `max_jobs` actors and `max_throughput` messages each per drain, the rest
// handed to the scheduler, nothing lost.

#include <memory>

#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>

#include "common/inline_execution.hpp"

using namespace oncegate;

namespace {

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<int> handled = std::make_shared<int>(0);

  caf::actor counter() {
    auto n = handled;
    return sys.spawn([n](caf::event_based_actor*) -> caf::behavior {
      return {[n](int) { ++*n; }};
    });
  }

  // Sends `x` to `dest` naming `eu` as the sender's execution unit.
  static void send_with(const caf::actor& dest, caf::execution_unit* eu,
                        int x) {
    caf::actor_cast<caf::abstract_actor*>(dest)->enqueue(
      caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, x), eu);
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(inline_execution_tests, fixture)

CAF_TEST(a collecting unit runs what it woke and hands on past max_jobs) {
  std::vector<caf::actor> actors;
  for (size_t i = 0; i < inline_exec::max_jobs + 2; ++i)
    actors.push_back(counter());
  sched.run(); // they start
  inline_exec::collecting_unit unit{sys};
  for (auto& a : actors)
    send_with(a, &unit, 1);
  CAF_CHECK(!sched.has_job());
  CAF_CHECK_EQUAL(*handled, 0);
  unit.run();
  CAF_CHECK_EQUAL(*handled, static_cast<int>(inline_exec::max_jobs));
  CAF_CHECK_EQUAL(sched.jobs.size(), 2u);
  sched.run();
  CAF_CHECK_EQUAL(*handled, static_cast<int>(actors.size()));
}

CAF_TEST(an actor runs at most max_throughput messages here) {
  auto a = counter();
  sched.run();
  inline_exec::collecting_unit unit{sys};
  auto n = static_cast<int>(inline_exec::max_throughput) + 4;
  for (int i = 0; i < n; ++i)
    send_with(a, &unit, i); // the first wakes it, the rest queue
  unit.run();
  CAF_CHECK_EQUAL(*handled, static_cast<int>(inline_exec::max_throughput));
  CAF_CHECK_EQUAL(sched.jobs.size(), 1u);
  sched.run();
  CAF_CHECK_EQUAL(*handled, n);
}

CAF_TEST(a deferring unit runs nothing inside the send) {
  auto a = counter();
  sched.run();
  std::vector<std::function<void()>> loop;
  inline_exec::run_woken_actors_here(
    sys, [&loop](std::function<void()> fn) { loop.push_back(fn); });
  CAF_REQUIRE(inline_exec::here() != nullptr);
  send_with(a, inline_exec::here(), 1);
  send_with(a, inline_exec::here(), 2);
  CAF_CHECK_EQUAL(*handled, 0);
  CAF_CHECK_EQUAL(loop.size(), 1u); // one drain for both
  CAF_CHECK(!sched.has_job());
  loop.front()();
  CAF_CHECK_EQUAL(*handled, 2);
  CAF_CHECK(!sched.has_job());
  // Stopped: a woken actor that the loop never ran goes to the scheduler.
  loop.clear();
  send_with(a, inline_exec::here(), 3);
  inline_exec::stop_running_here();
  CAF_CHECK(inline_exec::here() == nullptr);
  loop.clear();
  sched.run();
  CAF_CHECK_EQUAL(*handled, 3);
}

CAF_TEST_FIXTURE_SCOPE_END()
