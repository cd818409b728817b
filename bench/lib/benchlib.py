#!/usr/bin/env python3
"""Small helpers for bench/run.sh (python3 stdlib only).

  benchlib.py freeport
      a free TCP port on 127.0.0.1 (bound once, then released)
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

Every wait is bounded; every process started here is reaped here.
"""

import csv
import http.client
import signal
import subprocess
import sys
import threading
import time


def freeport():
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
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
        freeport()
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
    sys.stderr.write("unknown command %s\n" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
