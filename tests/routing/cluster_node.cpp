#define CAF_SUITE routing.cluster_node
#include "caf/test/unit_test.hpp"

// A cluster node of partitions, in process: a one-node cluster (it elects
// itself) of four partitions over a real node link, asked through
// `call_locally` the way its gateway and the other nodes ask it; and the
// partition count a data dir keeps.

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "common/errc.hpp"
#include "common/partition.hpp"
#include "routing/cluster_node.hpp"
#include "tests/common/fixture.hpp"
#include "tests/common/sockets.hpp"

using namespace oncegate;
using oncegate::test::free_port;
using oncegate::test::wait_for;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// One answer, waited for with a bound.
struct answer_slot {
  std::mutex mtx;
  std::condition_variable cv;
  std::optional<link::answer> value;
  std::function<void(link::answer)> sink() {
    return [this](link::answer ans) {
      std::lock_guard<std::mutex> guard{mtx};
      value = std::move(ans);
      cv.notify_all();
    };
  }
  link::answer get() {
    std::unique_lock<std::mutex> guard{mtx};
    CAF_REQUIRE(cv.wait_for(guard, 10s, [this] { return value.has_value(); }));
    return *value;
  }
};

constexpr uint16_t parts = 4;

struct fixture {
  test::temp_dir dir;
  test::test_config cfg;
  std::optional<caf::actor_system> sys;
  std::unique_ptr<cluster::cluster_node> n;

  fixture() {
    sys.emplace(cfg);
    node_options opts;
    opts.data_dir = dir.path().string();
    cluster::cluster_options copts;
    copts.id = 1;
    copts.peers = {{1, "127.0.0.1:" + std::to_string(free_port())}};
    copts.partitions = parts;
    copts.raft.election_timeout_ms = 200;
    copts.raft.heartbeat_timeout_ms = 20;
    auto started = cluster::start_cluster_node(*sys, opts, copts);
    CAF_REQUIRE(started);
    n = std::move(*started);
    CAF_REQUIRE(wait_for(
      [this] {
        for (uint16_t g = 0; g < parts; ++g)
          if (!n->raft->brief(g).leader_ready)
            return false;
        return true;
      },
      10s));
  }

  ~fixture() {
    if (n)
      n->shutdown();
    n.reset();
  }

  link::answer claim(uint16_t group, const std::string& key,
                     uint64_t request_id = 7) {
    link::request req;
    req.kind = link::op::claim;
    req.claim = test::make_claim(key, 1'000'000);
    req.claim.request_id = request_id;
    answer_slot slot;
    cluster::call_locally(n->context, group, std::move(req), slot.sink());
    return slot.get();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(cluster_node_tests, fixture)

CAF_TEST(a key is decided in its partition and refused in any other) {
  std::string key = "BTCUSDT-buy-1";
  auto home = partition_of("default", key, parts);
  auto other = static_cast<uint16_t>((home + 1) % parts);
  // Asked of another partition (a stale or buggy peer): refused, nothing
  // stored there.
  auto wrong = claim(other, key);
  CAF_CHECK_EQUAL(wrong.error, errc::invalid_argument);
  CAF_CHECK(wrong.detail.find("belongs to partition "
                              + std::to_string(home))
            != std::string::npos);
  // A partition the cluster lacks.
  auto none = claim(parts, key);
  CAF_CHECK_EQUAL(none.error, errc::invalid_argument);
  CAF_CHECK_EQUAL(none.detail, "no such partition");
  // Its own: granted once, then a duplicate.
  auto first = claim(home, key);
  CAF_REQUIRE_EQUAL(first.error, errc::none);
  CAF_CHECK(grants(first.claim.outcome));
  auto again = claim(home, key, 8); // another request: a duplicate
  CAF_REQUIRE_EQUAL(again.error, errc::none);
  CAF_CHECK_EQUAL(again.claim.outcome, decision::duplicate);
  // Each partition has its own file.
  for (uint16_t g = 0; g < parts; ++g)
    CAF_CHECK(fs::exists(cluster::partition_db(dir.path().string(), g)));
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST(the budgets of a node are shared by its partitions with a floor) {
  CAF_CHECK_EQUAL(cluster::partition_share(128, 8, 4), 16u);
  CAF_CHECK_EQUAL(cluster::partition_share(128, 64, 4), 4u); // the floor
  CAF_CHECK_EQUAL(cluster::partition_share(128, 1, 4), 128u);
  CAF_CHECK_EQUAL(cluster::partition_share(2, 1, 4), 2u); // as configured
  CAF_CHECK_EQUAL(cluster::partition_share(0, 8, 4), 0u); // no bound
  CAF_CHECK_EQUAL(cluster::partition_share(4, 8, 1), 1u);
}

CAF_TEST(the partition count is written once and checked at every start) {
  test::temp_dir d;
  auto dir = d.path().string();
  auto file = d.path() / "partitions";
  // A fresh data dir: the count is written.
  CAF_CHECK(!cluster::check_partition_count(dir, 8));
  std::ifstream in{file};
  std::string text;
  std::getline(in, text);
  CAF_CHECK_EQUAL(text, "8");
  CAF_CHECK(!cluster::check_partition_count(dir, 8));
  auto err = cluster::check_partition_count(dir, 4);
  CAF_REQUIRE(err);
  CAF_CHECK(describe(err).find("cluster.partitions is 4 but") != std::string::npos);
  // Damaged files are refused, never rewritten.
  for (const char* junk : {"", "x\n", "0\n", "257\n", "8\n8\n", "8 \n"}) {
    std::ofstream{file, std::ios::trunc} << junk;
    auto bad = cluster::check_partition_count(dir, 8);
    CAF_CHECK(bad);
    CAF_CHECK(describe(bad).find("does not hold a partition count")
              != std::string::npos);
  }
  // A data dir of a build before partitions (no file, a Raft log): 1.
  test::temp_dir old;
  fs::create_directories(old.path() / "raft");
  CAF_CHECK(cluster::check_partition_count(old.path().string(), 8));
  CAF_CHECK(!fs::exists(old.path() / "partitions"));
  CAF_CHECK(!cluster::check_partition_count(old.path().string(), 1));
  CAF_CHECK(fs::exists(old.path() / "partitions"));
}
