// oncegate_mutant: the node as the tests need it, never installed, never
// shipped. Without any of the variables below it is the product.
//
// ONCEGATE_MUTANT=NAME   a build BROKEN ON PURPOSE at one mutation point
//                        (common/mutant.hpp; the list and the test that
//                        must catch each: docs/testing.md)
// ONCEGATE_MUTANT_TRACE  a file the mutation point names itself in once it
//                        was reached (a test that fails without reaching it
//                        did not catch the mutant)
// ONCEGATE_POWERLOSS_VFS=on   SQLite over the power-loss VFS
//                        (tests/powerloss/powerloss_vfs.hpp): a SIGKILL of
//                        this process is a power cut
// ONCEGATE_POWERLOSS_SYNC_DELAY_US   a disk's flush latency for that VFS
// ONCEGATE_COMMIT_FAULT_FILE   while this file exists every COMMIT fails
// ONCEGATE_COMMIT_HOLD_FILE    while this file exists every COMMIT waits
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "app/node_main.hpp"
#include "tests/mutants/commit_fault.hpp"
#include "tests/mutants/mutant.hpp"
#include "tests/powerloss/powerloss_vfs.hpp"

namespace {

bool env_on(const char* name) {
  auto v = std::getenv(name);
  return v != nullptr && std::string{v} == "on";
}

} // namespace

int main(int argc, char** argv) {
  namespace mutant = oncegate::mutant;
  auto name = mutant::current();
  if (name != nullptr && !mutant::valid(name)) {
    std::string all;
    for (auto p = mutant::known(); *p != nullptr; ++p)
      all += std::string{all.empty() ? "" : ", "} + *p;
    std::fprintf(stderr, "oncegate_mutant: unknown ONCEGATE_MUTANT=%s (%s)\n",
                 name, all.c_str());
    return 2;
  }
  if (auto d = std::getenv("ONCEGATE_POWERLOSS_SYNC_DELAY_US"))
    oncegate::powerloss::set_sync_delay(
      std::chrono::microseconds(std::strtoll(d, nullptr, 10)));
  if (env_on("ONCEGATE_POWERLOSS_VFS")
      && oncegate::powerloss::install(true) != 0) {
    std::fprintf(stderr, "oncegate_mutant: cannot register the VFS\n");
    return 1;
  }
  if (!oncegate::test::install_commit_fault_from_env()) {
    std::fprintf(stderr, "oncegate_mutant: cannot install the commit fault\n");
    return 1;
  }
  oncegate::gateway::run_options ro;
  ro.version = name == nullptr ? "test-build"
                               : std::string{"mutant-build-"} + name;
  ro.tweak = [](oncegate::node_options& n, oncegate::cluster::cluster_options*) {
    // Commits without fsync: synchronous=NORMAL, the WAL is synced only at
    // checkpoints (the cluster nodes' setting, where Raft is the record).
    if (ONCEGATE_MUTANT("skip-fsync"))
      n.store.sync_commits = false;
  };
  return oncegate::gateway::run_node(argc, argv, ro);
}
