#define CAF_SUITE persistence.local_sink
#include "caf/test/unit_test.hpp"

// The single node's sink with a reader: where each batch commits (the
// asking thread when it runs its own loop and the sink holds nothing, the
// sink's thread otherwise), in which order, and what the reads see. Real
// threads; every wait is bounded and fails the test when it runs out.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scheduled_actor.hpp>

#include <sqlite3.h>

#include "common/inline_execution.hpp"
#include "persistence/local_sink.hpp"
#include "persistence/sqlite_store.hpp"
#include "persistence/store_actor.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/own_loop.hpp"
#include "tests/common/sockets.hpp"

using namespace oncegate;
using namespace oncegate::persistence;
using namespace std::chrono_literals;
using oncegate::test::make_claim;
using oncegate::test::wait_for;

namespace {

// Every COMMIT of a connection opened while it lives: which thread ran it,
// and, while closed, a wait before it (bounded: an open that never comes
// fails the test that closed it, it does not hang the run).
class commit_gate {
public:
  commit_gate() {
    auto& s = shared();
    std::lock_guard<std::mutex> guard{s.mtx};
    s.open = true;
    s.waiting = 0;
    s.threads.clear();
    sqlite3_auto_extension(reinterpret_cast<void (*)()>(&install));
  }

  ~commit_gate() {
    sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(&install));
    open();
  }

  commit_gate(const commit_gate&) = delete;
  commit_gate& operator=(const commit_gate&) = delete;

  void close() {
    std::lock_guard<std::mutex> guard{shared().mtx};
    shared().open = false;
  }

  void open() {
    auto& s = shared();
    {
      std::lock_guard<std::mutex> guard{s.mtx};
      s.open = true;
    }
    s.cv.notify_all();
  }

  /// Forgets the COMMITs so far.
  void forget() {
    std::lock_guard<std::mutex> guard{shared().mtx};
    shared().threads.clear();
  }

  /// COMMITs waiting at the closed gate now.
  int waiting() const {
    std::lock_guard<std::mutex> guard{shared().mtx};
    return shared().waiting;
  }

  /// The threads of the COMMITs so far, in order.
  std::vector<std::thread::id> threads() const {
    std::lock_guard<std::mutex> guard{shared().mtx};
    return shared().threads;
  }

private:
  struct state {
    std::mutex mtx;
    std::condition_variable cv;
    bool open = true;
    int waiting = 0;
    std::vector<std::thread::id> threads;
  };

  static state& shared() {
    static state s;
    return s;
  }

  static int hook(void*) {
    auto& s = shared();
    std::unique_lock<std::mutex> guard{s.mtx};
    s.threads.push_back(std::this_thread::get_id());
    ++s.waiting;
    s.cv.wait_for(guard, 30s, [&] { return s.open; });
    --s.waiting;
    return 0;
  }

  static int install(sqlite3* db, const char**, const sqlite3_api_routines*) {
    sqlite3_commit_hook(db, &hook, nullptr);
    return SQLITE_OK;
  }
};

// One batch of one claim.
std::vector<command> batch_of(const std::string& key) {
  command cmd;
  cmd.type = command::kind::claim;
  cmd.claim = make_claim(key, 1000);
  return {cmd};
}

// What a callback of the sink reported, and from which thread.
struct outcome_slot {
  std::mutex mtx;
  int calls = 0;
  std::optional<batch_outcome> out;
  std::thread::id thread;

  commit_callback callback() {
    return [this](batch_outcome res) {
      std::lock_guard<std::mutex> guard{mtx};
      ++calls;
      out = std::move(res);
      thread = std::this_thread::get_id();
    };
  }

  bool done() {
    std::lock_guard<std::mutex> guard{mtx};
    return calls > 0;
  }
};

struct fixture {
  test::test_config cfg;
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  commit_gate gate; // before the connections open: they get its hook
  std::shared_ptr<sqlite_store> writer;
  std::shared_ptr<sqlite_store> reader;

  fixture() {
    store_options so;
    so.path = dir.file("oncegate.db");
    auto w = sqlite_store::open(so);
    CAF_REQUIRE(w);
    writer = std::move(*w);
    auto r = sqlite_store::open_reader(so);
    CAF_REQUIRE(r);
    reader = std::move(*r);
    gate.forget(); // the schema's own
  }

