"""Trading guardrails against real nodes in front of the counting upstream:
stale signals (`max-age`) and the cap of new executions (`max-new-per-
minute`, `cap-by`).

What must hold:
- a signal older than the route's max-age (or ahead of the node's clock
  beyond max-ahead) is refused 422 stale-signal naming its age and the
  limit, never forwarded, nothing stored, counted in /metrics; a new
  signal without a readable time is 422 missing-signal-time, but the
  resend of one executed before max-age was configured is still 409;
- a duplicate of a signal executed in time stays a duplicate (409) however
  late it comes, from the decision cache and from the store (after a
  restart): the node's clock is stepped an hour under libfaketime;
- beyond the cap a new signal is 429 rate-limited with Retry-After, never
  forwarded; duplicates are not counted; each symbol has its own cap;
- on 3 nodes x 8 partitions, signals sent to every node at once: a stale
  one executes nowhere, a fresh one once; the cap is never exceeded (each
  partition's leader enforces its share: exactly the sum over partitions of
  min(share, new keys there) executes), and a cap below the partition
  count is refused at start.
"""

import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
import unittest

from harness import (BIN, Node, TempDir, UpstreamNodeCase, join_threads,
                     start_threads, wait_for)
from test_cluster import Cluster, OwnClusterCase, with_logs

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from oncegate_drill import clock  # noqa: E402
LIB = clock.find_libfaketime()

TOKEN = "tv-secret"
CAP = 5


def routes(url, cap=CAP):
    return """
[route.tv]
auth="token"
secret="{token}"
max-age=30s
upstream="{url}"

[route.capped]
max-new-per-minute={cap}
cap-by="symbol"
upstream="{url}"
""".format(token=TOKEN, url=url, cap=cap)


def signal(ts, symbol="BTCUSDT", action="buy", **extra):
    body = {"exchange": "BINANCE", "symbol": symbol, "action": action,
            "timestamp": ts}
    body.update(extra)
    return body


def problem_type(answer):
    return json.loads(answer)["type"].rsplit("/", 1)[1]


def metric(node, route, outcome):
    status, _, body = node.request("GET", "/metrics")
    assert status == 200
    want = 'oncegate_decisions_total{route="%s",outcome="%s"} ' % (route,
                                                                  outcome)
    for line in body.decode().splitlines():
        if line.startswith(want):
            return float(line.split()[1])
    return 0.0


