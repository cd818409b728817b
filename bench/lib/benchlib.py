#!/usr/bin/env python3
"""Small helpers for bench/run.sh (python3 stdlib only).

  benchlib.py freeport [N] [--hold-for PID]
      N (default 1) distinct free TCP ports on 127.0.0.1, one a line (all
      bound at once, then released); with --hold-for, a process of its own
      keeps them from every other picker of ports here (tests, drills,
      another bench) until PID ends
  benchlib.py metric PORT NAME
      value of one series of oncegate's /metrics (NAME as printed, labels
      included, e.g. 'oncegate_decisions_total{route="default",outcome="new"}')
  benchlib.py wait-metric PORT NAME OP TARGET TIMEOUT_S
      polls /metrics every 50 ms until NAME OP TARGET holds (OP: ge or le);
      prints "<seconds waited> <last value>"; exit 1 on timeout
  benchlib.py ready-time TIMEOUT_S BIN ARGS...
      execs BIN ARGS, measures the time until it prints its ready line on
      stdout, sends SIGTERM, waits; prints "<ready seconds> <stop seconds>"
  benchlib.py redis-csv FILE
      parses redis-benchmark --csv output: "rps p50_ms p95_ms p99_ms max_ms"
  benchlib.py cluster-wait TIMEOUT_S PORT...
      polls the cluster nodes on these HTTP ports until every /readyz is 200,
      exactly one node is the ready leader and every node names it; prints
      "<seconds waited> <leader's port> <leader's id> <term>"; exit 1 on
      timeout (the last state on stdout)
  benchlib.py cluster-settle TIMEOUT_S PORT...
      polls GET /v1/cluster until every node has applied the leader's last
      log index (nothing in flight); prints "<seconds waited> <index>
      <leader's id> <term>"
  benchlib.py sqlite-count TABLE DB...
      SELECT count(*) FROM TABLE of each SQLite file, one a line
  benchlib.py proc-sample PID...
      one JSON line: the CPU time (utime+stime of /proc/P/stat: all threads
      of the process, exited ones included) and, per thread, the voluntary
      and nonvoluntary context switches (/proc/P/task/T/status) of each PID
      and of all its descendants (nginx: the master and its worker)
  benchlib.py proc-delta START END REQUESTS
      the difference between two proc-sample snapshots, as key=value words:
      cpu_us, ctx (voluntary + nonvoluntary, summed over the threads), vol,
      nonvol, tasks (threads at the end), tasks_exited (threads of START
      gone at END: their switches after START are lost, so ctx is then a
      lower bound), procs, cpu_us_per_req and ctx_per_req (/ REQUESTS)
  benchlib.py hist-sample PORT NAME
      one JSON line: the cumulative bucket counts of histogram NAME on
      /metrics ({"le": count}, "+Inf" included)
  benchlib.py hist-delta START END
      the observations between two hist-sample snapshots, as key=value
      words: count, p50_us, p90_us, p99_us (linear inside a bucket, as
      Prometheus' histogram_quantile; a quantile in the +Inf bucket is
      the highest finite bound)

Every wait is bounded; every process started here is reaped here. Free
ports and what makes a ready leader or a settled cluster are the drill's
(tools/oncegate_drill/cluster.py), so bench, tests and drills agree.
"""

import csv
import http.client
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tools"))
from oncegate_drill.cluster import caught_up, free_ports, \
    ready_leader  # noqa: E402


def freeport(*args):
    """Prints free ports; `--hold-for PID`: holds them until PID ends
    (free_ports holds them for the life of the process that picked them,
    which would otherwise end right here)."""
    hold_for = None
    if len(args) >= 2 and args[-2] == "--hold-for":
        hold_for, args = int(args[-1]), args[:-2]
    for port in free_ports(int(args[0]) if args else 1):
        print(port)
    sys.stdout.flush()
    if hold_for is None or not hasattr(os, "pidfd_open"):
        return
    try:
        pidfd = os.pidfd_open(hold_for)
    except OSError:
        return  # already gone: nothing to hold for
    if os.fork() != 0:
        return
    # The holder: the locks' files are inherited (the same locks); it lets
    # go of the caller's pipes at once, so `$(...)` and `mapfile` see EOF.
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    select.select([pidfd], [], [])  # readable once PID has ended
    os._exit(0)


def scrape(port, timeout=5.0):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        res = conn.getresponse()
        text = res.read().decode("utf-8", "replace")
        if res.status != 200:
            raise RuntimeError("GET /metrics: %d" % res.status)
        return text
    finally:
        conn.close()


def value_of(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line[len(name) + 1:].split()[0])
    raise KeyError(name)


def fmt(v):
    return str(int(v)) if float(v).is_integer() else repr(v)


def metric(port, name):
    print(fmt(value_of(scrape(port), name)))


