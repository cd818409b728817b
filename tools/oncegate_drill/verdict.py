"""The verdict: a drill judged from ground truth (the upstream's executions
per key, every answer the senders got, the nodes' SQLite databases), its
findings (violations fail the drill, warnings do not), and the summary
numbers of the report.

Lives here: every check and the reading of a node's `records` table. Must
not: start, stop or fault anything, or send traffic; it is handed what
the drill gathered (traffic.Traffic, upstream counts, databases).
"""

import math
import os
import sqlite3
import time

from .keys import partition_of
from .senders import decided
from .traffic import RESEND_TIMEOUT

# records.state in the node's SQLite (queued and failed: async delivery).
IN_FLIGHT, COMPLETED, IN_DOUBT, QUEUED, FAILED = 0, 1, 2, 3, 4
STATE_NAMES = {IN_FLIGHT: "in_flight", COMPLETED: "completed",
               IN_DOUBT: "in_doubt", QUEUED: "queued", FAILED: "failed"}


def percentile(values, p):
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered), max(1, math.ceil(p / 100.0 * len(ordered))))
    return ordered[k - 1]


def latency_summary(seconds):
    ms = [v * 1000.0 for v in seconds]
    return {"count": len(ms),
            "p50": round(percentile(ms, 50), 1) if ms else None,
            "p99": round(percentile(ms, 99), 1) if ms else None,
            "max": round(max(ms), 1) if ms else None}


class Findings:
    """What a drill found: violations (the drill fails) and warnings (worth
    a look, not a failure of the guarantees it checks)."""

    def __init__(self):
        self.violations = []
        self.warnings = []

    @staticmethod
    def _entry(kind, key, node, detail):
        entry = {"kind": kind}
        if key is not None:
            entry["key"] = key
        if node is not None:
            entry["node"] = node
        if detail is not None:
            entry["detail"] = detail
        return entry

    def violation(self, kind, key=None, node=None, detail=None):
        self.violations.append(self._entry(kind, key, node, detail))

    def warn(self, kind, key=None, node=None, detail=None):
        self.warnings.append(self._entry(kind, key, node, detail))

    def keys(self):
        return {v["key"] for v in self.violations if "key" in v}


def iso_ms(ms):
    """Epoch milliseconds as UTC ISO 8601 (the nodes' format)."""
    ms = int(ms)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + \
        ".%03dZ" % (ms % 1000)


# The faults that take a node out for a while (the others start, resume,
# heal or wait for it).
DISRUPTIVE = ("kill", "term", "restart", "hang", "partition", "disk-full",
              "clock-jump")


def node_databases(data_dir):
    """A node's SQLite files: partition 0's `oncegate.db`, then partition
    g's `oncegate-p<g>.db` (g = 1, 2, ...)."""
    out = [os.path.join(data_dir, "oncegate.db")]
    while os.path.exists(os.path.join(data_dir,
                                      "oncegate-p%d.db" % len(out))):
        out.append(os.path.join(data_dir, "oncegate-p%d.db" % len(out)))
    return out


def read_node_records(data_dir, routes):
    """`read_records` of every partition of the node in `data_dir`: the
    records of all, and the applied index (with several partitions, their
    applied indexes joined by '/')."""
    records, applied = {}, []
    for path in node_databases(data_dir):
        recs, idx = read_records(path, routes)
        records.update(recs)
        applied.append(idx)
    return records, applied[0] if len(applied) == 1 else "/".join(
        str(a) for a in applied)


def read_records(path, routes):
    """{(route, key): (state, owner, first_seen_ms, expires_at_ms)} of one
    SQLite file (read-only) and its applied Raft index (None on a single
    node)."""
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=10)
    try:
        rows = db.execute(
            "SELECT route, key, state, owner, first_seen_ms, expires_at_ms "
            "FROM records WHERE route IN (%s)" % ",".join("?" * len(routes)),
            routes).fetchall()
        meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
    finally:
        db.close()
    return ({(r, k): tuple(rest) for r, k, *rest in rows},
            meta.get("applied_index"))


