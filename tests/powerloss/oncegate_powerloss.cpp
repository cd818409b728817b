// oncegate_powerloss: the node over the power-loss VFS
// (tests/powerloss/powerloss_vfs.hpp), for tests only: a SIGKILL of this
// process loses exactly the writes that were not yet synced, as a power cut
// would. Never installed, never shipped.
//
// ONCEGATE_MUTANT chooses a build BROKEN ON PURPOSE, which the power-loss
// test must catch (docs/testing.md):
//   skip-fsync  commits without fsync (`store_options::sync_commits = false`)
//   quiet-ack   answers claims when queued; they commit on the store's next
//               mailbox turn (`store_actor_options::unsafe_ack_quiet`)
// ONCEGATE_POWERLOSS_SYNC_DELAY_US adds a disk's flush latency to every sync;
// ONCEGATE_POWERLOSS_VFS=off leaves SQLite's own VFS in place (a control: the
// same mutant under a plain SIGKILL).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gateway/node_main.hpp"
#include "tests/powerloss/powerloss_vfs.hpp"

int main(int argc, char** argv) {
  std::string mutant;
  if (auto m = std::getenv("ONCEGATE_MUTANT"))
    mutant = m;
  if (!mutant.empty() && mutant != "skip-fsync" && mutant != "quiet-ack") {
    std::fprintf(stderr, "oncegate_powerloss: unknown ONCEGATE_MUTANT=%s "
                         "(skip-fsync, quiet-ack)\n", mutant.c_str());
    return 2;
  }
  if (auto d = std::getenv("ONCEGATE_POWERLOSS_SYNC_DELAY_US"))
    oncegate::powerloss::set_sync_delay(
      std::chrono::microseconds(std::strtoll(d, nullptr, 10)));
  auto vfs = std::getenv("ONCEGATE_POWERLOSS_VFS");
  bool use_vfs = vfs == nullptr || std::string{vfs} != "off";
  if (use_vfs && oncegate::powerloss::install(true) != 0) {
    std::fprintf(stderr, "oncegate_powerloss: cannot register the VFS\n");
    return 1;
  }
  oncegate::gateway::run_options ro;
  ro.version = mutant.empty() ? "powerloss-test-build"
                              : "powerloss-test-build-" + mutant;
  ro.tweak = [mutant](oncegate::node_options& n,
                      oncegate::cluster::cluster_options*) {
    if (mutant == "skip-fsync")
      n.store.sync_commits = false;
    else if (mutant == "quiet-ack")
      n.store_actor.unsafe_ack_quiet = true;
  };
  return oncegate::gateway::run_node(argc, argv, ro);
}
