#!/usr/bin/env python3
"""Where an unloaded request's time goes, from stage-trace files
(common/stage_trace.hpp; driven by bench/stages.sh).

  stages.py send PORT N TAG
      N sequential new-key POSTs on one keep-alive connection; prints the
      client's p50/p90/p99/max in ms
  stages.py table RECEIVER FILE...
      FILE i is node i's trace; RECEIVER the node that took the HTTP
      requests. Per request (http.req .. http.written on RECEIVER) the
      time between consecutive stages, on the node that holds each stage
      (the leader: the node that proposed), as p50/p90/p99/max in us; then
      the slowest requests with every event in their widest gap.
  stages.py commit FILE...
      a cluster's Raft commits (the leader's raft.apply -> fsm.apply) split
      into the hop to the follower that answered first, its append, the
      hop back and the leader's commit, as p50/p90/p99 in us

All nodes run on one machine: their CLOCK_MONOTONIC stamps compare.
"""

import bisect
import collections
import http.client
import json
import sys
import time


def send(port, n, tag):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    body = json.dumps({"exchange": "BINANCE", "symbol": "BTCUSDT",
                       "action": "buy", "qty": 1})
    lat = []
    for i in range(int(n)):
        t = time.perf_counter()
        conn.request("POST", "/v1/webhook", body,
                     {"Content-Type": "application/json",
                      "Idempotency-Key": "%s-%d" % (tag, i)})
        res = conn.getresponse()
        res.read()
        if res.status != 200:
            raise SystemExit("answer %d to request %d" % (res.status, i))
        lat.append((time.perf_counter() - t) * 1000)
    s = sorted(lat)
    m = len(s)
    print("client: %d requests p50 %.2f p90 %.2f p99 %.2f max %.2f ms"
          % (m, s[m // 2], s[int(m * .9)], s[int(m * .99)], s[-1]))


def load(files):
    evs = []
    for node, path in enumerate(files, 1):
        with open(path) as f:
            for line in f:
                ns, tid, name, value = line.split()
                evs.append((int(ns), node, int(tid), name, int(value)))
    evs.sort()
    return evs


def matches(e, node, stage):
    name, _, frame = stage.partition(":")
    if e[1] != node or e[3] != name:
        return False
    return not frame or e[4] // 1000000 == int(frame)


def table(receiver, files):
    receiver = int(receiver)
    evs = load(files)
    times = [e[0] for e in evs]
    proposers = collections.Counter(e[1] for e in evs
                                    if e[3] == "sink.propose")
    leader = proposers.most_common(1)[0][0] if proposers else receiver
    forwarded = leader != receiver
    # A stage is "event@r" (the receiver) or "event@l" (the leader);
    # link frames by type: 5 a request, 6 its answer.
    stages = (["http.req@r"]
              + (["link.send:5@r", "link.recv:5@l"] if forwarded else [])
              + ["registry.claim@l", "key.claim@l", "store.claim@l",
                 "sink.propose@l", "raft.apply@l", "fsm.apply@l",
                 "sink.done@l", "key.decided@l"]
              + (["local.answer@l", "link.send:6@l", "link.recv:6@r"]
                 if forwarded else [])
              + ["http.done@r", "http.answer@r", "http.written@r"])
    if leader == receiver and not proposers:  # a single node: no Raft
        stages = [s for s in stages
                  if s.split("@")[0] not in ("sink.propose", "raft.apply",
                                             "fsm.apply", "sink.done")]
    reqs, start = [], None
    for e in evs:
        if e[1] != receiver:
            continue
        if e[3] == "http.req":
            start = e[0]
        elif e[3] == "http.written" and start is not None:
            reqs.append((start, e[0]))
            start = None

    def first(lo, hi, node, stage):
        i = bisect.bisect_left(times, lo)
        while i < len(evs) and evs[i][0] <= hi:
            if matches(evs[i], node, stage):
                return evs[i][0]
            i += 1
        return None

    durs = collections.defaultdict(list)
    rows = []
    for a, b in reqs:
        row, t = [a], a
        for st in stages[1:]:
            stage, where = st.rsplit("@", 1)
            x = first(t, b, leader if where == "l" else receiver, stage)
            if x is None:
                row = None
                break
            row.append(x)
            t = x
        if row is None:
            continue
        rows.append((a, b, row))
        for i in range(1, len(stages)):
            durs[i].append(row[i] - row[i - 1])
    total = sorted(b - a for a, b, _ in rows)
    if not total:
        raise SystemExit("no complete request in the traces")

    def q(s, p):
        return s[min(len(s) - 1, int(len(s) * p))] / 1e3

    print("node %d took the requests; leader node %d; %d requests traced"
          % (receiver, leader, len(rows)))
    print("%-36s %8s %8s %8s %8s" % ("stage (us)", "p50", "p90", "p99",
                                     "max"))
    for i in range(1, len(stages)):
        s = sorted(durs[i])
        print("%-36s %8.0f %8.0f %8.0f %8.0f" % (
            stages[i - 1] + " -> " + stages[i], q(s, .5), q(s, .9),
            q(s, .99), s[-1] / 1e3))
    # Between an answer written and the next request read: the client's
    # turn, both trips through the kernel and the HTTP thread's wake-up.
    reads = [e[0] for e in evs if e[1] == receiver and e[3] == "http.read"]
    turns = []
    for a, b in reqs:
        i = bisect.bisect_left(reads, b)
        if i < len(reads):
            turns.append(reads[i] - b)
    before = []
    for a, b in reqs:
        i = bisect.bisect_right(reads, a) - 1
        if i >= 0:
            before.append(a - reads[i])
    for label, s in (("http.read -> http.req", sorted(before)),
                     ("http.written -> next http.read", sorted(turns))):
        if s:
            print("%-36s %8.0f %8.0f %8.0f %8.0f" % (
                label, q(s, .5), q(s, .9), q(s, .99), s[-1] / 1e3))
    print("%-36s %8.0f %8.0f %8.0f %8.0f" % (
        "http.req -> http.written (server)", q(total, .5), q(total, .9),
        q(total, .99), total[-1] / 1e3))
    slow = sorted(rows, key=lambda r: r[0] - r[1])[:3]
    for a, b, row in slow:
        gap, i = max((row[i] - row[i - 1], i) for i in range(1, len(row)))
        print("slow: %.2f ms, widest gap %s -> %s %.2f ms:" % (
            (b - a) / 1e6, stages[i - 1], stages[i], gap / 1e6))
        j = bisect.bisect_left(times, row[i - 1])
        shown = 0
        while j < len(evs) and evs[j][0] <= row[i] and shown < 40:
            e = evs[j]
            if e[3] != "loop.check":
                print("   %+8.3f ms node %d tid %d %s %d" % (
                    (e[0] - a) / 1e6, e[1], e[2], e[3], e[4]))
                shown += 1
            j += 1


def commit(files):
    """The leader's raft.apply -> fsm.apply of each entry, split at the
    follower whose answer came first: the hop out (the leader's frame to
    that follower's libraft), the follower's append (raft.in of the entry
    to raft.out of its answer: its fsync, and whatever runs on its loop
    before the answer leaves), the hop back, and the leader's commit."""
    evs = load(files)
    applies = collections.Counter(e[1] for e in evs if e[3] == "raft.apply")
    if not applies:
        return 0
    leader = applies.most_common(1)[0][0]
    rows = []
    for i, e in enumerate(evs):
        if e[1] != leader or e[3] != "raft.apply":
            continue
        got, sent, back, done = {}, {}, None, None
        # Raft messages by size: an append with an entry is >= 100 bytes,
        # an append's answer < 100.
        for f in evs[i + 1:i + 400]:
            if f[1] == leader and f[3] == "fsm.apply":
                done = f[0]
                break
            if f[1] != leader and f[3] == "raft.in" and f[4] >= 100:
                got.setdefault(f[1], f[0])
            elif (f[1] != leader and f[3] == "raft.out" and f[4] < 100
                  and f[1] in got):
                sent.setdefault(f[1], f[0])
            elif (f[1] == leader and f[3] == "raft.in" and f[4] < 100
                  and sent and back is None):
                back = f[0]
        if done is None or back is None:
            continue
        first = min(sent, key=sent.get)
        rows.append([got[first] - e[0], sent[first] - got[first],
                     back - sent[first], done - back, done - e[0]])
    if not rows:
        return 0
    print("raft commit (us, %d entries)          p50      p90      p99" % len(rows))
    names = ["leader -> first follower's libraft", "follower: entry -> answer",
             "answer -> leader's libraft", "leader: answer -> apply",
             "raft.apply -> fsm.apply"]
    for k, name in enumerate(names):
        col = sorted(r[k] / 1e3 for r in rows)
        q = lambda p: col[int(p * (len(col) - 1))]
        print("%-36s %8.0f %8.0f %8.0f" % (name, q(.5), q(.9), q(.99)))
    return 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "send":
        return send(*argv[2:5])
    if len(argv) >= 4 and argv[1] == "table":
        return table(argv[2], argv[3:])
    if len(argv) >= 3 and argv[1] == "commit":
        return commit(argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
