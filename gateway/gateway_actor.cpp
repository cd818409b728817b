#include "gateway/gateway_actor.hpp"

#include <atomic>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

namespace oncegate::gateway {

namespace {

// A claim handed over by an asio thread. Local only: it carries a callback.
struct claim_job {
  claim_request req;
  std::function<void(claim_reply)> done;
};

} // namespace

} // namespace oncegate::gateway

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(oncegate::gateway::claim_job)

namespace oncegate::gateway {

namespace {

caf::behavior gateway_impl(caf::event_based_actor* self, node n,
                           gateway_actor_options opts) {
  return {
    [self, n, opts](claim_job& job) {
      auto& shard = n.shard_for(job.req.route, job.req.key);
      auto done = std::move(job.done);
      self->request(shard, opts.claim_timeout, claim_atom::value,
                    std::move(job.req))
        .then(
          [done](claim_result& res) {
            claim_reply reply;
            reply.ok = true;
            reply.result = std::move(res);
            done(std::move(reply));
          },
          [self, done](caf::error& err) {
            claim_reply reply;
            reply.error = errc_of(err);
            if (err == caf::sec::request_timeout)
              reply.error = errc::timeout;
            reply.detail = self->system().render(err);
            done(std::move(reply));
          });
    },
  };
}

class gateway_service : public claim_service {
public:
  gateway_service(caf::actor_system& sys, const node& n,
                  gateway_actor_options opts) {
    for (size_t i = 0; i < std::max<size_t>(opts.actors, 1); ++i)
      actors_.push_back(sys.spawn(gateway_impl, n, opts));
  }

  ~gateway_service() override {
    for (auto& hdl : actors_)
      caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
  }

  void claim(claim_request req,
             std::function<void(claim_reply)> done) override {
    auto i = next_.fetch_add(1, std::memory_order_relaxed) % actors_.size();
    caf::anon_send(actors_[i], claim_job{std::move(req), std::move(done)});
  }

private:
  std::vector<caf::actor> actors_;
  std::atomic<size_t> next_{0};
};

} // namespace

std::unique_ptr<claim_service>
make_gateway_service(caf::actor_system& sys, const node& n,
                     gateway_actor_options opts) {
  return std::make_unique<gateway_service>(sys, n, opts);
}

} // namespace oncegate::gateway
