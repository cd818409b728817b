"""An upstream that cannot be reached is "not sent" (docs/http-api.md,
Forwarding: "connection refused, unresolvable, connect timeout, pool
exhausted -> released; 503 upstream-unavailable, Retry-After: 1"): the key
is released, the sender's retry executes, and nothing is ever in doubt.

- connect timeout: a loopback listener with a full accept queue (backlog 0,
  one connection queued, never accepted): the kernel drops further SYNs,
  so a connect hangs until `upstream-connect-timeout`. Kills the mutant
  `connect-timeout-in-doubt`.
- unresolvable: a `.invalid` host name (RFC 6761: never resolves).
- pool exhausted: `upstream-connections=1` with one slow forward holding
  the connection.
"""

import json
import os
import socket
import sys
import threading
import time
import unittest

from harness import Node, TempDir, metric, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from test_upstream import TestUpstream  # noqa: E402

PROBLEM = "https://oncegate.dev/problems/"
CONNECT_TIMEOUT_MS = 400


class BlackHole:
    """A listener whose accept queue is full: connects to it time out."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        # Linux queues backlog + 1 connections; one fills a backlog of 0.
        self.fillers = []
        for _ in range(4):
            s = socket.socket()
            s.settimeout(0.3)
            try:
                s.connect(("127.0.0.1", self.port))
            except OSError:
                s.close()
                break
            self.fillers.append(s)

    def connect_hangs(self):
        """Whether a new connect really hangs (this kernel drops SYNs on a
        full queue rather than resetting)."""
        s = socket.socket()
        s.settimeout(0.3)
        try:
            s.connect(("127.0.0.1", self.port))
            return False
        except socket.timeout:
            return True
        except OSError:
            return False
        finally:
            s.close()

    def close(self):
        for s in self.fillers:
            s.close()
        self.sock.close()


class NotSentCase(unittest.TestCase):
    route_options = ""

    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.node = None
        self.n = 0

    def tearDown(self):
        if self.node is not None:
            self.node.kill()

    def start(self, url, options=""):
        ini = os.path.join(self.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write('[route.fwd]\nupstream="%s"\n%s\n' % (url, options))
        self.node = Node(self.tmp.path, "--config-file=" + ini).start()

    def post(self, key, timeout=10.0):
        return self.node.request("POST", "/v1/webhook/fwd", {"order": key},
                                 {"Idempotency-Key": key}, timeout)

    def assert_not_sent(self, key, answer):
        status, headers, body = answer
        self.assertEqual(status, 503, body)
        doc = json.loads(body)
        self.assertEqual(doc["type"], PROBLEM + "upstream-unavailable", body)
        self.assertEqual(headers.get("retry-after"), "1")
        # Released: no record, so the retry executes.
        self.assertEqual(self.node.request(
            "GET", "/v1/keys/%s?route=fwd" % key)[0], 404, key)

    def assert_never_in_doubt(self):
        self.assertEqual(metric(
            self.node,
            'oncegate_upstream_results_total{route="fwd",result="maybe_sent"}'),
            0)
        self.assertEqual(metric(
            self.node, 'oncegate_records{route="fwd",state="in_doubt"}'), 0)
        status, _, body = self.node.request(
            "GET", "/v1/keys?state=in_doubt&route=fwd")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["records"], [])


class ConnectTimeoutTest(NotSentCase):
    def test_a_connect_timeout_is_not_sent_and_the_retry_executes(self):
        hole = BlackHole()
        self.addCleanup(hole.close)
        if not hole.connect_hangs():
            self.skipTest("this kernel does not leave connects to a full "
                          "accept queue hanging")
        self.start("http://127.0.0.1:%d/orders" % hole.port,
                   "upstream-connect-timeout=%dms" % CONNECT_TIMEOUT_MS)
        for key in ("ct-1", "ct-2"):
            started = time.monotonic()
            answer = self.post(key)
            took = time.monotonic() - started
            self.assert_not_sent(key, answer)
            # It waited for the connect timeout, no longer than needed.
            self.assertGreaterEqual(took, CONNECT_TIMEOUT_MS / 1000 * 0.9)
            self.assertLess(took, 5.0)
        self.assertEqual(metric(
            self.node,
            'oncegate_upstream_results_total{route="fwd",result="not_sent"}'),
            2)
        self.assert_never_in_doubt()
        # The upstream comes up on that port: the sender's retry executes.
        port = hole.port
        hole.close()
        up = TestUpstream(port=port).start()
        self.addCleanup(up.stop)
        status, _, body = self.post("ct-1")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["key"], "ct-1", body)
        self.assertEqual(up.executions("ct-1"), 1)
        self.assertEqual(self.post("ct-1")[0], 409)
        self.assertEqual(up.executions("ct-1"), 1)
        self.assert_never_in_doubt()


class UnresolvableTest(NotSentCase):
    def test_an_unresolvable_upstream_is_not_sent_and_releases_the_key(self):
        self.start("http://oncegate-test-upstream.invalid:9/orders",
                   "upstream-connect-timeout=1s")
        for attempt in range(2):  # the retry is decided afresh
            self.assert_not_sent("nx-1", self.post("nx-1"))
        self.assert_not_sent("nx-2", self.post("nx-2"))
        self.assertEqual(metric(
            self.node,
            'oncegate_upstream_results_total{route="fwd",result="not_sent"}'),
            3)
        self.assert_never_in_doubt()


class PoolExhaustedTest(NotSentCase):
    def test_beyond_the_pool_limit_a_request_is_not_sent_and_its_retry_runs(
            self):
        up = TestUpstream().start()
        self.addCleanup(up.stop)
        self.start(up.url, "upstream-connections=1\nupstream-timeout=5s")
        up.set_mode("slow", 10)
        held = {}

        def first():
            held["answer"] = self.post("pool-1", timeout=15)

        t = threading.Thread(target=first)
        t.start()
        try:
            # The one connection is busy with pool-1.
            self.assertTrue(wait_for(lambda: up.executions("pool-1") == 1, 5))
            self.assert_not_sent("pool-2", self.post("pool-2"))
            self.assertEqual(up.executions("pool-2"), 0)
        finally:
            up.set_mode("normal")  # answers pool-1
            t.join(15)
        self.assertEqual(held["answer"][0], 200, held)
        status, _, body = self.post("pool-2")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["key"], "pool-2", body)
        self.assertEqual(up.counts()["keys"], {"pool-1": 1, "pool-2": 1})
        self.assert_never_in_doubt()


if __name__ == "__main__":
    unittest.main()
