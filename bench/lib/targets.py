#!/usr/bin/env python3
"""The performance targets (issue #18) and their verdicts, computed from
bench/run.sh's results.csv (python3 stdlib only).

  targets.py results.csv
      prints the rows `targets,<measure>,...` for results.csv, three per
      measure:
        targets,<measure>,value,<measured value or empty>,<unit>
        targets,<measure>,target_max,<bound>,<unit>   (or target_min: >=)
        targets,<measure>,met,<1|0, empty when not measured>,bool
      A measure whose inputs are missing (its scenario group not run or
      failed) has an empty value and an empty met: "not measured".

report.py imports this module for the labels and notes of its Targets
table. Every measure comes from rows of the same run.
"""

import csv
import sys

TOL = 1e-9


def load(path):
    """{(scenario, system): {metric: value string}} of a results.csv."""
    data = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["scenario"] == "targets":
                continue
            data.setdefault((r["scenario"], r["system"]), {})[r["metric"]] = \
                r["value"]
    return data


def _num(v):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x else None  # NaN: none


def _fmt(x, nd=0):
    if x is None:
        return "n/a"
    if nd == 0:
        return "{:,.0f}".format(x).replace(",", " ")
    return "%.*f" % (nd, x)


class Data:
    def __init__(self, data):
        self.d = data

    def v(self, scenario, system, metric):
        return _num(self.d.get((scenario, system), {}).get(metric))

    def ratio(self, a, b):
        return a / b if a is not None and b else None


def _cpu_note(d):
    parts = []
    r = d.v("unique_c50", "redis_always", "cpu_us_per_req")
    if r is not None:
        parts.append("Redis appendfsync always %.1f us per SET" % r)
    n = d.v("duplicates_c50", "nginx", "cpu_us_per_req")
    if n is not None:
        parts.append("nginx %.1f us per request" % n)
    u = d.v("unloaded", "oncegate", "cpu_us_per_req")
    if u is not None:
        parts.append("unloaded (1 connection) %.1f us" % u)
    return "; ".join(parts)


def _exited_note(d, scenario, system):
    e = d.v(scenario, system, "tasks_exited")
    return ("%d thread(s) exited during the run: a lower bound" % e
            if e else "")


def _ctx_note(d):
    parts = []
    r = d.v("unique_c50", "redis_always", "ctx_per_req")
    if r is not None:
        parts.append("Redis appendfsync always %.2f" % r)
    u = d.v("unloaded", "oncegate", "ctx_per_req")
    if u is not None:
        parts.append("unloaded (1 connection) %.2f" % u)
    x = _exited_note(d, "unique_c50", "oncegate")
    if x:
        parts.append(x)
    return "; ".join(parts)


def _rps_note(a, b, an, bn):
    def g(d):
        x, y = d.v(*a), d.v(*b)
        if x is None or y is None:
            return ""
        return "%s %s vs %s %s req/s" % (an, _fmt(x), bn, _fmt(y))
    return g


def _floor_target(d):
    f = d.v("commit_floor", "sqlite_wal_full", "p50_us")
    return None if f is None else f + 150


def _floor_p99_target(d):
    f = d.v("commit_floor", "sqlite_wal_full", "p99_us")
    return None if f is None else f + 500


def _cpu_c1_note(d):
    a = d.v("unloaded", "oncegate", "cpu_us_per_req")
    b = d.v("unique_c50", "oncegate", "cpu_us_per_req")
    if a is None or b is None:
        return ""
    return "1 connection %.1f us, 50 connections %.1f us per request" % (a, b)


def _floor_note(d):
    f50 = d.v("commit_floor", "sqlite_wal_full", "p50_us")
    f99 = d.v("commit_floor", "sqlite_wal_full", "p99_us")
    if f50 is None:
        return "commit floor not measured"
    return ("floor (SQLite WAL synchronous=FULL, one row per commit, same "
            "disk): p50 %s us, p99 %s us" % (_fmt(f50), _fmt(f99)))


