"""The kill switch (`oncegate routes pause|resume|status`, /v1/routes)
against real nodes in front of the counting upstream.

What must hold:
- while a route is paused its new signals get 503 paused with Retry-After
  and are never forwarded; a duplicate of an executed signal is still 409;
  other routes are untouched; `routes status`, /v1/routes and the gauge
  say it; unknown routes are 404 and the endpoints need the admin token;
- the pause is durable: a restarted node still refuses;
- queued durable deliveries of a paused route are held: their attempt
  count stops while another route's queue keeps trying; after resume each
  is delivered once;
- on 3 nodes x 8 partitions a pause acknowledged by one node is refused
  by every node at once, and held queued signals survive a kill -9 of the
  node leading most partitions, then each is delivered once after resume.

Holding is judged against a witness: a second durable route with the
same backoff whose records keep being attempted, so "nothing happened to
the paused one" is bounded by what did happen to the other, never by a
sleep.
"""

import json
import os
import subprocess
import sys
import unittest

from harness import BIN, ForwardingCase, wait_for
from test_cluster import Cluster, OwnClusterCase, with_logs

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from oncegate_drill.cluster import partition_leaders  # noqa: E402

TOKEN = "pause-test-admin-token"


def routes(url):
    return """
[route.held]
upstream="{url}"
delivery="async"
delivery-first-retry=100ms
delivery-max-retry=300ms
delivery-deadline=1h

[route.witness]
upstream="{url}"
delivery="async"
delivery-first-retry=100ms
delivery-max-retry=300ms
delivery-deadline=1h
""".format(url=url)


def problem_type(body):
    return json.loads(body)["type"].rsplit("/", 1)[1]


class PauseMixin:
    def admin(self, node, method, path):
        status, _, body = node.request(
            method, path, None, {"Authorization": "Bearer " + TOKEN})
        return status, (json.loads(body) if body else None)

    def cli(self, node, *args):
        out = subprocess.run(
            [BIN, *args, "--node=http://127.0.0.1:%d" % node.port],
            capture_output=True, timeout=60,
            env=dict(os.environ, ONCEGATE_TOKEN=TOKEN))
        return out.returncode, out.stdout.decode() + out.stderr.decode()

    def send(self, node, key, route="held"):
        return node.request("POST", "/v1/webhook/" + route, {"order": key},
                            {"Idempotency-Key": key}, 15)

    def record(self, node, key, route):
        status, rec = self.admin(node, "GET",
                                 "/v1/keys/%s?route=%s" % (key, route))
        return rec if status == 200 else None

    def attempts(self, node, key, route):
        rec = self.record(node, key, route)
        return rec["attempts"] if rec else None

    def wait_queued(self, node, keys, route):
        self.assertTrue(wait_for(
            lambda: all((self.record(node, k, route) or {}).get("state")
                        == "queued" for k in keys), 30),
            {k: self.record(node, k, route) for k in keys})


