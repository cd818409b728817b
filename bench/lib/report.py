#!/usr/bin/env python3
"""Turns bench/run.sh's results.csv into results.md and the gnuplot data
files throughput.dat and latency.dat (python3 stdlib only).

  report.py --csv results.csv --machine machine.txt --failures failures.txt
            --timings timings.txt --total SECONDS --out DIR
"""

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import targets as targets_mod  # noqa: E402

# (scenario id, title, what it measures)
SCENARIOS = [
    ("commit_floor", "1a. Bare commit floor (SQLite)",
     "bench/commit_floor on the data dirs' disk, before the core node starts: "
     "one SQLite connection, WAL, synchronous=FULL, one-row transactions "
     "(BEGIN, INSERT, COMMIT) back to back for BENCH_SECONDS; each "
     "transaction timed."),
    ("unloaded", "1. Unloaded latency",
     "1 connection (wrk -t1 -c1), every request a new key (durable commit). "
     "cpu_us_per_req: server CPU (utime+stime, /proc/PID/stat) over the run "
     "/ requests; ctx_per_req: voluntary + nonvoluntary context switches of "
     "all its threads / requests."),
    ("unique_c50", "2a. Unique keys, 50 connections (vs Redis)",
     "oncegate: wrk -t2 -c50 unique.lua, every request a new key, committed "
     "with fsync before the answer. Redis: redis-benchmark -c 50 "
     "`SET key:__rand_int__ 1 NX EX 86400` with an append-only file "
     "(appendfsync always / everysec)."),
    ("duplicates_c50", "2b. Duplicates, 50 connections (vs nginx)",
     "duplicates.lua over a primed pool of keys: every answer a 409 from a "
     "warm key actor. nginx: the same script against `return 200` "
     "(CPU: master and worker)."),
    ("mix_c50", "2c. 90% duplicates / 10% new keys, 50 connections",
     "mix.lua."),
    ("hot_c50", "2d. One hot key, 50 connections",
     "hot.lua: every request meets the same key actor (409)."),
    ("upstream_c50", "4b. Upstream over https vs http, 50 connections",
     "One node, two routes forwarding every new key to the same local nginx "
     "`return 200`: one over http, one over https (a CA and a server "
     "certificate made with the openssl CLI, `upstream-ca-file`); "
     "unique.lua with 50 connections against each route. ratio_to_http = "
     "https req/s / http req/s; upstream_responses = "
     "oncegate_upstream_results_total{result=\"response\"} of the route."),
    ("big_store_restart", "5a. Big store: restart to ready",
     "Records preloaded with bench/preload; time from exec of oncegate to "
     "its ready line (stop_ms: SIGTERM to exit)."),
    ("big_store_unique_c50", "5b. Big store: unique keys, 50 connections",
     "unique.lua against the node holding the preloaded records."),
    ("purge_unique_c50", "6. Purge under load",
     "Expired records preloaded; the node's alarm purges them from start "
     "while unique.lua runs with 50 connections. p99_ratio = this p99 / the "
     "p99 of 2a; purge_s = ready line to purged_records_total reaching the "
     "count; purge_overlap = share of the measured run the purge lasted."),
    ("memory_small", "7a. Memory per live key actor (small)",
     "--keys.idle-timeout=1h; RSS (VmRSS) before and after pushing N new "
     "keys; bytes_per_actor = RSS delta / live actor delta."),
    ("memory_large", "7b. Memory per live key actor (large)", "As 7a."),
    ("passivation", "7c. Idle actors passivate",
     "--keys.idle-timeout short; after the load stops, oncegate_live_key_actors "
     "must reach 0 (seconds_to_zero, counted from the end of the load)."),
    ("cold_start", "8. Cold-start reload latency",
     "Keys preloaded, node fresh (no live actors); 1 connection sends one "
     "duplicate of each key once: actor spawn + SQLite read per request."),
    ("cluster3_unloaded", "9a. 3-node cluster: unloaded latency (leader)",
     "Three nodes on 127.0.0.1 (Raft: a decision is answered once a majority "
     "appended and fsynced it); 1 connection against the leader, every "
     "request a new key."),
    ("cluster3_follower_unloaded",
     "9a'. 3-node cluster: unloaded latency (via a follower)",
     "As 9a against a follower: it forwards every request to the leader "
     "over the node link and relays the answer."),
    ("cluster3_leader_c50", "9b. 3-node cluster: unique keys via the leader",
     "wrk -t2 -c50 unique.lua against the leader's HTTP port. "
     "ratio_to_single = req/s / the single node's req/s of 2a; "
     "ratio_to_insecure = TLS req/s / plain req/s, same run."),
    ("cluster3_follower_c50",
     "9c. 3-node cluster: unique keys via a follower",
     "As 9b against a follower's HTTP port: the follower forwards every "
     "request to the leader."),
    ("cluster3_store", "9d. 3-node cluster: startup and replicas",
     "start_s: start of the first node until all three /readyz are 200 and "
     "all name the one ready leader; elections_during_runs: Raft term changes during 9a-9c; "
     "settle_s: until every node applied the leader's last log index; then "
     "all nodes are stopped (stop_s) and records_nodeN counted in each node's SQLite "
     "file (must be equal, and >= the answers acknowledged with 200)."),
]
TITLES = {s: t for s, t, _ in SCENARIOS}

