"""Faults: the scenario's schedule applied to the nodes under traffic
(SIGKILL, SIGTERM, start, restart with a leadership transfer, SIGSTOP and
SIGCONT, partitions, full disks, wall clock steps, the upstream down and
back, waiting for readiness),
each logged with what happened.

Lives here: when a fault happens, whom it hits and the one call that does
it. Must not: parse schedule lines (scenario.py), own processes
(cluster.py), namespaces (netlab.py) or clocks (clock.py), or judge
(verdict.py); a fault that fails is a `fault-failed` finding.
"""

import time

from .base import DrillError, log, wait_until
from .clock import format_offset
from .cluster import LEADER_TIMEOUT, STOP_TIMEOUT
from .report import format_fault
from .verdict import DISRUPTIVE


class FaultFailed(Exception):
    """A fault could not be applied because the nodes misbehaved."""


class FaultSkipped(Exception):
    """A fault that cannot be applied here; the message says why."""


class FaultSchedule:
    """The fault half of a Drill (drill.py mixes it in): the schedule run
    against drill time, each fault's targets resolved (leader, follower,
    random, all, a node id, an `as=` name) and applied by `do_ACTION`.
    Uses the drill's cluster, traffic clock, rng, netlab, disks, clock,
    findings and fault log."""

    def sleep_until(self, at):
        """Waits for drill time `at` (a schedule, not a condition), noting
        nodes that exit on their own meanwhile."""
        while True:
            self.cluster.reap_crashes()
            left = at - self.traffic.now()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def resolve(self, fault):
        t = fault.target
        c = self.cluster
        if t in ("leader", "follower"):
            lid = c.wait_leader(timeout=LEADER_TIMEOUT)
            if lid is None:
                raise FaultFailed("no ready leader within %ds: %s"
                                  % (LEADER_TIMEOUT, c.statuses()))
            if t == "leader":
                return [lid]
            others = [i for i in c.serving() if i != lid]
            if not others:
                raise FaultFailed("no serving follower")
            return [self.rng.choice(others)]
        if t == "busiest" or t.startswith("leader-of-"):
            leaders = wait_until(c.agreed_partition_leaders, LEADER_TIMEOUT,
                                 0.05)
            if leaders is None:
                raise FaultFailed("the nodes do not agree on the partitions' "
                                  "leaders within %ds: %s"
                                  % (LEADER_TIMEOUT, c.statuses()))
            if t == "busiest":
                counts = {}
                for lid in leaders.values():
                    counts[lid] = counts.get(lid, 0) + 1
                return [max(sorted(counts), key=lambda i: counts[i])]
            k = t[len("leader-of-"):]
            if not k.isdigit() or int(k) not in leaders:
                raise FaultFailed("no partition %s (the cluster has %d)"
                                  % (k, len(leaders)))
            return [leaders[int(k)]]
        if t == "random":
            serving = c.serving()
            if not serving:
                raise FaultFailed("no serving node")
            return [self.rng.choice(serving)]
        if t == "all":
            return c.ids()
        if t == "upstream":
            return []  # the drill's counting upstream, not a node
        if t.isdigit():
            if int(t) not in c.nodes:
                raise FaultFailed("no node %s" % t)
            return [int(t)]
        if t in self.bindings:
            return self.bindings[t]
        raise FaultFailed("unknown target %r (not leader, follower, busiest, "
                          "leader-of-K, random, all, a node id or an as= "
                          "name)" % t)

    def run_faults(self):
        cycle_start = 0.0
        last_done = 0.0
        for cycle in range(self.sc.repeat):
            for fault in self.sc.faults:
                offset = self.rng.uniform(*fault.span)
                at = (last_done if fault.relative else cycle_start) + offset
                self.sleep_until(at)
                self.apply(fault, cycle)
                last_done = self.traffic.now()
            cycle_start = last_done
        return last_done

    def apply(self, fault, cycle):
        entry = {"at": round(self.traffic.now(), 3), "cycle": cycle,
                 "fault": fault.text, "action": fault.action,
                 "target": fault.target}
        try:
            if fault.needs_process_control and self.mode == "targets":
                raise FaultSkipped("no process control over --targets nodes")
            ids = self.resolve(fault)
            entry["nodes"] = ids
            if self.sc.partitions > 1 and ids \
                    and fault.action in DISRUPTIVE:
                # Which partitions the nodes it hits lead (the verdict's
                # per-partition waits are read against them).
                leaders = self.cluster.agreed_partition_leaders() or {}
                entry["led"] = {str(i): sorted(g for g, lid in leaders.items()
                                               if lid == i) for i in ids}
            if "as" in fault.options:
                self.bindings[fault.options["as"]] = ids
            entry["result"] = getattr(
                self, "do_" + fault.action.replace("-", "_"))(ids, fault)
        except FaultSkipped as e:
            entry["skipped"] = str(e)
            if not any(s["reason"] == str(e) for s in self.skipped):
                self.skipped.append({"fault": fault.text, "reason": str(e)})
        except FaultFailed as e:
            entry["error"] = str(e)
            self.findings.violation("fault-failed",
                                    detail="%s: %s" % (fault.text, e))
        entry["done"] = round(self.traffic.now(), 3)
        self.fault_log.append(entry)
        if not self.args.quiet:
            log("drill: %s" % format_fault(entry))

    def node(self, i):
        return self.cluster.nodes[i]

    def do_kill(self, ids, fault):
        done = []
        for i in ids:
            n = self.node(i)
            if n.state != "down":
                pid = n.pid
                n.kill()
                done.append("node %d (pid %d) killed" % (i, pid))
        return "; ".join(done) or "nothing running"

    def do_term(self, ids, fault):
        done = []
        for i in ids:
            n = self.node(i)
            if n.state != "down":
                code = n.term()
                done.append("node %d stopped, exit %s" % (i, code))
                if code != 0:
                    self.findings.violation("unclean-stop", node=i, detail=(
                        "SIGTERM: exit code %s (None: still running after "
                        "%ds, killed)" % (code, STOP_TIMEOUT)))
        return "; ".join(done) or "nothing running"

    def do_start(self, ids, fault):
        done = []
        for i in ids:
            n = self.node(i)
            if n.state == "down":
                try:
                    n.start(self.prefix)
                except DrillError as e:
                    raise FaultFailed(str(e))
                done.append("node %d started (pid %d)" % (i, n.pid))
        return "; ".join(done) or "all running"

    def do_restart(self, ids, fault):
        done = []
        for i in ids:
            if self.clustered and self.cluster.leader() == i:
                # No `to`: any voter (`to=0` is refused, see docs/drills.md).
                status, body = self.cluster.post(i, "/v1/cluster/transfer")
                moved = status == 200 and wait_until(
                    lambda: self.cluster.leader() not in (i, None),
                    LEADER_TIMEOUT)
                if not moved:
                    self.findings.warn("transfer-failed", node=i, detail=(
                        "leadership transfer before the restart: %s %s"
                        % (status, body[:200].decode(errors="replace"))))
                done.append("node %d handed leadership to node %s"
                            % (i, self.cluster.leader()))
            done.append(self.do_term([i], fault))
            done.append(self.do_start([i], fault))
            done.append(self.do_wait_ready([i], fault))
        return "; ".join(done)

    def do_hang(self, ids, fault):
        for i in ids:
            if self.node(i).state == "up":
                self.node(i).hang()
        return "SIGSTOP node %s" % ",".join(map(str, ids))

    def do_resume(self, ids, fault):
        hung = [i for i in ids if self.node(i).state == "hung"]
        for i in hung:
            self.node(i).resume()
        return "SIGCONT node %s" % ",".join(map(str, hung)) if hung \
            else "nothing hung"

    def do_partition(self, ids, fault):
        mode = fault.options.get("mode", "peers")
        for i in ids:
            self.netlab.partition(i, mode)
        return "node %s cut off (%s)" % (",".join(map(str, ids)), mode)

    def do_heal(self, ids, fault):
        cut = [i for i in ids if i in self.netlab.partitioned]
        for i in cut:
            self.netlab.heal(i)
        return "node %s reconnected" % ",".join(map(str, cut)) if cut \
            else "nothing partitioned"

    def do_disk_full(self, ids, fault):
        done = []
        for i in ids:
            taken = self.disks.fill(self.node(i).data_dir)
            done.append("node %d disk filled (+%d KiB)" % (i, taken >> 10))
        return "; ".join(done)

    def do_disk_free(self, ids, fault):
        for i in ids:
            self.disks.free(self.node(i).data_dir)
        return "node %s disk freed" % ",".join(map(str, ids))

    def do_clock_jump(self, ids, fault):
        """Steps the nodes' wall clocks by `by` (running or down: a node
        started later reads the stepped clock at its start)."""
        done = []
        for i in ids:
            now = self.clock.step(i, fault.step)
            done.append("node %d wall clock %s (now %s from real time)"
                        % (i, format_offset(fault.step), format_offset(now)))
        return "; ".join(done)

    def do_upstream_down(self, ids, fault):
        """The order service goes away: the counting upstream stops
        listening and cuts every open connection (drill.py)."""
        return self.upstream_outage(True)

    def do_upstream_up(self, ids, fault):
        return self.upstream_outage(False)

    def do_pause_route(self, ids, fault):
        return self.switch_route(ids, "pause")

    def do_resume_route(self, ids, fault):
        return self.switch_route(ids, "resume")

    def switch_route(self, ids, action):
        """Pauses or resumes the TradingView route through node ids[0]
        (`oncegate routes pause`): acknowledged once every partition holds
        it; a node that cannot tell yet (503) is asked again until
        [expect] recovery."""
        route = self.sc.get("traffic", "tradingview-route")
        path = "/v1/routes/%s/%s" % (route, action)
        t0 = time.monotonic()
        answer = {}

        def done():
            status, body = self.cluster.post(ids[0], path)
            answer["last"] = (status, body)
            return status == 200
        if not wait_until(done, self.sc.duration("expect", "recovery"), 0.1):
            raise FaultFailed("%s of route %s through node %d not "
                              "acknowledged: %r" % (action, route, ids[0],
                                                    answer.get("last")))
        return "route %s %s by node %d after %.2fs" % (
            route, "paused" if action == "pause" else "resumed", ids[0],
            time.monotonic() - t0)

    def do_wait_ready(self, ids, fault):
        t0 = time.monotonic()
        # Up nodes, and nodes down only until their due restart (one that
        # exited asking for it, already reaped): the next fault expects
        # them back.
        ids = [i for i in ids if self.node(i).can_serve
               or self.cluster.restart_pending(i)]

        def ready():
            # The supervisor goes on meanwhile: a node that exited asking
            # for a restart (a disk that was full) is restarted when due.
            self.cluster.reap_crashes()
            return all(self.cluster.ready(i) for i in ids)
        if not wait_until(ready, self.sc.duration("expect", "recovery"),
                          0.05):
            raise FaultFailed("node %s not ready within %s: %s" % (
                ",".join(map(str, ids)), self.sc.get("expect", "recovery"),
                self.cluster.statuses()))
        return "ready after %.2fs" % (time.monotonic() - t0)
