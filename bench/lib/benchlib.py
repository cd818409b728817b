#!/usr/bin/env python3
"""Small helpers for bench/run.sh (python3 stdlib only).

  benchlib.py freeport [N]
      N (default 1) distinct free TCP ports on 127.0.0.1, one a line (all
      bound at once, then released)
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

Every wait is bounded; every process started here is reaped here. Free
ports and what makes a ready leader or a settled cluster are the drill's
(tools/oncegate_drill/cluster.py), so bench, tests and drills agree.
"""

import csv
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tools"))
from oncegate_drill.cluster import caught_up, free_ports, \
    ready_leader  # noqa: E402


def freeport(n=1):
    for port in free_ports(int(n)):
        print(port)


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
    if cmd == "sqlite-count":
        sqlite_count(args[0], args[1:])
        return 0
    sys.stderr.write("unknown command %s\n" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
