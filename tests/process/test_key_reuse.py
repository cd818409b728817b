"""A key reused with another payload is `422 key-reused` and nothing is
executed (docs/http-api.md, "The payload fingerprint"), also when the
decision is the store's own: no warm key actor, no HTTP decision cache.

A warm node answers a known key from memory (the key actor's cached record,
the decision cache), so these tests make the claim reach the store: after a
restart (cold caches), after the key actor left memory with the decision
cache off, and while the first request is still in flight upstream with
its key actor gone. Kills the mutant `grant-on-mismatch` (the store grants
a live key to another payload).
"""

import json
import threading
import unittest

from harness import UpstreamNodeCase, metric, wait_for

PROBLEM = "https://oncegate.dev/problems/"


class ReuseCase(UpstreamNodeCase):
    def config(self, url):
        return '[route.fwd]\nupstream="%s"\nupstream-timeout=3s\n' % url

    def post(self, key, payload, timeout=10.0):
        return self.node.request("POST", "/v1/webhook/fwd", payload,
                                 {"Idempotency-Key": key}, timeout)

    def record(self, key):
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=fwd" % key)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def assert_reused(self, key, payload):
        status, _, body = self.post(key, payload)
        self.assertEqual(status, 422, body)
        doc = json.loads(body)
        self.assertEqual(doc["type"], PROBLEM + "key-reused", body)
        self.assertEqual(doc["idempotency_key"], key, body)

    def passivated(self):
        return metric(self.node, "oncegate_key_actors_passivated_total") or 0


class ReuseAfterRestartTest(ReuseCase, unittest.TestCase):
    def test_a_reused_key_after_a_restart_is_422_and_not_forwarded(self):
        first, other = {"order": "buy", "qty": 1}, {"order": "buy", "qty": 2}
        status, _, body = self.post("re-1", first)
        self.assertEqual(status, 200, body)
        before = self.record("re-1")
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        self.assert_reused("re-1", other)
        self.assertEqual(self.up.executions("re-1"), 1)
        # The record is the first request's, untouched.
        after = self.record("re-1")
        for field in ("state", "fingerprint", "first_seen", "status",
                      "response"):
            self.assertEqual(after[field], before[field], field)
        status, _, body = self.post("re-1", first)
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["type"], PROBLEM + "duplicate")
        self.assert_reused("re-1", other)
        self.assertEqual(self.up.executions("re-1"), 1)


class ReuseColdKeyTest(ReuseCase, unittest.TestCase):
    # Key actors leave memory quickly; no decision cache on the HTTP side.
    node_args = ("--keys.idle-timeout=200ms", "--keys.decision-cache=0")

    def test_a_reused_completed_key_whose_actor_left_memory_is_422(self):
        status, _, body = self.post("cold-1", {"qty": 1})
        self.assertEqual(status, 200, body)
        gone = self.passivated()
        self.assertTrue(wait_for(lambda: self.passivated() > gone, 5),
                        "the key actor did not leave memory")
        self.assert_reused("cold-1", {"qty": 2})
        self.assertEqual(self.up.executions("cold-1"), 1)
        self.assertEqual(self.post("cold-1", {"qty": 1})[0], 409)

    def test_a_reused_key_while_the_first_is_in_flight_is_422(self):
        self.up.set_mode("slow", 10)
        first = {}

        def send():
            first["answer"] = self.post("fly-1", {"qty": 1}, timeout=15)

        t = threading.Thread(target=send)
        t.start()
        try:
            self.assertTrue(wait_for(
                lambda: self.up.executions("fly-1") == 1, 5))
            # Warm: the key actor knows the record in flight.
            self.assert_reused("fly-1", {"qty": 2})
            # Cold: the key actor left memory while the forward runs; the
            # store decides against the record in flight.
            gone = self.passivated()
            self.assertTrue(wait_for(lambda: self.passivated() > gone, 5),
                            "the key actor did not leave memory")
            self.assertEqual(self.record("fly-1")["state"], "in_flight")
            self.assertEqual(metric(self.node, "oncegate_live_key_actors"), 0)
            self.assert_reused("fly-1", {"qty": 2})
            self.assertEqual(self.up.executions("fly-1"), 1)
        finally:
            self.up.set_mode("normal")
            t.join(15)
        self.assertEqual(first["answer"][0], 200, first)
        self.assertEqual(self.up.executions("fly-1"), 1)
        self.assertEqual(self.post("fly-1", {"qty": 1})[0], 409)
        self.assert_reused("fly-1", {"qty": 2})
        self.assertEqual(self.up.counts()["keys"], {"fly-1": 1})


if __name__ == "__main__":
    unittest.main()
