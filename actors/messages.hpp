#pragma once

#include <caf/actor_system_config.hpp>

#include "common/atoms.hpp"
#include "common/errc.hpp"
#include "common/record.hpp"
#include "persistence/store_actor.hpp"

namespace oncegate {

/// Registers every message type and the `oncegate` error category with
/// `cfg`. Call once in each actor system's config constructor (also in test
/// fixtures), so that messages can cross nodes and errors render by name.
void register_types(caf::actor_system_config& cfg);

/// Sets the measured scheduler defaults (docs/benchmarks/scheduler.md): the
/// sharing policy with one worker per two cores (at least one). CAF's own default is work
/// stealing with max(4, cores) workers. Both stay overridable.
void set_scheduler_defaults(caf::actor_system_config& cfg);

} // namespace oncegate