def _cluster_cpu_note(d, row):
    """The CPU-bound ratio of a cluster row: the three nodes (and wrk)
    share the cores, so when both runs keep the cores busy the rate ratio
    is about single CPU / cluster CPU per decision."""
    c = d.v(row, "oncegate_cluster3", "cpu_us_per_req")
    lead = d.v(row, "oncegate_cluster3", "cpu_us_per_req_leader")
    single = d.v("unique_c50", "oncegate", "cpu_us_per_req")
    if c is None or single is None or c <= 0:
        return ""
    return ("CPU per decision: 3 nodes %.1f us (leader %s) vs single %.1f us, "
            "CPU-bound ratio %.2f x" % (c, "%.1f" % lead if lead is not None
                                     else "?", single, single / c))


def _https_note(d):
    """The rates, and the CPU-bound ratio: node and upstream share the
    cores, so it is about (http CPU) / (https CPU), both ends summed."""
    parts = [_rps_note(("upstream_c50", "oncegate_https_upstream", "rps"),
                       ("upstream_c50", "oncegate_http_upstream", "rps"),
                       "https", "http")(d)]
    cpu = {}
    for mode in ("http", "https"):
        n = d.v("upstream_c50", "oncegate_%s_upstream" % mode,
                "cpu_us_per_req")
        u = d.v("upstream_c50", "nginx_%s_upstream" % mode, "cpu_us_per_req")
        if n is not None and u is not None:
            cpu[mode] = (n, u)
    if len(cpu) == 2 and sum(cpu["https"]) > 0:
        parts.append("CPU per request, node + upstream: http %.1f + %.1f us, "
                     "https %.1f + %.1f us, CPU-bound ratio %.2f x"
                     % (cpu["http"] + cpu["https"]
                        + (sum(cpu["http"]) / sum(cpu["https"]),)))
    return "; ".join(p for p in parts if p)


def _cluster(via):
    row = "cluster3_%s_c50" % via

    def value(d):
        r = d.v(row, "oncegate_cluster3", "ratio_to_single")
        if r is None:
            r = d.ratio(d.v(row, "oncegate_cluster3", "rps"),
                        d.v("unique_c50", "oncegate", "rps"))
        return r

    def note(d):
        parts = [_rps_note((row, "oncegate_cluster3", "rps"),
                           ("unique_c50", "oncegate", "rps"),
                           "3 nodes", "single")(d)]
        parts.append(_cluster_cpu_note(d, row))
        e = d.v("cluster3_store", "oncegate_cluster3", "elections_during_runs")
        if e:
            parts.append("%d election(s) during the runs" % e)
        return "; ".join(p for p in parts if p)
    return value, note


def _purge_note(d):
    k = d.v("purge_unique_c50", "oncegate", "purge_keys")
    ov = d.v("purge_unique_c50", "oncegate", "purge_overlap")
    p = d.v("purge_unique_c50", "oncegate", "p99_us")
    b = d.v("purge_unique_c50", "oncegate", "no_purge_p99_us")
    core = d.v("unique_c50", "oncegate", "p99_us")
    parts = []
    if p is not None and b is not None:
        parts.append("p99 %s us purging vs %s us right after on the same "
                     "node (median rounds)" % (_fmt(p), _fmt(b)))
    if p is not None and core is not None and core > 0:
        parts.append("%.2f x the core group's unique p99 (%s us)"
                     % (p / core, _fmt(core)))
    if k is not None:
        parts.append("%s expired records%s" % (
            _fmt(k), "" if k >= 1_000_000 else " (target is for 1M)"))
    if ov is not None:
        parts.append("purge lasted %.0f%% of the measured run" % (ov * 100))
    return "; ".join(parts)


def _big_note(d):
    k = d.v("big_store_restart", "oncegate", "keys")
    if k is None:
        return ""
    return "%s keys stored%s" % (
        _fmt(k), "" if k >= 10_000_000 else " (target is for 10M)")


def _rss_note(which):
    def g(d):
        live = d.v("memory_" + which, "oncegate", "live_actors")
        return "" if live is None else "%s live actors" % _fmt(live)
    return g


def _passivation_note(d):
    s = d.v("passivation", "oncegate", "seconds_to_zero")
    k = d.v("passivation", "oncegate", "keys")
    if s is None:
        return ""
    return "%s live -> 0 in %.1f s after the load" % (_fmt(k), s)