SYSTEM_NAMES = {
    "oncegate": "oncegate",
    "redis_always": "Redis (appendfsync always)",
    "redis_everysec": "Redis (appendfsync everysec)",
    "nginx": "nginx return 200",
    "oncegate_cluster3": "oncegate, 3-node cluster (mutual TLS)",
    "oncegate_cluster3_insecure": "oncegate, 3-node cluster (plain, "
                                  "cluster.insecure)",
    "sqlite_wal_full": "SQLite WAL, synchronous=FULL",
    "oncegate_http_upstream": "oncegate, http upstream (nginx)",
    "oncegate_https_upstream": "oncegate, https upstream (nginx)",
}

THROUGHPUT_ROWS = ["unique_c50", "cluster3_leader_c50", "cluster3_follower_c50",
                   "duplicates_c50", "mix_c50", "hot_c50",
                   "big_store_unique_c50", "purge_unique_c50"]
THROUGHPUT_SYSTEMS = ["oncegate", "redis_always", "redis_everysec", "nginx"]
# Rows whose oncegate bar is another system's (the row label says which).
ROW_SYSTEM = {"cluster3_leader_c50": {"oncegate": "oncegate_cluster3"},
              "cluster3_follower_c50": {"oncegate": "oncegate_cluster3"}}
# Further throughput rows: (label, scenario, the system in the oncegate
# column).
THROUGHPUT_EXTRA = [
    ("unique, http upstream", "upstream_c50", "oncegate_http_upstream"),
    ("unique, https upstream", "upstream_c50", "oncegate_https_upstream"),
]
LATENCY_ROWS = [
    ("commit_floor", "sqlite_wal_full"),
    ("unloaded", "oncegate"),
    ("unique_c50", "oncegate"), ("unique_c50", "redis_always"),
    ("unique_c50", "redis_everysec"),
    ("duplicates_c50", "oncegate"), ("duplicates_c50", "nginx"),
    ("mix_c50", "oncegate"), ("hot_c50", "oncegate"),
    ("big_store_unique_c50", "oncegate"), ("purge_unique_c50", "oncegate"),
    ("cold_start", "oncegate"),
    ("cluster3_unloaded", "oncegate_cluster3"),
    ("cluster3_leader_c50", "oncegate_cluster3"),
    ("cluster3_follower_c50", "oncegate_cluster3"),
    ("upstream_c50", "oncegate_http_upstream"),
    ("upstream_c50", "oncegate_https_upstream"),
]
SHORT = {"commit_floor": "bare SQLite commit",
         "upstream_c50": "via upstream","unloaded": "unloaded", "unique_c50": "unique",
         "duplicates_c50": "duplicates", "mix_c50": "mix 90/10",
         "hot_c50": "hot key", "big_store_unique_c50": "unique, big store",
         "purge_unique_c50": "unique, purging", "cold_start": "cold start",
         "cluster3_unloaded": "unloaded, 3 nodes",
         "cluster3_leader_c50": "unique, 3 nodes: leader",
         "cluster3_follower_c50": "unique, 3 nodes: follower"}
