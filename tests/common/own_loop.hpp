// A thread's event loop of the tests' own, run by hand: it stands for the
// loops of the threads that run the actors their messages wake (the HTTP
// threads, the Raft thread; common/inline_execution.hpp).
#pragma once

#include <functional>
#include <vector>

#include <caf/actor_system.hpp>

#include "common/inline_execution.hpp"

namespace oncegate::test {

struct own_loop {
  std::vector<std::function<void()>> queued;

  explicit own_loop(caf::actor_system& sys) {
    inline_exec::run_woken_actors_here(
      sys, [this](std::function<void()> fn) { queued.push_back(fn); });
  }

  ~own_loop() {
    inline_exec::stop_running_here();
    queued.clear();
  }

  void run() {
    while (!queued.empty()) {
      auto fn = std::move(queued.front());
      queued.erase(queued.begin());
      fn();
    }
  }
};

} // namespace oncegate::test