def wait_metric(port, name, op, target, timeout):
    target = float(target)
    deadline = time.monotonic() + float(timeout)
    start = time.monotonic()
    last = None
    while True:
        try:
            last = value_of(scrape(port, timeout=2.0), name)
            if (op == "ge" and last >= target) or (op == "le" and last <= target):
                print("%.3f %s" % (time.monotonic() - start, fmt(last)))
                return 0
        except (OSError, KeyError, RuntimeError, http.client.HTTPException):
            pass
        if time.monotonic() >= deadline:
            print("%.3f %s" % (time.monotonic() - start,
                               "nan" if last is None else fmt(last)))
            return 1
        time.sleep(0.05)


def ready_time(timeout, argv):
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    got = {}

    def reader():
        for raw in proc.stdout:
            if raw.startswith(b"oncegate ready "):
                got["t"] = time.monotonic()
                break

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(float(timeout))
    ready = got.get("t")
    stop_start = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stopped = time.monotonic()
    proc.stdout.close()
    if ready is None:
        sys.stderr.write("no ready line within %ss\n" % timeout)
        return 1
    print("%.4f %.4f" % (ready - start, stopped - stop_start))
    return 0


def http_get(port, path, timeout=2.0):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=timeout)
    try:
        conn.request("GET", path)
        res = conn.getresponse()
        return res.status, res.read().decode("utf-8", "replace")
    finally:
        conn.close()


def cluster_state(port):
    """(readyz status, /v1/cluster dict) of one node; (None, {}) if down."""
    try:
        ready, _ = http_get(port, "/readyz")
        status, text = http_get(port, "/v1/cluster")
        return ready, (json.loads(text) if status == 200 else {})
    except (OSError, ValueError, http.client.HTTPException):
        return None, {}


def cluster_wait(timeout, ports):
    deadline = time.monotonic() + float(timeout)
    start = time.monotonic()
    while True:
        states = [(p,) + cluster_state(p) for p in ports]
        lid = None
        if all(r == 200 and c for _, r, c in states):
            lid = ready_leader({c.get("id"): c for _, _, c in states})
        if lid is not None:
            p, c = [(p, c) for p, _, c in states if c.get("id") == lid][0]
            print("%.3f %s %s %s" % (time.monotonic() - start, p, c["id"],
                                     c.get("term", 0)))
            return 0
        if time.monotonic() >= deadline:
            print("%.3f %s" % (time.monotonic() - start, " ".join(
                "%s:readyz=%s,role=%s,leader=%s" % (
                    p, r, c.get("role"), c.get("leader_id"))
                for p, r, c in states)))
            return 1
        time.sleep(0.1)


def cluster_settle(timeout, ports):
    deadline = time.monotonic() + float(timeout)
    start = time.monotonic()
    while True:
        nodes = [cluster_state(p)[1] for p in ports]
        last = caught_up({p: c or None for p, c in zip(ports, nodes)},
                         "last_index", exact=True)
        if last is not None:
            leader = [c for c in nodes if c.get("role") == "leader"][0]
            print("%.3f %s %s %s" % (time.monotonic() - start, last,
                                     leader.get("id"), leader.get("term")))
            return 0
        if time.monotonic() >= deadline:
            print("%.3f %s" % (time.monotonic() - start, " ".join(
                "%s:%s/%s" % (p, c.get("applied_index"), c.get("last_index"))
                for p, c in zip(ports, nodes))))
            return 1
        time.sleep(0.1)


def sqlite_count(table, dbs):
    import sqlite3
    for db in dbs:
        conn = sqlite3.connect("file:%s?mode=rw" % db, uri=True, timeout=10)
        try:
            print(conn.execute('SELECT count(*) FROM "%s"' % table)
                  .fetchone()[0])
        finally:
            conn.close()


def _proc_stat(pid):
    """(ppid, ticks utime+stime, starttime) of /proc/pid/stat."""
    with open("/proc/%s/stat" % pid) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state) of proc(5)
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])