def partition_of(route, key, partitions):
    """docs/cluster.md, "Partitions"."""
    digest = hashlib.sha256(struct.pack("<I", len(route)) + route.encode()
                            + key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % partitions


def cap_share(cap, partitions, group):
    return cap // partitions + (1 if group < cap % partitions else 0)


class GuardMixin:
    def tv(self, node, body, timeout=15):
        return node.request("POST", "/v1/webhook/tv?token=" + TOKEN, body,
                            timeout=timeout)

    def capped(self, node, key, symbol="BTCUSDT", timeout=15):
        return node.request("POST", "/v1/webhook/capped",
                            {"symbol": symbol, "order": key},
                            {"Idempotency-Key": key}, timeout)


class StaleSignalTest(GuardMixin, UpstreamNodeCase, unittest.TestCase):
    def config(self, url):
        return routes(url)

    def test_a_stale_signal_is_refused_never_forwarded_and_counted(self):
        status, headers, answer = self.tv(self.node,
                                          signal(int(time.time()) - 600))
        self.assertEqual(status, 422, answer)
        problem = json.loads(answer)
        self.assertEqual(problem_type(answer), "stale-signal")
        self.assertEqual(problem["max_age_ms"], 30000)
        # Its age as this node judged it: 600 s and the time it took.
        self.assertGreaterEqual(problem["age_ms"], 600000)
        self.assertLess(problem["age_ms"], 660000)
        self.assertIn("old, beyond the route's max-age (30 s)",
                      problem["detail"])
        key = headers["idempotency-key"]
        self.assertEqual(self.node.request("GET", "/v1/keys/" + key)[0], 404)
        self.assertEqual(self.up.counts()["total"], 0)
        self.assertEqual(metric(self.node, "tv", "stale"), 1)

    def test_a_signal_ahead_of_the_clock_or_without_a_time_is_refused(self):
        status, _, answer = self.tv(self.node,
                                    signal(int(time.time()) + 3600))
        self.assertEqual(status, 422, answer)
        self.assertEqual(problem_type(answer), "stale-signal")
        self.assertLess(json.loads(answer)["age_ms"], -3500000)
        body = signal(0)
        del body["timestamp"]
        status, _, answer = self.node.request(
            "POST", "/v1/webhook/tv?token=" + TOKEN, body,
            {"Idempotency-Key": "no-time"})
        self.assertEqual(status, 422, answer)
        self.assertEqual(problem_type(answer), "missing-signal-time")
        self.assertEqual(self.up.counts()["total"], 0)

    def test_a_signal_executed_before_max_age_was_set_stays_a_duplicate(self):
        # The route without max-age: a signal without any time executes.
        with open(self.ini, "w") as f:
            f.write(routes(self.up.url).replace("max-age=30s\n", ""))
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        body = {"order": "old-1"}
        hdrs = {"Idempotency-Key": "old-1"}
        path = "/v1/webhook/tv?token=" + TOKEN
        status, _, answer = self.node.request("POST", path, body, hdrs)
        self.assertEqual(status, 200, answer)
        # The operator sets max-age: its resend has no time to judge, and is
        # still a duplicate (from the store: the restart emptied the caches);
        # a new signal without a time is refused.
        with open(self.ini, "w") as f:
            f.write(routes(self.up.url))
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        status, _, answer = self.node.request("POST", path, body, hdrs)
        self.assertEqual(status, 409, answer)
        status, _, answer = self.node.request(
            "POST", path, {"order": "new-1"}, {"Idempotency-Key": "new-1"})
        self.assertEqual(status, 422, answer)
        self.assertEqual(problem_type(answer), "missing-signal-time")
        self.assertEqual(self.up.executions("old-1"), 1)
        self.assertEqual(self.up.executions("new-1"), 0)

    def test_a_fresh_signal_executes_once_and_its_resend_is_a_duplicate(
            self):
        body = signal(int(time.time()) - 5)
        status, headers, answer = self.tv(self.node, body)
        self.assertEqual(status, 200, answer)
        status, _, answer = self.tv(self.node, body)
        self.assertEqual(status, 409, answer)
        self.assertEqual(self.up.executions(headers["idempotency-key"]), 1)

    def test_the_cap_refuses_new_signals_beyond_it_and_counts_no_duplicate(
            self):
        keys = ["cap-%d" % i for i in range(CAP + 3)]
        results = {}
        lock = threading.Lock()

        def send(key):
            code, headers, _ = self.capped(self.node, key)
            with lock:
                results[key] = (code, headers.get("retry-after"))

        self.assertTrue(join_threads(start_threads(send, keys), 60))
        granted = [k for k, (c, _) in results.items() if c == 200]
        limited = [k for k, (c, _) in results.items() if c == 429]
        self.assertEqual((len(granted), len(limited)), (CAP, 3), results)
        self.assertTrue(all(results[k][1] == "60" for k in limited), results)
        # A duplicate of an executed signal is a duplicate at the cap; a
        # refused one was never stored and is refused again.
        self.assertEqual(self.capped(self.node, granted[0])[0], 409)
        status, _, answer = self.capped(self.node, limited[0])
        self.assertEqual(status, 429, answer)
        self.assertEqual(problem_type(answer), "rate-limited")
        self.assertEqual(json.loads(answer)["max_new_per_minute"], CAP)
        # Another symbol has its own cap.
        self.assertEqual(self.capped(self.node, "eth-1", "ETHUSDT")[0], 200)
        self.assertEqual(self.up.counts()["total"], CAP + 1)
        for k in limited:
            self.assertEqual(self.up.executions(k), 0)
        self.assertEqual(metric(self.node, "capped", "rate_limited"), 4)


@unittest.skipIf(LIB is None, "libfaketime is not installed (Debian: "
                 "apt-get install faketime)")
class LateDuplicateTest(GuardMixin, UpstreamNodeCase, unittest.TestCase):
    """A signal executed in time, then sent again an hour later by the
    node's clock: a duplicate, never 422."""

    def config(self, url):
        return routes(url)

    def node_kwargs(self):
        self.clock = clock.FakeClock(os.path.join(self.tmp.path, "clocks"),
                                     LIB)
        return {"env": self.clock.env("node")}

    def tearDown(self):
        pid = self.node.proc.pid if self.node.proc else None
        try:
            super().tearDown()
        finally:
            for p in self.pids + [pid]:
                if p:
                    clock.FakeClock.forget(p)

    pids = []

    def test_a_late_duplicate_of_a_signal_executed_in_time_stays_one(self):
        body = signal(int(time.time()))
        status, headers, answer = self.tv(self.node, body)
        self.assertEqual(status, 200, answer)
        key = headers["idempotency-key"]
        self.clock.step("node", 3600)
        # From the decision cache...
        status, _, answer = self.tv(self.node, body)
        self.assertEqual(status, 409, answer)
        # ...and from the store: a restart empties every cache.
        self.pids = [self.node.proc.pid]
        self.node.stop()
        self.node.start()
        status, _, answer = self.tv(self.node, body)
        self.assertEqual(status, 409, answer)
        # A new signal of that time is stale by this clock.
        status, _, answer = self.tv(self.node, signal(int(time.time()),
                                                      action="sell"))
        self.assertEqual(status, 422, answer)
        self.assertGreater(json.loads(answer)["age_ms"], 3500000)
        self.assertEqual(self.up.executions(key), 1)
        self.assertEqual(self.up.counts()["total"], 1)


class GuardCluster(Cluster):
    cap = 16

    def ini_text(self, node_id, peer_ids, join=False):
        return super().ini_text(node_id, peer_ids, join) + routes(
            self.upstream_url, self.cap)


class GuardClusterTest(GuardMixin, OwnClusterCase):
    PARTITIONS = 8

    def setUp(self):
        super().setUp()
        self.cluster = GuardCluster(self.tmp.path + "/g", self.up.url,
                                    partitions=8)

    def send_everywhere(self, fn, items, timeout=90):
        results = {}
        lock = threading.Lock()

        def send(i):
            n, item = i
            out = fn(self.cluster.node(1 + n % 3), item)
            with lock:
                results.setdefault(item, []).append(out[0])

        self.assertTrue(join_threads(start_threads(send, list(enumerate(
            items))), timeout))
        return results

    @with_logs
    def test_stale_nowhere_fresh_once_and_the_cap_never_exceeded(self):
        self.start_nodes([1, 2, 3], [1, 2, 3])
        now = int(time.time())
        stale = json.dumps(signal(now - 120, "SOLUSDT"))
        fresh = json.dumps(signal(now, "SOLUSDT"))
        res = self.send_everywhere(lambda node, b: self.tv(node, b),
                                   [stale] * 6 + [fresh] * 6)
        self.assertEqual(sorted(res[stale]), [422] * 6, res)
        self.assertEqual(sorted(res[fresh]), [200] + [409] * 5, res)
        self.assertEqual(self.up.counts()["total"], 1)
        # 40 new keys at once through every node, each sent twice: the
        # cap's shares decide exactly how many execute.
        cap = self.cluster.cap
        keys = ["c-%d" % i for i in range(40)]
        res = self.send_everywhere(lambda node, k: self.capped(node, k),
                                   keys + keys)
        per_partition = {}
        for k in keys:
            g = partition_of("capped", k, 8)
            per_partition[g] = per_partition.get(g, 0) + 1
        expected = sum(min(cap_share(cap, 8, g), n)
                       for g, n in per_partition.items())
        executed = [k for k in keys if self.up.executions(k) == 1]
        self.assertTrue(all(self.up.executions(k) <= 1 for k in keys))
        self.assertEqual(len(executed), expected, res)
        self.assertLessEqual(len(executed), cap)
        for k in keys:
            codes = sorted(res[k])
            if k in executed:
                self.assertEqual(codes, [200, 409], (k, codes))
            else:
                self.assertEqual(codes, [429, 429], (k, codes))
        self.assertEqual(self.up.counts()["total"], 1 + expected)

    def test_max_age_without_a_time_to_judge_is_refused(self):
        ini = os.path.join(self.tmp.path, "text.ini")
        with open(ini, "w") as f:
            f.write('[route.tvtext]\nbody="text"\nmax-age=30s\n')
        out = subprocess.run([BIN, "--check-config", ini],
                             capture_output=True, timeout=30)
        text = (out.stdout + out.stderr).decode()
        self.assertEqual(out.returncode, 2, text)
        self.assertIn("route.tvtext.max-age: a text route has no time to "
                      "judge", text)

    def test_a_cap_below_the_partition_count_is_refused(self):
        self.cluster.cap = 4
        node = self.cluster.add(1, [1, 2, 3])
        out = subprocess.run([BIN, "--check-config", node.ini],
                             capture_output=True, timeout=30)
        text = (out.stdout + out.stderr).decode()
        self.assertNotEqual(out.returncode, 0, text)
        self.assertIn("route.capped.max-new-per-minute: at least "
                      "cluster.partitions (8)", text)


if __name__ == "__main__":
    unittest.main()
