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
// The first campaigns one heartbeat after the link closed, so that a link
// that only flapped (it reconnects meanwhile) changes nothing; an expiry
// libraft has not acted on yet is undone when the link comes back. A link
// that stays down while its leader lives (a network fault on one path, a
// frame we refused) costs one refused pre-vote: the other voters still
// hear the leader and keep it; no term changes. If the leader's links to a
// majority go down together while it lives, the followers elect another
// leader (0.2-0.3 s), where before they would have waited for the links to
// come back within the election timeout: a leadership change, never two
// leaders of one term. The stagger assumes the voters agree on the
// configuration; while a change is in flight two may share a rank, split
// the vote and wait out the timeout as before. A leader whose machine dies
// or hangs closes nothing: then the timeout applies, as before.

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
    expired_timer.reset();
    return;
  }
  if (leader == 0)
    return;
  if (up) {
    // Back before the campaign: a flap, not a death. Undo an expiry that
    // libraft has not acted on (a heartbeat since has reset the timer).
    if (expired_timer && r.state == RAFT_FOLLOWER
        && r.election_timer_start == expired_timer->second)
      r.election_timer_start = expired_timer->first;
    expired_timer.reset();
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
    // One heartbeat first (a link that only flapped reconnects meanwhile),
    // then two per rank.
    auto stagger = std::chrono::milliseconds(r.heartbeat_timeout)
                   * (1 + 2 * rank);
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
  auto before = r.election_timer_start;
  r.election_timer_start = t > wait ? t - wait : 0;
  expired_timer = std::make_pair(before, r.election_timer_start);
}

} // namespace oncegate::cluster