class PauseTest(PauseMixin, ForwardingCase, unittest.TestCase):
    def config(self, url):
        return "[admin]\ntoken=\"%s\"\n" % TOKEN + routes(url)

    def test_a_paused_route_refuses_new_signals_and_answers_duplicates(self):
        self.assertEqual(self.send(self.node, "before")[0], 202)
        self.assertTrue(wait_for(lambda: self.up.executions("before") == 1,
                                 15))
        code, out = self.cli(self.node, "routes", "pause", "held")
        self.assertEqual(code, 0, out)
        self.assertIn("route held paused since", out)
        status, headers, body = self.send(self.node, "during")
        self.assertEqual(status, 503, body)
        self.assertEqual(problem_type(body), "paused")
        self.assertEqual(headers.get("retry-after"), "30")
        status, _, body = self.send(self.node, "before")
        self.assertEqual(status, 409, body)
        self.assertEqual(self.send(self.node, "other", "witness")[0], 202)
        # Said by the status, the API and the gauge.
        code, out = self.cli(self.node, "routes", "status")
        self.assertEqual(code, 0, out)
        held = [line for line in out.splitlines() if line.startswith("held")]
        self.assertEqual(len(held), 1, out)
        self.assertIn("paused", held[0])
        status, doc = self.admin(self.node, "GET", "/v1/routes")
        self.assertEqual(status, 200)
        by_name = {r["name"]: r for r in doc["routes"]}
        self.assertTrue(by_name["held"]["paused"])
        self.assertFalse(by_name["witness"]["paused"])
        since = by_name["held"]["paused_since_ms"] // 1000
        _, _, metrics = self.node.request("GET", "/metrics")
        self.assertIn('oncegate_route_paused_since_seconds{route="held"} %d'
                      % since, metrics.decode())
        self.assertIn('oncegate_decisions_total{route="held",'
                      'outcome="paused"} 1', metrics.decode())
        # Durable: a restart keeps it.
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        self.assertEqual(self.send(self.node, "during")[0], 503)
        code, out = self.cli(self.node, "routes", "resume", "held")
        self.assertEqual(code, 0, out)
        status, _, body = self.send(self.node, "during")
        self.assertEqual(status, 202, body)
        self.assertTrue(wait_for(lambda: self.up.executions("during") == 1,
                                 15))
        self.assertEqual(self.up.executions("before"), 1)

    def test_bad_requests_and_callers_are_refused(self):
        status, _ = self.admin(self.node, "POST", "/v1/routes/nosuch/pause")
        self.assertEqual(status, 404)
        status, _ = self.admin(self.node, "POST", "/v1/routes/held/stop")
        self.assertEqual(status, 404)
        status, _ = self.admin(self.node, "GET", "/v1/routes/held/pause")
        self.assertEqual(status, 405)
        status, _, _ = self.node.request("POST", "/v1/routes/held/pause")
        self.assertEqual(status, 401)
        code, out = self.cli(self.node, "routes", "pause", "Bad/Name")
        self.assertEqual(code, 2, out)
        code, out = self.cli(self.node, "routes", "pause", "nosuch")
        self.assertEqual(code, 3, out)
        self.assertEqual(self.send(self.node, "k")[0], 202)

    def test_queued_signals_are_held_while_paused_then_delivered_once(self):
        self.up.refuse()
        held = ["h-%d" % i for i in range(3)]
        for k in held:
            self.assertEqual(self.send(self.node, k)[0], 202)
        self.assertEqual(self.send(self.node, "w", "witness")[0], 202)
        self.wait_queued(self.node, held, "held")
        code, out = self.cli(self.node, "routes", "pause", "held")
        self.assertEqual(code, 0, out)
        # An attempt that started before the pause ends queued again.
        self.wait_queued(self.node, held, "held")
        before = {k: self.attempts(self.node, k, "held") for k in held}
        # The witness, with the same backoff, is attempted three more times:
        # the held records would have been at least once.
        w0 = self.attempts(self.node, "w", "witness")
        self.assertTrue(wait_for(
            lambda: self.attempts(self.node, "w", "witness") >= w0 + 3, 30))
        self.assertEqual({k: self.attempts(self.node, k, "held")
                          for k in held}, before)
        # The upstream is back: the witness is delivered, the held are not.
        self.up.resume()
        self.assertTrue(wait_for(lambda: self.up.executions("w") == 1, 30))
        self.assertTrue(wait_for(
            lambda: (self.record(self.node, "w", "witness") or {})
            .get("state") == "completed", 15))
        for k in held:
            self.assertEqual(self.up.executions(k), 0)
            self.assertEqual(self.record(self.node, k, "held")["state"],
                             "queued")
        code, out = self.cli(self.node, "routes", "resume", "held")
        self.assertEqual(code, 0, out)
        self.assertTrue(wait_for(
            lambda: all(self.up.executions(k) == 1 for k in held), 30),
            {k: self.up.executions(k) for k in held})
        self.assertTrue(wait_for(
            lambda: all((self.record(self.node, k, "held") or {})
                        .get("state") == "completed" for k in held), 15))
        self.assertEqual([self.up.executions(k) for k in held], [1, 1, 1])


