#include "actors/messages.hpp"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <string>

#include <caf/message.hpp>

#include "actors/alarm_actor.hpp"
#include "actors/key_actor.hpp"
#include "actors/registry.hpp"

namespace oncegate {

void set_scheduler_defaults(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  // Half the cores: the HTTP threads and the store's own thread need the
  // rest, and every worker that sleeps and wakes per message costs a
  // context switch (2 cores, unique keys at 50 connections: one worker 1.2
  // switches per decision against 2.4 with two, 47-48 us of CPU against
  // 49-53 us, the same throughput; docs/benchmarks/scheduler.md).
  cfg.set("scheduler.max-threads",
          static_cast<size_t>(
            std::max(1u, std::thread::hardware_concurrency() / 2)));
}

void register_types(caf::actor_system_config& cfg) {
  // CAF 0.17's add_error_category<T> does not compile; render by hand.
  cfg.add_error_category(errc_category, [](uint8_t code, caf::atom_value,
                                           const caf::message& ctx) {
    return describe(static_cast<errc>(code), ctx);
  });
  cfg.add_message_type<record_state>("oncegate.record_state");
  cfg.add_message_type<decision>("oncegate.decision");
  cfg.add_message_type<record>("oncegate.record");
  cfg.add_message_type<claim_request>("oncegate.claim_request");
  cfg.add_message_type<claim_result>("oncegate.claim_result");
  cfg.add_message_type<lookup_result>("oncegate.lookup_result");
  cfg.add_message_type<transition>("oncegate.transition");
  cfg.add_message_type<record_update>("oncegate.record_update");
  cfg.add_message_type<update_result>("oncegate.update_result");
  cfg.add_message_type<purge_result>("oncegate.purge_result");
  cfg.add_message_type<record_page>("oncegate.record_page");
  cfg.add_message_type<delivery_queue>("oncegate.delivery_queue");
  cfg.add_message_type<pause_op>("oncegate.pause_op");
  cfg.add_message_type<route_pause>("oncegate.route_pause");
  cfg.add_message_type<route_pauses>("oncegate.route_pauses");
  cfg.add_message_type<histogram>("oncegate.histogram");
  cfg.add_message_type<unsettled_count>("oncegate.unsettled_count");
  cfg.add_message_type<persistence::store_stats>("oncegate.store_stats");
  cfg.add_message_type<registry_stats>("oncegate.registry_stats");
  cfg.add_message_type<alarm_stats>("oncegate.alarm_stats");
  cfg.add_message_type<persistence::store_actor>("oncegate.store_actor");
  cfg.add_message_type<key_actor>("oncegate.key_actor");
  cfg.add_message_type<registry_actor>("oncegate.registry_actor");
}

} // namespace oncegate
