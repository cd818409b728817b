#pragma once

#include <caf/atom.hpp>

namespace oncegate {

// Every atom of oncegate, in one place (CAF 0.17: at most 10 characters).

/// Claim a key: decide new / duplicate / mismatch and make it durable.
using claim_atom = caf::atom_constant<caf::atom("claim")>;
/// Change a record's state (complete, release, in doubt).
using update_atom = caf::atom_constant<caf::atom("update")>;
/// Read a stored record.
using get_atom = caf::atom_constant<caf::atom("get")>;
/// Delete expired records (one bounded chunk).
using purge_atom = caf::atom_constant<caf::atom("purge")>;
/// Commit the store's open batch.
using flush_atom = caf::atom_constant<caf::atom("flush")>;
/// Idle passivation of a key actor (timer and registry hand-shake).
using idle_atom = caf::atom_constant<caf::atom("idle")>;
/// The alarm actor's delayed wake-up.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// Counters and gauges of an actor.
using stats_atom = caf::atom_constant<caf::atom("stats")>;
/// List records in one state.
using list_atom = caf::atom_constant<caf::atom("list")>;
/// Number of stored records.
using count_atom = caf::atom_constant<caf::atom("count")>;
/// Earliest expiry in the store.
using next_atom = caf::atom_constant<caf::atom("next")>;
/// Drop every live key actor of a registry (leadership changed).
using reset_atom = caf::atom_constant<caf::atom("reset")>;
/// Cluster membership: add a node (as spare, then voter) / remove one.
using add_atom = caf::atom_constant<caf::atom("add")>;
using remove_atom = caf::atom_constant<caf::atom("remove")>;
/// Hand Raft leadership to another node.
using transfer_atom = caf::atom_constant<caf::atom("transfer")>;
/// Turn a node's in-flight records of an earlier run into in-doubt.
using doubt_atom = caf::atom_constant<caf::atom("doubt")>;
/// Whether the store commits (readiness).
using ready_atom = caf::atom_constant<caf::atom("ready")>;
/// Read the delivery queue (queued records due).
using due_atom = caf::atom_constant<caf::atom("due")>;
/// Read, pause or resume a route (`pause_op`).
using pause_atom = caf::atom_constant<caf::atom("pause")>;

} // namespace oncegate
