#include "app/cache_coherence.hpp"

namespace oncegate::gateway {

void cache_coherence::attach(webhook_handler* h) {
  std::lock_guard<std::mutex> guard{mtx_};
  handler_ = h;
}

void cache_coherence::applied(const std::vector<persistence::command>& cmds) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (handler_ == nullptr)
    return;
  for (auto& cmd : cmds)
    if (cmd.type == persistence::command::kind::update
        && (cmd.update.op == transition::release
            || cmd.update.op == transition::release_settled))
      handler_->forget_cached(cmd.update.route, cmd.update.key);
}

void cache_coherence::restored() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (handler_ != nullptr)
    handler_->forget_all_cached();
}

} // namespace oncegate::gateway