def _const(x):
    return lambda d: x


def _get(s, sysname, m):
    return lambda d: d.v(s, sysname, m)


def _ratio(a, b):
    return lambda d: d.ratio(d.v(*a), d.v(*b))


_cl_lead = _cluster("leader")
_cl_fol = _cluster("follower")

# (id, label, unit, op, target(d), value(d), note(d), decimals)
TARGETS = [
    ("cpu_per_unique", "Server CPU per unique request (50 connections)",
     "us", "le", _const(40), _get("unique_c50", "oncegate", "cpu_us_per_req"),
     _cpu_note, 1),
    ("cpu_per_duplicate", "Server CPU per duplicate (50 connections)",
     "us", "le", _const(10),
     _get("duplicates_c50", "oncegate", "cpu_us_per_req"),
     lambda d: "; ".join(p for p in (
         "nginx %.1f us per request" % d.v("duplicates_c50", "nginx",
                                          "cpu_us_per_req")
         if d.v("duplicates_c50", "nginx", "cpu_us_per_req") is not None
         else "", _exited_note(d, "duplicates_c50", "oncegate")) if p), 1),
    ("ctx_per_unique",
     "Context switches per unique request (all threads, 50 connections)",
     "count", "le", _const(1), _get("unique_c50", "oncegate", "ctx_per_req"),
     _ctx_note, 2),
    ("unique_vs_redis_always",
     "Unique keys / Redis appendfsync always (req/s)", "x", "ge",
     _const(0.6), _ratio(("unique_c50", "oncegate", "rps"),
                         ("unique_c50", "redis_always", "rps")),
     _rps_note(("unique_c50", "oncegate", "rps"),
               ("unique_c50", "redis_always", "rps"), "oncegate", "Redis"),
     3),
    ("duplicates_vs_nginx", "Duplicates / nginx return 200 (req/s)", "x",
     "ge", _const(0.8), _ratio(("duplicates_c50", "oncegate", "rps"),
                               ("duplicates_c50", "nginx", "rps")),
     _rps_note(("duplicates_c50", "oncegate", "rps"),
               ("duplicates_c50", "nginx", "rps"), "oncegate", "nginx"), 3),
    ("unloaded_p50_vs_floor",
     "Unloaded unique p50 <= bare commit p50 + 150 us", "us", "le",
     _floor_target, _get("unloaded", "oncegate", "p50_us"), _floor_note, 0),
    ("unloaded_p99", "Unloaded unique p99", "us", "le", _const(1000),
     _get("unloaded", "oncegate", "p99_us"), lambda d: "", 0),
    # #31: the tail against the disk's, CPU at one connection, idle CPU,
    # CPU against Redis.
    ("unloaded_p99_vs_floor",
     "Unloaded unique p99 <= bare commit p99 + 500 us", "us", "le",
     _floor_p99_target, _get("unloaded", "oncegate", "p99_us"), _floor_note,
     0),
    # The same two bounds in the node's own request histogram (the
    # client's view above adds wrk's wake-ups on the same cores).
    ("unloaded_node_p50_vs_floor",
     "Unloaded unique p50, the node's histogram <= bare commit p50 + 150 us",
     "us", "le", _floor_target, _get("unloaded", "oncegate", "node_p50_us"),
     _floor_note, 0),
    ("unloaded_node_p99_vs_floor",
     "Unloaded unique p99, the node's histogram <= bare commit p99 + 500 us",
     "us", "le", _floor_p99_target,
     _get("unloaded", "oncegate", "node_p99_us"), _floor_note, 0),
    ("cpu_c1_vs_c50",
     "CPU per request: 1 connection / 50 connections", "x", "le",
     _const(2), _ratio(("unloaded", "oncegate", "cpu_us_per_req"),
                       ("unique_c50", "oncegate", "cpu_us_per_req")),
     _cpu_c1_note, 2),
    ("idle_cpu", "Idle node (no traffic): CPU, % of one core", "%", "le",
     _const(1), _get("idle", "oncegate", "cpu_pct"),
     lambda d: "over %s s" % _fmt(d.v("idle", "oncegate", "seconds")), 2),
    ("cpu_vs_redis_always",
     "CPU per unique request / Redis appendfsync always per SET (50 "
     "connections)", "x", "le", _const(2.5),
     _ratio(("unique_c50", "oncegate", "cpu_us_per_req"),
            ("unique_c50", "redis_always", "cpu_us_per_req")), _cpu_note, 2),
    ("cluster_follower_unloaded_p50",
     "3-node cluster, unloaded via a follower: p50", "us", "le",
     _const(1000), _get("cluster3_follower_unloaded", "oncegate_cluster3",
                        "p50_us"), lambda d: "", 0),
    ("cluster_follower_unloaded_p99",
     "3-node cluster, unloaded via a follower: p99", "us", "le",
     _const(3000), _get("cluster3_follower_unloaded", "oncegate_cluster3",
                        "p99_us"), lambda d: "", 0),
    ("cluster_leader_vs_single",
     "3-node cluster via the leader / single node (req/s)", "x", "ge",
     _const(0.6), _cl_lead[0], _cl_lead[1], 3),
    ("cluster_follower_vs_single",
     "3-node cluster via a follower / single node (req/s)", "x", "ge",
     _const(0.6), _cl_fol[0], _cl_fol[1], 3),
    ("purge_p99_ratio", "Purge under load: p99 / no-purge p99", "x", "le",
     _const(1.5), _get("purge_unique_c50", "oncegate", "p99_ratio"),
     _purge_note, 3),
    ("https_vs_http_upstream",
     "HTTPS upstream / http upstream (req/s, 50 connections)", "x", "ge",
     _const(0.9), _ratio(("upstream_c50", "oncegate_https_upstream", "rps"),
                         ("upstream_c50", "oncegate_http_upstream", "rps")),
     _https_note, 3),
    # The earlier targets that #18 does not restate.
    ("big_store_unique", "Big store (10M keys): unique keys", "req/s", "ge",
     _const(25000), _get("big_store_unique_c50", "oncegate", "rps"),
     _big_note, 0),
    ("restart_to_ready", "Restart to ready with 10M keys (median)", "ms",
     "le", _const(1000),
     _get("big_store_restart", "oncegate", "ready_ms_median"), _big_note, 1),
    ("rss_per_actor_small", "RSS per live key actor (small)", "bytes", "le",
     _const(2048), _get("memory_small", "oncegate", "bytes_per_actor"),
     _rss_note("small"), 0),
    ("rss_per_actor_large", "RSS per live key actor (large)", "bytes", "le",
     _const(2048), _get("memory_large", "oncegate", "bytes_per_actor"),
     _rss_note("large"), 0),
    ("passivation_live_after", "Idle actors passivate: live actors after",
     "count", "le", _const(0), _get("passivation", "oncegate", "live_after"),
     _passivation_note, 0),
]
IDS = [t[0] for t in TARGETS]