class PauseCluster(Cluster):
    def ini_text(self, node_id, peer_ids, join=False):
        return super().ini_text(node_id, peer_ids, join) + routes(
            self.upstream_url)


class PauseClusterTest(PauseMixin, OwnClusterCase):
    PARTITIONS = 8

    def setUp(self):
        super().setUp()
        self.cluster = PauseCluster(self.tmp.path + "/p", self.up.url,
                                    partitions=8)

    def admin(self, node, method, path):
        # The cluster's nodes take admin requests from loopback.
        status, _, body = node.request(method, path)
        return status, (json.loads(body) if body else None)

    def busiest(self, ids):
        counts = {}
        for leader in partition_leaders(self.cluster.node(ids[0]).status()
                                        ).values():
            counts[leader] = counts.get(leader, 0) + 1
        return max(sorted(counts), key=lambda i: counts[i])

    @with_logs
    def test_a_pause_holds_everywhere_through_a_leader_kill(self):
        self.start_nodes([1, 2, 3], [1, 2, 3])
        self.cluster.wait_converged([1, 2, 3])
        self.up.refuse()
        held = ["ch-%d" % i for i in range(12)]
        for n, k in enumerate(held):
            status, _, body = self.send(self.cluster.node(1 + n % 3), k)
            self.assertEqual(status, 202, body)
        self.assertEqual(self.send(self.cluster.node(1), "cw",
                                   "witness")[0], 202)
        self.wait_queued(self.cluster.node(1), held, "held")
        status, doc = self.admin(self.cluster.node(2), "POST",
                                 "/v1/routes/held/pause")
        self.assertEqual(status, 200, doc)
        self.assertTrue(doc["paused"])
        # Acknowledged: every node refuses a new signal of the route now.
        for i in (1, 2, 3):
            status, _, body = self.send(self.cluster.node(i), "new-%d" % i)
            self.assertEqual(status, 503, body)
            self.assertEqual(problem_type(body), "paused")
            self.assertEqual(self.send(self.cluster.node(i), held[0])[0],
                             409)
        self.wait_queued(self.cluster.node(1), held, "held")
        # The node leading most partitions dies.
        victim = self.busiest([1, 2, 3])
        self.cluster.node(victim).kill()
        alive = [i for i in (1, 2, 3) if i != victim]
        self.cluster.wait_ready(alive)
        self.up.resume()
        # The witness is delivered by the survivors; nothing held is.
        self.assertTrue(wait_for(lambda: self.up.executions("cw") == 1, 60))
        self.assertTrue(wait_for(
            lambda: (self.record(self.cluster.node(alive[0]), "cw", "witness")
                     or {}).get("state") == "completed", 30))
        self.assertEqual({k: self.up.executions(k) for k in held},
                         {k: 0 for k in held})
        # Still paused after the failover, on the survivors.
        self.assertEqual(self.send(self.cluster.node(alive[0]), "new-x")[0],
                         503)
        self.cluster.node(victim).start()
        self.cluster.wait_ready([1, 2, 3])
        status, doc = self.admin(self.cluster.node(victim), "GET",
                                 "/v1/routes")
        self.assertEqual(status, 200, doc)
        self.assertTrue({r["name"]: r for r in doc["routes"]}["held"]
                        ["paused"])
        status, doc = self.admin(self.cluster.node(alive[1]), "POST",
                                 "/v1/routes/held/resume")
        self.assertEqual(status, 200, doc)
        self.assertFalse(doc["paused"])
        self.assertTrue(wait_for(
            lambda: all(self.up.executions(k) >= 1 for k in held), 60),
            {k: self.up.executions(k) for k in held})
        self.assertTrue(wait_for(
            lambda: all((self.record(self.cluster.node(1), k, "held") or {})
                        .get("state") == "completed" for k in held), 30))
        self.assertEqual({k: self.up.executions(k) for k in held},
                         {k: 1 for k in held})
        self.assertEqual(self.send(self.cluster.node(victim), "after")[0],
                         202)


if __name__ == "__main__":
    unittest.main()