class Verdict:
    """Judges a drill from ground truth: the upstream's executions per key,
    every answer the senders got, and the nodes' databases once they are
    back and caught up. Each check adds to `findings`; `keys` holds what is
    known about every key, for the report."""

    def __init__(self, sc, traffic, findings):
        self.sc = sc
        self.traffic = traffic
        self.findings = findings
        self.keys = {}
        self.lost = set()
        self.unsettled = set()
        self.dbs = {}
        self.resent = {}
        self.time_faults = {}  # early-purge, renewed-key, bad-stamp: keys

    def check_keys(self, counts, resent, dbs, verified):
        """Executions at most one per key, exactly one per acknowledged key;
        acknowledged keys completed on every node and never executed again;
        executed keys recorded everywhere; `verified` keys resent."""
        self.dbs, self.resent = dbs, resent
        add = self.findings.violation
        for sig in self.traffic.signals:
            n = counts.get(sig.key, 0)
            route = sig.sender.route
            states = {i: db.get((route, sig.key), (None,))[0]
                      for i, db in dbs.items()}
            info = {"key": sig.key, "sender": sig.sender.name,
                    "executions": n, "acknowledged": sig.acked,
                    "in_doubt": sig.in_doubt, "finals": sig.finals}
            if dbs:
                info["states"] = {str(i): STATE_NAMES.get(st, st)
                                  for i, st in states.items()}
            if sig.key in resent:
                info["resent"] = resent[sig.key]
            self.keys[sig.key] = info
            if n > 1:
                add("duplicate-execution", key=sig.key,
                    detail="executed %d times upstream" % n)
            if sig.first_answers > 1:
                add("answered-first-twice", key=sig.key, detail=(
                    "%d answers were first executions" % sig.first_answers))
            if sig.acked and n == 0:
                add("acknowledged-not-executed", key=sig.key, detail=(
                    "acknowledged (%s), never executed" % sig.acked))
            if sig.acked and resent.get(sig.key) == "executed":
                self.lost.add(sig.key)
                add("lost-acknowledged", key=sig.key, detail=(
                    "acknowledged (%s), executed again when resent"
                    % sig.acked))
            for i, st in sorted(states.items()):
                if sig.acked and st == FAILED:
                    self.lost.add(sig.key)
                    add("failed-delivery", key=sig.key, node=i, detail=(
                        "%s, record failed on node %d: past its delivery "
                        "deadline undelivered" % (
                            "accepted (202)" if sig.acked == "accepted" else
                            "acknowledged (%s)" % sig.acked, i)))
                elif sig.acked and st != COMPLETED:
                    self.lost.add(sig.key)
                    add("lost-acknowledged", key=sig.key, node=i, detail=(
                        "acknowledged (%s), record %s on node %d"
                        % (sig.acked, STATE_NAMES.get(st, "missing"), i)))
                elif n > 0 and st is None:
                    self.lost.add(sig.key)
                    add("executed-without-record", key=sig.key, node=i,
                        detail="executed upstream, no record on node %d" % i)
            if sig.key in verified and resent.get(sig.key) not in (
                    "duplicate", "replayed", "in-doubt", "in-flight",
                    "executed"):
                add("unverified", key=sig.key, detail=(
                    "the resent request got %s" % resent.get(
                        sig.key, "no answer within %ds" % RESEND_TIMEOUT)))

    def check_foreign(self, counts, strict):
        """Executions of keys no signal had (a key derived differently
        from the drill's computation, or other traffic on --targets)."""
        foreign = sorted(k for k in counts if k not in self.keys)
        if foreign:
            (self.findings.violation if strict else self.findings.warn)(
                "unknown-executions", detail=(
                    "%d keys executed upstream that no signal had: %s"
                    % (len(foreign), foreign[:5])))
        for key, echoed in self.traffic.key_mismatches[:20]:
            self.findings.violation("key-mismatch", key=key, detail=(
                "the node echoed Idempotency-Key %r" % echoed))

    def check_replicas(self, differ, applied):
        """Records that still differ between caught-up nodes."""
        for (_, key), states in sorted(differ.items())[:50]:
            self.findings.violation("replicas-differ", key=key, detail=(
                "record states by node after convergence: %s (applied index "
                "by node: %s)" % ({i: STATE_NAMES.get(st, "missing")
                                   for i, st in states.items()}, applied)))

    def check_unsettled(self, dbs, strict):
        """Records not completed once every node is back: in doubt is a
        normal outcome (never re-executed); still in flight, after the
        wait for the in-flight deadline sweep, means nobody will ever
        forward, release or doubt it (a violation when `strict`)."""
        owners = {}
        for db in dbs.values():
            for (_, key), (st, owner, _, _) in db.items():
                if st != COMPLETED and key in self.keys:
                    owners[key] = owner
        self.unsettled = set(owners)
        for key in sorted(owners):
            self.keys[key]["owner"] = owners[key]
            if "in_flight" in self.keys[key].get("states", {}).values():
                (self.findings.violation if strict else self.findings.warn)(
                    "stuck-in-flight", key=key, node=owners[key], detail=(
                        "still in flight after recovery and the in-flight "
                        "deadline sweep (owner node %s is up): never "
                        "forwarded, released or doubted; "
                        "executions %d" % (owners[key],
                                           self.keys[key]["executions"])))

    def check_time(self, counts, before, after, resent, now_wall):
        """One clock decides, and it is the real one: judged against the
        drill host's clock, which no fault moves. `counts` are the
        executions before the resend, `before` and `after` the records
        read before and after it.

        - early-purge: a key acknowledged or executed whose TTL (real time
          since its first attempt) has not passed has no record on a node.
        - renewed-key: such a key executed again when resent (a 2xx or 202
          that was not a replay), or its record replaced by the resend (a
          new first_seen).
        - bad-stamp: a record's first_seen is more than [expect]
          stamp-tolerance away from its signal's attempts (first start ..
          last end), or its expires_at is less than a TTL after first_seen
          or more than a TTL after the present (a completion extends it to
          a TTL from the moment it completed)."""
        ttl = self.sc.duration("traffic", "ttl")
        tol = self.sc.duration("expect", "stamp-tolerance")
        t = self.traffic
        spans = {}
        for t_start, t_end, _, _, _, index in t.attempts:
            lo, hi = spans.get(index, (t_start, t_end))
            spans[index] = (min(lo, t_start), max(hi, t_end))
        reported = set()

        def add(kind, key, node, detail):
            if (kind, key, node) in reported:
                return
            reported.add((kind, key, node))
            self.findings.violation(kind, key=key, node=node, detail=detail)
            self.time_faults.setdefault(kind, set()).add(key)

        for sig in t.signals:
            if sig.index not in spans:
                continue
            lo, hi = (t.wall0 + x for x in spans[sig.index])
            live = now_wall < lo + ttl
            kept = sig.acked or counts.get(sig.key, 0) > 0
            rkey = (sig.sender.route, sig.key)
            if live and kept and resent.get(sig.key) in ("executed",
                                                         "in-progress"):
                add("renewed-key", sig.key, None, (
                    "decided %.0fs earlier, TTL %s: executed again when "
                    "resent (%s)" % (now_wall - lo, self.sc.get(
                        "traffic", "ttl"), resent[sig.key])))
            for phase, dbs in (("before", before), ("after", after)):
                for i, db in sorted(dbs.items()):
                    rec = db.get(rkey)
                    if rec is None:
                        if kept and live:
                            add("early-purge", sig.key, i, (
                                "%s, TTL %s not passed (first sent %.0fs "
                                "ago): no record on node %d %s the resend"
                                % ("acknowledged (%s)" % sig.acked
                                   if sig.acked else "executed",
                                   self.sc.get("traffic", "ttl"),
                                   now_wall - lo, i, phase)))
                        continue
                    first, expires = rec[2] / 1000.0, rec[3] / 1000.0
                    prior = before.get(i, {}).get(rkey)
                    if phase == "after" and kept and prior is not None \
                            and prior[2] != rec[2]:
                        add("renewed-key", sig.key, i, (
                            "record replaced by the resend on node %d: "
                            "first_seen %s -> %s" % (
                                i, iso_ms(prior[2]), iso_ms(rec[2]))))
                        continue
                    if first < lo - tol or first > hi + tol:
                        off = first - lo if first < lo else first - hi
                        add("bad-stamp", sig.key, i, (
                            "first_seen %s on node %d is %+.1fs from its "
                            "attempts (%s .. %s, drill host clock; "
                            "tolerance %s)" % (
                                iso_ms(rec[2]), i, off, iso_ms(lo * 1000),
                                iso_ms(hi * 1000),
                                self.sc.get("expect", "stamp-tolerance"))))
                    elif expires < first + ttl - 0.001 \
                            or expires > now_wall + ttl + tol:
                        add("bad-stamp", sig.key, i, (
                            "expires_at %s on node %d is first_seen %+.1fs "
                            "(TTL %s)" % (iso_ms(rec[3]), i, expires - first,
                                          self.sc.get("traffic", "ttl"))))

    def check_late(self, before, after):
        """Executions that reached the upstream after the verdict counted
        (a node forwarding very late): a second one is a duplicate all the
        same. Returns {key: {before, after}}."""
        late = {k: {"before": before.get(k, 0), "after": n}
                for k, n in after.items() if n != before.get(k, 0)}
        for key, c in sorted(late.items()):
            if c["after"] > 1:
                self.findings.violation(
                    "duplicate-execution", key=key, detail=(
                        "executed %d times upstream (%d after the verdict's "
                        "count)" % (c["after"], c["after"] - c["before"])))
                if key in self.keys:
                    self.keys[key]["executions"] = c["after"]
            else:
                self.findings.warn("late-execution", key=key, detail=(
                    "executed upstream only after the drill ended"))
        return late

    def answers(self):
        """Attempts by status (or transport error), overall and by node;
        4xx other than 409 are never right for the drill's traffic."""
        statuses, by_node = {}, {}
        for _, _, node, result, _, _ in self.traffic.attempts:
            name = str(result)
            statuses[name] = statuses.get(name, 0) + 1
            per = by_node.setdefault(str(node), {})
            per[name] = per.get(name, 0) + 1
        unexpected = {k: v for k, v in statuses.items()
                      if k.isdigit() and 400 <= int(k) < 500 and k != "409"}
        if unexpected:
            self.findings.violation("unexpected-answer", detail=(
                "answers the drill's traffic must never get: %s (a route, "
                "secret or fingerprint problem)" % unexpected))
        return dict(sorted(statuses.items())), by_node

    def availability(self, traffic_end, recovery):
        """Windows without a successful decision longer than [expect] gap,
        measured while new signals were sent (the `keys` cap can end that
        early); checks [expect] max-unavailable and min-decided."""
        gap = self.sc.duration("expect", "gap")
        signals = self.traffic.signals
        if signals:
            traffic_end = min(traffic_end,
                              signals[-1].created + 1.0 / self.sc.rate)
        times = sorted(e for _, e, _, r, _, _ in self.traffic.attempts
                       if decided(r) and e <= traffic_end)
        windows = []
        prev = 0.0
        for x in times + [traffic_end]:
            if x - prev > gap:
                windows.append({"start": round(prev, 3), "end": round(x, 3),
                                "duration": round(x - prev, 3)})
            prev = max(prev, x)
        longest = max((w["duration"] for w in windows), default=0.0)
        bound = self.sc.duration("expect", "max-unavailable")
        if bound > 0 and longest > bound:
            self.findings.violation("unavailable-too-long", detail=(
                "no successful decision for %.2fs (bound %s)"
                % (longest, self.sc.get("expect", "max-unavailable"))))
        n_decided = sum(1 for s in signals if s.decided_at is not None)
        floor = self.sc.float("expect", "min-decided", 0, 1)
        if not signals or n_decided < floor * len(signals):
            self.findings.violation("too-few-decisions", detail=(
                "%d of %d signals got a decision (at least %.0f%% wanted)"
                % (n_decided, len(signals), floor * 100)))
        return {"gap_s": gap, "windows": windows,
                "total_s": round(sum(w["duration"] for w in windows), 3),
                "longest_s": round(longest, 3),
                "recovery_s": round(recovery, 3) if recovery is not None
                else None}

    def partition_availability(self, traffic_end, faults):
        """With several partitions: per partition, how long the requests
        to nodes that no fault touched waited for their decision (the
        longest, and the windows longer than [expect] gap in which some
        waited), and whether a fault hit the node leading it (the fault
        log's `led`). A node's loss must pause only the partitions it led:
        a request to a surviving node for a key of another partition is
        answered at once. (A request sent to a node a fault hit waits for
        that node, or fails and its sender retries later: the same
        whatever the partitions, and not counted here.) None with one
        partition."""
        parts = self.sc.partitions
        if parts <= 1:
            return None
        gap = self.sc.duration("expect", "gap")
        hit, touched = set(), set()
        for f in faults:
            if f.get("action") not in DISRUPTIVE:
                continue
            touched.update(f.get("nodes") or ())
            for led in (f.get("led") or {}).values():
                hit.update(led)
        waits = {g: [] for g in range(parts)}
        home = {s.index: partition_of(s.sender.route, s.key, parts)
                for s in self.traffic.signals}
        for start, end, node, result, _, index in self.traffic.attempts:
            if start <= traffic_end and decided(result) and index in home \
                    and node not in touched:
                waits[home[index]].append((start, end))
        out = []
        for g in range(parts):
            spans = sorted(waits[g])
            windows, longest = [], 0.0
            for start, end in spans:
                longest = max(longest, end - start)
                if end - start <= gap:
                    continue
                if windows and start <= windows[-1][1]:
                    windows[-1][1] = max(windows[-1][1], end)
                else:
                    windows.append([start, end])
            out.append({"partition": g, "signals": len(spans),
                        "hit": g in hit,
                        "longest_wait_s": round(longest, 3),
                        "windows": [{"start": round(a, 3), "end": round(b, 3),
                                     "duration": round(b - a, 3)}
                                    for a, b in windows]})

        def worst(flag):
            return max((p["longest_wait_s"] for p in out if p["hit"] == flag),
                       default=None)
        return {"partitions": parts, "gap_s": gap,
                "nodes_measured": sorted({a[2] for a in self.traffic.attempts}
                                         - touched),
                "hit_longest_wait_s": worst(True),
                "others_longest_wait_s": worst(False),
                "per_partition": out}

    def latency(self):
        t = self.traffic
        return {
            "attempt": latency_summary([e - s for s, e, _, r, _, _
                                        in t.attempts if isinstance(r, int)]),
            "decision": latency_summary([s.decided_at - s.created
                                         for s in t.signals
                                         if s.decided_at is not None]),
        }

    def summary(self):
        signals = self.traffic.signals
        states = {}
        for db in self.dbs.values():
            for (_, k), (st, *_) in db.items():
                states.setdefault(STATE_NAMES.get(st, str(st)), set()).add(k)
        by_sender = {}
        for s in signals:
            by_sender[s.sender.name] = by_sender.get(s.sender.name, 0) + 1
        execs = {k: v["executions"] for k, v in self.keys.items()}
        return {
            "signals": len(signals),
            "signals_by_sender": by_sender,
            "attempts": len(self.traffic.attempts),
            "decided": sum(1 for s in signals if s.decided_at is not None),
            "acknowledged": sum(1 for s in signals if s.acked),
            "executed": sum(1 for n in execs.values() if n > 0),
            "duplicates": sum(1 for n in execs.values() if n > 1),
            "lost": len(self.lost),
            "in_doubt_answers": sum(1 for s in signals if s.in_doubt),
            "never_executed": sum(1 for n in execs.values() if n == 0),
            "abandoned": sum(1 for s in signals if s.abandoned),
            "records_in_flight": len(states.get("in_flight", ())),
            "records_in_doubt": len(states.get("in_doubt", ())),
            "records_queued": len(states.get("queued", ())),
            "records_failed": len(states.get("failed", ())),
            "accepted": sum(1 for s in signals if s.acked == "accepted"),
            "resent": len(self.resent),
            "renewed": len(self.time_faults.get("renewed-key", ())),
            "early_purges": len(self.time_faults.get("early-purge", ())),
            "bad_stamps": len(self.time_faults.get("bad-stamp", ())),
            "client_backlog_max_s": round(self.traffic.backlog, 3),
        }

    def evidence(self):
        """Every attempt of the keys worth a look (violations, unsettled)."""
        wanted = self.findings.keys() | self.unsettled
        for t_start, t_end, node, result, outcome, index in \
                self.traffic.attempts:
            key = self.traffic.signals[index].key
            if key in wanted and key in self.keys:
                self.keys[key].setdefault("attempts", []).append(
                    {"node": node, "start": round(t_start, 3),
                     "end": round(t_end, 3), "result": result,
                     "outcome": outcome})
        return ({k: self.keys[k] for k in sorted(self.findings.keys())
                 if k in self.keys},
                {k: self.keys[k] for k in sorted(self.unsettled)})