def evaluate(data):
    """[{id, label, unit, op, target, value, met, note}] for `data` as
    load() returns it; value/target None and met None when not measured."""
    d = Data(data)
    out = []
    for tid, label, unit, op, tfn, vfn, nfn, nd in TARGETS:
        target, value = tfn(d), vfn(d)
        met = None
        if target is not None and value is not None:
            met = (value <= target + TOL) if op == "le" \
                else (value >= target - TOL)
        out.append({"id": tid, "label": label, "unit": unit, "op": op,
                    "target": target, "value": value, "met": met,
                    "note": nfn(d) if value is not None else "",
                    "decimals": nd})
    return out


def _num_str(x, nd):
    """x with at most nd decimals, trailing zeros dropped; "" for None."""
    if x is None:
        return ""
    text = "%.*f" % (nd, x)
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    for t in evaluate(load(argv[1])):
        nd = t["decimals"]
        print("targets,%s,value,%s,%s" % (t["id"],
                                          _num_str(t["value"], nd + 1),
                                          t["unit"]))
        print("targets,%s,target_%s,%s,%s" % (
            t["id"], "max" if t["op"] == "le" else "min",
            _num_str(t["target"], max(nd, 3)), t["unit"]))
        print("targets,%s,met,%s,bool" % (
            t["id"], "" if t["met"] is None else int(t["met"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