SHORT_SYS = {"oncegate": "", "redis_always": " (Redis always)",
             "redis_everysec": " (Redis everysec)", "nginx": " (nginx)",
             "oncegate_cluster3": "", "sqlite_wal_full": "",
             "oncegate_http_upstream": " (http)",
             "oncegate_https_upstream": " (https)"}
# One row per metric even for a single system (many small metrics).
VERTICAL = {"cluster3_store"}


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def show(v):
    x = num(v)
    if x is None:
        return v
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if abs(x) >= 100:
        return "%.0f" % x
    return "%.3g" % x if abs(x) < 1 else "%.2f" % x


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--failures", required=True)
    ap.add_argument("--timings", required=True)
    ap.add_argument("--total", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    rows = load(a.csv)
    data = {}          # (scenario, system) -> {metric: (value, unit)}
    order = {}         # scenario -> [system]
    trows = {}         # target id -> {metric: value} (the harness' verdicts)
    for r in rows:
        if r["scenario"] == "targets":
            trows.setdefault(r["system"], {})[r["metric"]] = r["value"]
            continue
        key = (r["scenario"], r["system"])
        if key not in data:
            data[key] = {}
            order.setdefault(r["scenario"], []).append(r["system"])
        data[key][r["metric"]] = (r["value"], r["unit"])

    def val(s, sysname, m):
        return num(data.get((s, sysname), {}).get(m, (None,))[0])

    machine = []
    with open(a.machine) as f:
        for line in f:
            if "\t" in line:
                k, v = line.rstrip("\n").split("\t", 1)
                machine.append((k, v))
    mdict = dict(machine)
    failures = [l.rstrip("\n") for l in open(a.failures) if l.strip()]
    timings = [l.rstrip("\n").split("\t") for l in open(a.timings) if l.strip()]

    def ratio(a_, b_):
        return a_ / b_ if a_ is not None and b_ else None

    uniq = val("unique_c50", "oncegate", "rps")
    r_always = val("unique_c50", "redis_always", "rps")
    r_every = val("unique_c50", "redis_everysec", "rps")
    dup = val("duplicates_c50", "oncegate", "rps")
    ngx = val("duplicates_c50", "nginx", "rps")
    c_lead = val("cluster3_leader_c50", "oncegate_cluster3", "rps")
    c_fol = val("cluster3_follower_c50", "oncegate_cluster3", "rps")
    up_http = val("upstream_c50", "oncegate_http_upstream", "rps")
    up_https = val("upstream_c50", "oncegate_https_upstream", "rps")

    def fmt_ok(ok):
        return "-" if ok is None else ("yes" if ok else "**no**")

    md = []
    md.append("# oncegate benchmark results")
    md.append("")
    md.append("Generated by `bench/run.sh` on %s; the run took %.0f s "
              "(%s). How to read this: [docs/benchmarks.md](%s)."
              % (mdict.get("date", "?"), float(a.total),
                 mdict.get("mode", "?"),
                 "../benchmarks.md" if mdict.get("mode") == "full"
                 else "docs/benchmarks.md"))
    md.append("")

    # ---- targets: the verdicts the harness wrote (targets,<id>,...), the
    # labels and notes from bench/lib/targets.py
    md.append("## Targets")
    md.append("")
    md.append("Verdicts from this run's rows (`targets,<measure>,value|"
              "target_max|target_min|met` in results.csv); \"not measured\": "
              "the scenario group was not run or failed.%s" % (
                  " Smoke run: tiny key counts and 2 s runs, the verdicts "
                  "mean little." if mdict.get("mode", "").startswith("smoke")
                  else ""))
    md.append("")
    md.append("| measure | value | target | met | note |")
    md.append("|---|---|---|---|---|")
    plain = {k: {m: v for m, (v, _) in ms.items()} for k, ms in data.items()}
    for t in targets_mod.evaluate(plain):
        got = trows.get(t["id"])
        if got is not None:
            value = num(got.get("value"))
            bound = num(got.get("target_max", got.get("target_min")))
            met = got.get("met", "")
            met = None if met in ("", None) else met == "1"
        else:  # no rows for it (targets.py failed): computed here
            value, bound, met = t["value"], t["target"], t["met"]
        unit = {"count": "", "x": " x"}.get(t["unit"], " " + t["unit"])
        op = "<=" if t["op"] == "le" else ">="
        if t["id"] == "unloaded_p50_vs_floor":
            tdesc = "%s floor p50 + 150 us%s" % (
                op, " = %s us" % show(bound) if bound is not None else "")
        else:
            tdesc = "%s %s%s" % (op, show(bound) if bound is not None
                                 else "?", unit)
        md.append("| %s | %s | %s | %s | %s |" % (
            t["label"],
            "not measured" if value is None else show(value) + unit,
            tdesc, fmt_ok(met), t["note"].replace("|", "\\|")))
    md.append("")

    md.append("## Machine and build")
    md.append("")
    md.append("| | |")
    md.append("|---|---|")
    for k, v in machine:
        if k == "date":
            continue
        md.append("| %s | %s |" % (k, v.replace("|", "\\|")))
    md.append("")
    md.append("Everything ran on 127.0.0.1 on this machine; the load generator "
              "(wrk -t1/-t2, redis-benchmark) shares the cores with the "
              "server under test.")
    md.append("")

    # ---- ratios, pair by pair
    md.append("## Ratios (same run)")
    md.append("")
    md.append("| pair (a / b) | a req/s | b req/s | a / b |")
    md.append("|---|---|---|---|")
    for label, a_, b_ in (
            ("unique keys: oncegate / Redis appendfsync always", uniq,
             r_always),
            ("unique keys: oncegate / Redis appendfsync everysec", uniq,
             r_every),
            ("duplicates: oncegate / nginx return 200", dup, ngx),
            ("unique keys: 3-node cluster via the leader / single node",
             c_lead, uniq),
            ("unique keys: 3-node cluster via a follower / single node",
             c_fol, uniq),
            ("unique keys via an upstream: https / http", up_https,
             up_http)):
        q = ratio(a_, b_)
        md.append("| %s | %s | %s | %s |" % (
            label, show(a_) if a_ is not None else "n/a",
            show(b_) if b_ is not None else "n/a",
            "%.2f" % q if q is not None else "n/a"))
    pu = val("purge_unique_c50", "oncegate", "p99_us")
    bu = val("unique_c50", "oncegate", "p99_us")
    md.append("")
    md.append("| latency pair (a / b) | a | b | a / b |")
    md.append("|---|---|---|---|")
    q = ratio(pu, bu)
    md.append("| unique keys p99: purging / not purging | %s us | %s us | %s |"
              % (show(pu) if pu is not None else "n/a",
                 show(bu) if bu is not None else "n/a",
                 "%.2f" % q if q is not None else "n/a"))
    for m in ("p50_us", "p99_us"):
        cu = val("cluster3_unloaded", "oncegate_cluster3", m)
        su = val("unloaded", "oncegate", m)
        q = ratio(cu, su)
        md.append("| unloaded %s: 3-node leader / single node | %s us | "
                  "%s us | %s |" % (
                      m[:3], show(cu) if cu is not None else "n/a",
                      show(su) if su is not None else "n/a",
                      "%.2f" % q if q is not None else "n/a"))
    md.append("")

    # ---- per scenario tables
    md.append("## Scenarios")
    md.append("")
    md.append("Latencies in microseconds (us); wrk measures each request from "
              "its send to the end of its response; Redis latencies come from "
              "redis-benchmark (it reports p95, not p90). `status_N`: answers "
              "with HTTP status N.")
    md.append("")
    known = [s for s, _, _ in SCENARIOS]
    extra = [s for s in order if s not in known]
    for s, title, what in SCENARIOS + [(e, e, "") for e in extra]:
        md.append("### %s" % title)
        md.append("")
        if what:
            md.append(what)
            md.append("")
        if s not in order:
            md.append("_no results (scenario not run or failed, see "
                      "Failures)_")
            md.append("")
            continue
        systems = order[s]
        metrics = []
        for sysname in systems:
            for m in data[(s, sysname)]:
                if m not in metrics:
                    metrics.append(m)
        if len(metrics) > 9 or s in VERTICAL:
            # long lists: one row per metric, systems as columns
            md.append("| metric | unit | " + " | ".join(
                SYSTEM_NAMES.get(x, x) for x in systems) + " |")
            md.append("|---|---|" + "---|" * len(systems))
            for m in metrics:
                unit = next((data[(s, x)][m][1] for x in systems
                             if m in data[(s, x)]), "")
                md.append("| %s | %s | %s |" % (m, unit, " | ".join(
                    show(data[(s, x)].get(m, ("",))[0]) for x in systems)))
        else:
            units = {}
            for sysname in systems:
                for m, (_, u) in data[(s, sysname)].items():
                    units.setdefault(m, u)
            md.append("| system | " + " | ".join(
                "%s (%s)" % (m, units[m]) for m in metrics) + " |")
            md.append("|---|" + "---|" * len(metrics))
            for sysname in systems:
                md.append("| %s | %s |" % (
                    SYSTEM_NAMES.get(sysname, sysname),
                    " | ".join(show(data[(s, sysname)].get(m, ("",))[0])
                               for m in metrics)))
        md.append("")

    md.append("## Plots")
    md.append("")
    md.append("![throughput per scenario](throughput.png)")
    md.append("")
    md.append("![latency percentiles per scenario](latency.png)")
    md.append("")

    md.append("## Run")
    md.append("")
    md.append("| scenario group | seconds | result |")
    md.append("|---|---|---|")
    for t in timings:
        md.append("| %s | %.1f | %s |" % (t[0], float(t[1]), t[2]))
    md.append("| total (build included) | %.1f | |" % float(a.total))
    md.append("")
    md.append("## Failures")
    md.append("")
    if failures:
        for f_ in failures:
            md.append("- " + f_.replace("\n", " "))
    else:
        md.append("none")
    md.append("")
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(md))

    # ---- gnuplot data
    with open(os.path.join(a.out, "throughput.dat"), "w") as f:
        f.write('"scenario" ' + " ".join(
            '"%s"' % SYSTEM_NAMES[x] for x in THROUGHPUT_SYSTEMS) + "\n")
        for s in THROUGHPUT_ROWS:
            vals = [val(s, ROW_SYSTEM.get(s, {}).get(x, x), "rps")
                    for x in THROUGHPUT_SYSTEMS]
            if all(v is None for v in vals):
                continue
            f.write('"%s" %s\n' % (SHORT[s], " ".join(
                "?" if v is None else "%.3f" % (v / 1000) for v in vals)))
        for label, s, x in THROUGHPUT_EXTRA:
            v = val(s, x, "rps")
            if v is None:
                continue
            f.write('"%s" %.3f ? ? ?\n' % (label, v / 1000))
    with open(os.path.join(a.out, "latency.dat"), "w") as f:
        f.write('"scenario" "p50" "p90 (Redis: p95)" "p99"\n')
        for s, x in LATENCY_ROWS:
            p = [val(s, x, m) for m in ("p50_us", "p90_us", "p99_us")]
            if p[1] is None:
                p[1] = val(s, x, "p95_us")
            if all(v is None for v in p):
                continue
            f.write('"%s%s" %s\n' % (SHORT[s], SHORT_SYS[x], " ".join(
                "?" if v is None else "%.4f" % (max(v, 1) / 1000) for v in p)))


if __name__ == "__main__":
    main()
