#include "replication/raft_node.hpp"

// A follower that learns its leader is gone before Raft's timeout tells it
// (raft_node_impl.hpp, `watch_leader_link`).
//
// Raft makes a follower wait an election timeout (libraft: randomised
// between 1x and 2x) without hearing its leader before it campaigns. When
// the leader's process ends (kill -9, a crash, the OOM killer), its kernel
// closes the node link at once, so the followers know then, not 0.5-1 s
// later. Each then expires its own election timer: libraft's `struct raft`
// fields, on the loop thread that runs libraft; the campaign itself is
// libraft's, with pre-vote. The followers go one after the other, lowest id
// first and two heartbeats apart: a voter that still has a leader turns a
// pre-vote down (Raft's leader stickiness, libraft's `has_leader`), so the
// first to campaign is refused by the second, which campaigns a stagger
// later and gets the first's vote. Two at once would split the vote and
// wait the timeout out after all.
//
// A link that closes while its leader lives (a network fault, a frame we
// refused) costs one refused pre-vote: the other voters still hear the
// leader and keep it; no term changes. A leader whose machine dies or
// hangs closes nothing: then the timeout applies, as before.

#include <chrono>

#include "common/logging.hpp"
#include "replication/raft_node_impl.hpp"

namespace oncegate::cluster {

void raft_node::impl::watch_leader_link() {
  uint64_t leader = 0;
  if (current.role == raft_role::follower && !closing
      && current.leader_id != opts.id)
    leader = current.leader_id;
  bool up = leader != 0 && link::connected(&transport, leader);
  if (leader != watched_leader) {
    watched_leader = leader;
    watched_up = up;
    campaign_at.reset();
    return;
  }
  if (leader == 0)
    return;
  if (up) {
    watched_up = true;
    campaign_at.reset();
    return;
  }
  auto now = detail::clock_type::now();
  if (watched_up) {
    watched_up = false;
    unsigned rank = 0;
    for (unsigned i = 0; i < r.configuration.n; ++i) {
      auto& srv = r.configuration.servers[i];
      if (srv.role == RAFT_VOTER && srv.id != leader && srv.id < opts.id)
        ++rank;
    }
    auto stagger = std::chrono::milliseconds(2 * r.heartbeat_timeout) * rank;
    campaign_at = now + stagger;
    log::cluster()->info("raft.leader_link_closed group={} leader={} "
                         "campaign_in_ms={}",
                         group, leader, stagger.count());
  }
  if (!campaign_at || now < *campaign_at)
    return;
  campaign_at.reset();
  if (r.state != RAFT_FOLLOWER
      || r.follower_state.current_leader.id != leader)
    return;
  // The next tick (every heartbeat timeout) finds the timer expired.
  auto t = r.io->time(r.io);
  auto wait = r.follower_state.randomized_election_timeout;
  r.election_timer_start = t > wait ? t - wait : 0;
}

} // namespace oncegate::cluster
