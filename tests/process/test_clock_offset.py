"""A cluster node whose wall clock is wrong: measured against the leader's
clock (the stamps of the Raft log), it says so instead of blaming senders.

Three nodes on loopback; node 3 runs under libfaketime (the drill's
FakeClock, as test_clock.py) with its CLOCK_REALTIME two hours ahead from
its start, as after a step and a restart. The leader purges every 300 ms
(`alarm.max-interval`), so even this idle cluster stamps an entry often.

What must hold (issue 28, item 7):
- node 3: `/readyz` 503 with the reason `clock-offset`; a validly signed
  Standard Webhooks delivery, whose timestamp only node 3 judges stale, is
  answered 503 problem `clock-offset` with Retry-After, never 401; the
  same with a wrong signature stays 401; /metrics shows the offset;
- nodes 1 and 2 accept the same kind of delivery (200);
- once node 3's clock is right again (stepped back while it runs), it is
  ready and accepts deliveries, by itself.

Skipped when libfaketime is not installed (Debian: apt-get install
faketime).
"""

import base64
import json
import os
import secrets
import sys
import time
import unittest

from harness import TempDir, wait_for
from test_cluster import Cluster, with_logs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from oncegate_drill import clock  # noqa: E402
from oncegate_drill.keys import sw_signature  # noqa: E402

LIB = clock.find_libfaketime()
PROBLEM = "https://oncegate.dev/problems/"
AHEAD_S = 2 * 3600
SW_KEY = secrets.token_bytes(24)
SW_SECRET = "whsec_" + base64.b64encode(SW_KEY).decode()
# Measuring needs two stamped entries a few seconds apart (the purge runs
# every 300 ms): well within this on a loaded machine.
MEASURE_TIMEOUT = 30.0


class SignedCluster(Cluster):
    """test_cluster's cluster, plus a Standard Webhooks route (no upstream)
    and a frequent purge, so the leader stamps entries while idle."""

    def ini_text(self, node_id, peer_ids, join=False):
        return super().ini_text(node_id, peer_ids, join) + """
[route.sw]
auth="standard-webhooks"
secret="{secret}"

[alarm]
max-interval=300ms
""".format(secret=SW_SECRET)


@unittest.skipIf(LIB is None, "libfaketime is not installed (Debian: "
                 "apt-get install faketime)")
class ClockOffsetTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.clock = clock.FakeClock(os.path.join(self.tmp.path, "clocks"),
                                     LIB)
        self.assertIsNone(self.clock.shim_error)
        # The upstream of test_cluster's route is never called here.
        self.cluster = SignedCluster(self.tmp.path, "http://127.0.0.1:9/")
        self.pids = []

    def tearDown(self):
        try:
            self.cluster.kill_all()
        finally:
            for pid in self.pids:
                clock.FakeClock.forget(pid)
            self.tmp.cleanup()

    def post_sw(self, node, msg_id, body=None, timestamp=None, key=SW_KEY):
        data = json.dumps(body or {"order": msg_id}).encode()
        if timestamp is None:
            timestamp = int(time.time())  # the sender's clock: the real one
        hdrs = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
                "webhook-signature": sw_signature(key, msg_id, timestamp,
                                                  data)}
        return node.request("POST", "/v1/webhook/sw", data, hdrs)

    def readyz(self, node):
        status, hdrs, body = node.request("GET", "/readyz", timeout=2.0)
        return status, hdrs, json.loads(body)

    def metric(self, node, name):
        _, _, body = node.request("GET", "/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    @with_logs
    def test_a_node_two_hours_ahead_is_not_ready_and_answers_503(self):
        for i in (1, 2, 3):
            self.cluster.add(i, [1, 2, 3])
        # Nodes 1 and 2 elect the leader; node 3 joins as a follower with
        # its clock two hours ahead from its first instruction on.
        self.cluster.node(1).start()
        self.cluster.node(2).start()
        self.cluster.wait_leader([1, 2])
        self.clock.set("n3", AHEAD_S)
        n3 = self.cluster.node(3)
        n3.env = self.clock.env("n3")
        n3.start()
        self.pids.append(n3.proc.pid)
        self.cluster.wait_converged([1, 2, 3])

        # Bounded wait, no assertion: the node that never measures fails
        # below, on the answer a sender gets.
        def offset_reported():
            try:
                status, _, body = self.readyz(n3)
            except (OSError, ValueError):
                return False
            return status == 503 and body.get("reason") == "clock-offset"
        wait_for(offset_reported, MEASURE_TIMEOUT, 0.1)

        status, hdrs, body = self.post_sw(n3, "msg-ahead-1")
        self.assertEqual(status, 503, body)
        problem = json.loads(body)
        self.assertEqual(problem["type"], PROBLEM + "clock-offset")
        self.assertEqual(hdrs.get("content-type"), "application/problem+json")
        self.assertTrue(hdrs.get("retry-after", "").isdigit(), hdrs)

        status, _, ready = self.readyz(n3)
        self.assertEqual(status, 503)
        self.assertEqual(ready["reason"], "clock-offset")
        self.assertGreater(ready["offset_ms"], AHEAD_S * 1000 - 60_000)
        self.assertEqual(self.metric(n3, "oncegate_clock_offset_exceeded"), 1)
        offset = self.metric(n3, "oncegate_clock_offset_seconds")
        self.assertIsNotNone(offset)
        self.assertAlmostEqual(offset, AHEAD_S, delta=60)

        # A signature that is wrong stays 401, clock or no clock.
        status, _, body = self.post_sw(n3, "msg-ahead-2",
                                       key=secrets.token_bytes(24))
        self.assertEqual(status, 401, body)
        self.assertEqual(json.loads(body)["type"], PROBLEM + "unauthorized")

        # The other nodes accept valid deliveries and are ready.
        for i in (1, 2):
            node = self.cluster.node(i)
            status, _, body = self.post_sw(node, "msg-ok-%d" % i)
            self.assertEqual(status, 200, body)
            self.assertEqual(self.readyz(node)[0], 200)
            self.assertEqual(
                self.metric(node, "oncegate_clock_offset_exceeded"), 0)

        # The clock is put right while the node runs: it recovers by itself.
        self.clock.set("n3", 0)
        self.assertTrue(wait_for(lambda: self.readyz(n3)[0] == 200,
                                 MEASURE_TIMEOUT, 0.1),
                        self.readyz(n3))
        status, _, body = self.post_sw(n3, "msg-ahead-3")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.metric(n3, "oncegate_clock_offset_exceeded"), 0)


if __name__ == "__main__":
    unittest.main()