  bool readable(const std::string& key) {
    auto res = reader->load("default", key);
    CAF_REQUIRE(res);
    return res->found;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(local_sink_tests, fixture)

CAF_TEST(a loop thread commits its batch itself when the sink holds none) {
  local_sink sink{writer, reader};
  CAF_CHECK_EQUAL(sink.traits().max_in_flight, 1u);
  test::own_loop loop{sys};
  auto batch = batch_of("k1");
  auto out = sink.commit(batch, [](batch_outcome) { CAF_FAIL("called"); });
  CAF_REQUIRE(out);
  CAF_REQUIRE(*out);
  CAF_CHECK_EQUAL((**out)[0].claim.outcome, decision::accepted);
  CAF_CHECK_EQUAL(sink.committed_on_own_thread(), 0u);
  auto threads = gate.threads();
  CAF_REQUIRE_EQUAL(threads.size(), 1u);
  CAF_CHECK(threads[0] == std::this_thread::get_id());
  CAF_CHECK(readable("k1"));
  CAF_CHECK_EQUAL(writer->applied_index(), 1u);
}

CAF_TEST(any other thread hands its batch to the sink thread) {
  local_sink sink{writer, reader};
  gate.close();
  outcome_slot slot;
  auto batch = batch_of("k1");
  CAF_REQUIRE(!sink.commit(batch, slot.callback()));
  CAF_REQUIRE(wait_for([&] { return gate.waiting() == 1; }, 30000ms));
  // Held at COMMIT: not decided yet, and the reader does not see it.
  CAF_CHECK(!slot.done());
  CAF_CHECK(!readable("k1"));
  gate.open();
  CAF_REQUIRE(wait_for([&] { return slot.done(); }, 30000ms));
  std::lock_guard<std::mutex> guard{slot.mtx};
  CAF_CHECK_EQUAL(slot.calls, 1);
  CAF_REQUIRE(*slot.out);
  CAF_CHECK_EQUAL((**slot.out)[0].claim.outcome, decision::accepted);
  CAF_CHECK(slot.thread != std::this_thread::get_id());
  CAF_CHECK(gate.threads().at(0) == slot.thread);
  CAF_CHECK(readable("k1"));
  CAF_CHECK_EQUAL(sink.committed_on_own_thread(), 1u);
}

CAF_TEST(a batch from a loop thread queues behind the one the sink thread holds) {
  local_sink sink{writer, reader};
  gate.close();
  outcome_slot first;
  auto b1 = batch_of("k1");
  CAF_REQUIRE(!sink.commit(b1, first.callback()));
  CAF_REQUIRE(wait_for([&] { return gate.waiting() == 1; }, 30000ms));
  outcome_slot second;
  {
    test::own_loop loop{sys};
    // The same key again: decided after the first, so a duplicate.
    auto b2 = batch_of("k1");
    CAF_REQUIRE(!sink.commit(b2, second.callback()));
  }
  CAF_CHECK_EQUAL(gate.waiting(), 1); // nothing committed beside it
  gate.open();
  CAF_REQUIRE(wait_for([&] { return first.done() && second.done(); },
                       30000ms));
  CAF_REQUIRE(*first.out && *second.out);
  CAF_CHECK_EQUAL((**first.out)[0].claim.outcome, decision::accepted);
  CAF_CHECK_EQUAL((**second.out)[0].claim.outcome, decision::duplicate);
  CAF_CHECK_EQUAL(writer->applied_index(), 2u);
  CAF_CHECK_EQUAL(sink.committed_on_own_thread(), 2u);
}

CAF_TEST(the sink commits what its thread holds before it goes away) {
  outcome_slot slot;
  {
    auto sink = std::make_unique<local_sink>(writer, reader);
    gate.close();
    auto batch = batch_of("k1");
    CAF_REQUIRE(!sink->commit(batch, slot.callback()));
    CAF_REQUIRE(wait_for([&] { return gate.waiting() == 1; }, 30000ms));
    std::thread opener{[this] {
      // Opens once the destructor below waits for the held batch.
      gate.open();
    }};
    sink.reset();
    opener.join();
  }
  CAF_REQUIRE(slot.done());
  CAF_REQUIRE(*slot.out);
  CAF_CHECK(readable("k1"));
}

CAF_TEST(a sink destroyed on its own thread lets that thread end alone) {
  // The store's exit can run on the sink's thread (it runs the store for
  // each outcome): the sink's last owner then goes away there.
  auto sink = std::make_shared<local_sink>(writer, reader);
  std::mutex mtx;
  std::condition_variable cv;
  bool released = false;
  std::thread::id released_on;
  auto holder = std::make_shared<std::shared_ptr<local_sink>>(sink);
  auto batch = batch_of("k1");
  CAF_REQUIRE(!sink->commit(batch, [&, holder](batch_outcome out) {
    CAF_CHECK(out);
    holder->reset(); // the last owner: destroys the sink right here
    std::lock_guard<std::mutex> guard{mtx};
    released = true;
    released_on = std::this_thread::get_id();
    cv.notify_all();
  }));
  sink.reset();
  std::unique_lock<std::mutex> guard{mtx};
  CAF_REQUIRE(cv.wait_for(guard, 30s, [&] { return released; }));
  CAF_CHECK(released_on != std::this_thread::get_id());
  CAF_CHECK(readable("k1"));
}

CAF_TEST(a store on the scheduler commits an unloaded claim on the loop
           thread that sent it and a loaded one on the sink thread) {
  auto sink = std::make_shared<local_sink>(writer, reader, &sys);
  auto store = spawn_store(sys, sink, store_actor_options{}, false);
  // Started on a worker: this thread's claim must find it waiting, or that
  // worker takes the claim.
  auto scheduled = dynamic_cast<caf::scheduled_actor*>(
    caf::actor_cast<caf::abstract_actor*>(store));
  CAF_REQUIRE(scheduled != nullptr);
  CAF_REQUIRE(
    wait_for([&] { return scheduled->mailbox().blocked(); }, 30000ms));
  std::mutex mtx;
  std::vector<caf::expected<claim_result>> answers;
  auto client = [&](caf::event_based_actor* self) -> caf::behavior {
    return {[&, self](std::string& key) {
      self->request(store, caf::infinite, claim_atom::value,
                    make_claim(key, 1000))
        .then(
          [&](claim_result& res) {
            std::lock_guard<std::mutex> guard{mtx};
            answers.emplace_back(std::move(res));
          },
          [&](caf::error& err) {
            std::lock_guard<std::mutex> guard{mtx};
            answers.emplace_back(std::move(err));
          });
    }};
  };
  auto count = [&] {
    std::lock_guard<std::mutex> guard{mtx};
    return answers.size();
  };
  {
    // The client, the store and the client again run on this thread's
    // loop: the commit happens here, and nothing wakes the sink thread.
    test::own_loop loop{sys};
    auto c = sys.spawn<caf::lazy_init>(client);
    caf::actor_cast<caf::strong_actor_ptr>(c)->enqueue(
      nullptr, caf::make_message_id(), caf::make_message(std::string{"k1"}),
      inline_exec::here());
    for (int i = 0; i < 100 && count() == 0; ++i)
      loop.run();
    CAF_REQUIRE_EQUAL(count(), 1u);
    CAF_REQUIRE(answers[0]);
    CAF_CHECK_EQUAL(answers[0]->outcome, decision::accepted);
    CAF_CHECK_EQUAL(sink->committed_on_own_thread(), 0u);
    CAF_CHECK(gate.threads().back() == std::this_thread::get_id());
  }
  // Clients on the scheduler: the sink thread commits, and each key is
  // decided once however the claims are batched.
  for (int i = 0; i < 50; ++i)
    for (int twice = 0; twice < 2; ++twice)
      caf::anon_send(sys.spawn(client), "m" + std::to_string(i));
  CAF_REQUIRE(wait_for([&] { return count() == 101; }, 30000ms));
  size_t accepted = 0;
  size_t duplicates = 0;
  {
    std::lock_guard<std::mutex> guard{mtx};
    for (size_t i = 1; i < answers.size(); ++i) {
      CAF_REQUIRE(answers[i]);
      accepted += answers[i]->outcome == decision::accepted;
      duplicates += answers[i]->outcome == decision::duplicate;
    }
  }
  CAF_CHECK_EQUAL(accepted, 50u);
  CAF_CHECK_EQUAL(duplicates, 50u);
  CAF_CHECK_GREATER(sink->committed_on_own_thread(), 0u);
  caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
}

CAF_TEST_FIXTURE_SCOPE_END()