def _task_switches(pid):
    out = {}
    base = "/proc/%s/task" % pid
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        vol = nonvol = None
        try:
            with open("%s/%s/status" % (base, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        nonvol = int(line.split()[1])
        except OSError:
            continue  # the thread exited meanwhile
        if vol is not None and nonvol is not None:
            out[tid] = [vol, nonvol]
    return out


def proc_sample(pids):
    roots = {str(int(p)) for p in pids}
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[d] = str(_proc_stat(d)[0])
            except (OSError, ValueError, IndexError):
                pass
    tree = set()
    for p in parent:
        q, seen = p, 0
        while q in parent and seen < 64:
            if q in roots:
                tree.add(p)
                break
            q, seen = parent[q], seen + 1
    tree |= {p for p in roots if p in parent}
    procs = {}
    for p in sorted(tree, key=int):
        try:
            _, ticks, start = _proc_stat(p)
        except (OSError, ValueError, IndexError):
            continue
        procs[p] = {"ticks": ticks, "start": start,
                    "tasks": _task_switches(p)}
    if not procs:
        sys.stderr.write("proc-sample: none of %s is running\n" % " ".join(pids))
        return 1
    print(json.dumps({"clk_tck": os.sysconf("SC_CLK_TCK"), "procs": procs}))
    return 0


def proc_delta(start_file, end_file, requests):
    with open(start_file) as f:
        a = json.load(f)
    with open(end_file) as f:
        b = json.load(f)
    tck = float(b["clk_tck"])
    ticks = vol = nonvol = tasks = exited = 0
    for p, e in b["procs"].items():
        s = a["procs"].get(p)
        if s is not None and s["start"] != e["start"]:
            s = None  # the pid was reused: a new process
        ticks += e["ticks"] - (s["ticks"] if s else 0)
        st = s["tasks"] if s else {}
        for tid, (v, n) in e["tasks"].items():
            v0, n0 = st.get(tid, (0, 0))
            vol += v - v0
            nonvol += n - n0
        tasks += len(e["tasks"])
        exited += len(set(st) - set(e["tasks"]))
    for p, s in a["procs"].items():
        e = b["procs"].get(p)
        if e is None or e["start"] != s["start"]:
            exited += len(s["tasks"])
    req = float(requests)
    cpu_us = ticks * 1e6 / tck
    ctx = vol + nonvol
    print("cpu_us=%.0f ctx=%d vol=%d nonvol=%d tasks=%d tasks_exited=%d "
          "procs=%d cpu_us_per_req=%s ctx_per_req=%s" % (
              cpu_us, ctx, vol, nonvol, tasks, exited, len(b["procs"]),
              "%.2f" % (cpu_us / req) if req > 0 else "",
              "%.4f" % (ctx / req) if req > 0 else ""))
    return 0


def redis_csv(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header = None
    for r in rows:
        if r[0] == "test":
            header = r
            continue
        if header is None:
            continue
        d = dict(zip(header, r))
        print("%s %s %s %s %s" % (d["rps"], d["p50_latency_ms"],
                                  d["p95_latency_ms"], d["p99_latency_ms"],
                                  d["max_latency_ms"]))
        return 0
    sys.stderr.write("no csv result in %s\n" % path)
    return 1


def hist_sample(port, name):
    prefix = name + "_bucket{le=\""
    buckets = {}
    for line in scrape(port).splitlines():
        if line.startswith(prefix):
            le, _, rest = line[len(prefix):].partition("\"}")
            buckets[le] = float(rest.split()[0])
    if "+Inf" not in buckets:
        sys.stderr.write("no histogram %s on port %s\n" % (name, port))
        return 1
    print(json.dumps(buckets))
    return 0


def quantile(q, bounds):
    """q-quantile of cumulative [(upper bound, count)] sorted by bound, the
    last bound inf; linear inside the bucket it falls in."""
    total = bounds[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, cum in bounds:
        if cum >= rank:
            if upper == float("inf"):
                return lower
            # cum > below here: rank > 0 and every earlier bucket was short
            return lower + (upper - lower) * (rank - below) / (cum - below)
        lower, below = upper, cum
    return lower


def hist_delta(start_file, end_file):
    with open(start_file) as f:
        a = json.loads(f.read())
    with open(end_file) as f:
        b = json.loads(f.read())
    bounds = sorted((float(le), cum - a.get(le, 0.0)) for le, cum in b.items())
    words = ["count=%d" % bounds[-1][1]]
    for q in (0.5, 0.9, 0.99):
        v = quantile(q, bounds)
        words.append("p%d_us=%s" % (round(q * 100),
                                    "" if v is None else "%.0f" % (v * 1e6)))
    print(" ".join(words))
    return 0


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "freeport":
        freeport(*args)
        return 0
    if cmd == "metric":
        metric(*args)
        return 0
    if cmd == "wait-metric":
        return wait_metric(*args)
    if cmd == "ready-time":
        return ready_time(args[0], args[1:])
    if cmd == "redis-csv":
        return redis_csv(args[0])
    if cmd == "cluster-wait":
        return cluster_wait(args[0], args[1:])
    if cmd == "cluster-settle":
        return cluster_settle(args[0], args[1:])
    if cmd == "proc-sample":
        return proc_sample(args)
    if cmd == "proc-delta":
        return proc_delta(*args)
    if cmd == "hist-sample":
        return hist_sample(*args)
    if cmd == "hist-delta":
        return hist_delta(*args)
    if cmd == "sqlite-count":
        sqlite_count(args[0], args[1:])
        return 0
    sys.stderr.write("unknown command %s\n" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
