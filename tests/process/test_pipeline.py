"""Forwarding to an upstream: at most once, outcomes stored and replayed.

A real oncegate binary in front of the counting test upstream
(tools/test_upstream.py), both on loopback.
"""

import json
import threading
import unittest
from urllib.parse import quote

from harness import ForwardingCase, join_threads, start_threads, wait_for



def config(url):
    # The operator's DELETE and complete below come from loopback without a
    # token (tests/process/test_admin_access.py covers the token).
    return """
[admin]
allow-unauthenticated-loopback=true
[route.replay]
upstream="{url}"
on-duplicate="replay"
[route.fast]
upstream="{url}"
upstream-timeout=500ms
[route.early]
upstream="{url}"
respond-after=300ms
""".format(url=url)


class PipelineTest(ForwardingCase, unittest.TestCase):
    def config(self, url):
        return config(url)

    def parallel(self, n, fn):
        results = []
        lock = threading.Lock()
        barrier = threading.Barrier(n)

        def run(_):
            barrier.wait(10)
            r = fn()
            with lock:
                results.append(r)

        join_threads(start_threads(run, range(n)), 60)
        self.assertEqual(len(results), n)
        return results

    def test_the_first_request_is_forwarded_with_its_key_and_answered(self):
        k = self.key()
        status, headers, body = self.post(k)
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(doc["order"], "accepted")
        self.assertEqual(doc["key"], k)  # the upstream saw Idempotency-Key
        self.assertEqual(headers["idempotency-key"], k)
        self.assertEqual(self.up.executions(k), 1)
        status, _, body = self.post(k)
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["original_status"], 200)
        self.assertEqual(self.up.executions(k), 1)
        _, rec = self.record(k)
        self.assertEqual(rec["state"], "completed")
        self.assertEqual(rec["status"], 200)

    def test_one_hundred_concurrent_identical_requests_execute_once(self):
        k = self.key()
        self.up.set_mode("slow", 0.3)
        statuses = [r[0] for r in self.parallel(100, lambda: self.post(k))]
        self.up.set_mode("normal")
        self.assertEqual(self.up.executions(k), 1)
        self.assertEqual(statuses.count(200), 1, statuses)
        self.assertEqual(statuses.count(409), 99, statuses)

    def test_replay_mode_returns_the_stored_response_byte_for_byte(self):
        k = self.key()
        self.up.set_mode("slow", 0.3)
        results = self.parallel(100, lambda: self.post(k, "replay"))
        self.up.set_mode("normal")
        self.assertEqual(self.up.executions(k), 1)
        first = [r for r in results if "idempotent-replayed" not in r[1]]
        self.assertEqual(len(first), 1)
        status, _, body = first[0]
        self.assertEqual(status, 200)
        for s, h, b in results:
            if "idempotent-replayed" in h and s != 409:
                self.assertEqual((s, b), (status, body))
            elif s == 409:
                self.assertEqual(json.loads(b)["type"],
                                 "https://oncegate.dev/problems/in-flight")
        replayed = self.post(k, "replay")
        self.assertEqual(replayed[0], status)
        self.assertEqual(replayed[2], body)
        self.assertEqual(replayed[1]["idempotent-replayed"], "true")
        self.assertEqual(replayed[1]["content-type"], "application/json")

    def test_an_upstream_500_is_the_stored_outcome(self):
        k, _, body = self.post_new_key("replay", 500, "error")
        self.up.set_mode("normal")
        again = self.post(k, "replay")
        self.assertEqual((again[0], again[2]), (500, body))
        self.assertEqual(self.up.executions(k), 1)
        k2 = self.key()
        self.up.set_mode("error")
        self.post(k2)
        status, _, body = self.post(k2)
        self.assertEqual(status, 409)
        self.assertEqual(json.loads(body)["original_status"], 500)

    def test_a_refused_connection_releases_the_key_and_a_retry_executes(self):
        k = self.key()
        self.up.refuse()
        status, headers, body = self.post(k)
        self.assertEqual(status, 503, body)
        self.assertEqual(headers["retry-after"], "1")
        self.assertEqual(json.loads(body)["type"],
                         "https://oncegate.dev/problems/upstream-unavailable")
        self.assertEqual(self.record(k)[0], 404)  # released
        self.up.resume()
        self.assertEqual(self.post(k)[0], 200)
        self.assertEqual(self.up.executions(k), 1)

    def test_a_dropped_request_is_in_doubt_and_never_retried(self):
        k, _, body = self.post_new_key("", 502, "drop")
        self.assertEqual(json.loads(body)["type"],
                         "https://oncegate.dev/problems/in-doubt")
        self.up.set_mode("normal")
        for _ in range(10):
            status, _, body = self.post(k)
            self.assertEqual(status, 409)
            self.assertEqual(json.loads(body)["type"],
                             "https://oncegate.dev/problems/in-doubt")
        self.assertEqual(self.up.executions(k), 1)
        status, _, body = self.node.request(
            "GET", "/v1/keys?state=in_doubt&route=default")
        self.assertEqual(status, 200, body)
        listed = [r["key"] for r in json.loads(body)["records"]]
        self.assertIn(k, listed)
        # The operator releases it: the next retry executes once.
        status, _, _ = self.node.request("DELETE", "/v1/keys/" + quote(k))
        self.assertEqual(status, 200)
        self.assertEqual(self.post(k)[0], 200)
        self.assertEqual(self.up.executions(k), 2)
        self.assertEqual(self.post(k)[0], 409)
        self.assertEqual(self.up.executions(k), 2)

    def test_an_upstream_timeout_is_in_doubt_with_504(self):
        k, _, _ = self.post_new_key("fast", 504, "slow", 5)
        self.up.set_mode("normal")
        self.assertEqual(self.record(k, "fast")[1]["state"], "in_doubt")
        self.assertEqual(self.post(k, "fast")[0], 409)
        self.assertEqual(self.up.executions(k), 1)

    def test_a_slow_upstream_gets_202_and_its_outcome_is_stored(self):
        k, _, body = self.post_new_key("early", 202, "slow", 1.5)
        self.assertEqual(json.loads(body)["status"], "in_progress")
        # While in flight, a retry is told to come back.
        status, headers, _ = self.post(k, "early")
        self.assertEqual(status, 409)
        self.assertEqual(headers["retry-after"], "1")
        self.assertTrue(wait_for(
            lambda: (self.record(k, "early")[1] or {}).get("state")
            == "completed", 10))
        self.up.set_mode("normal")
        status, _, body = self.post(k, "early")
        self.assertEqual(status, 409)
        self.assertEqual(json.loads(body)["original_status"], 200)
        self.assertEqual(self.up.executions(k), 1)

    def test_an_operator_completes_an_in_doubt_key(self):
        k = self.key()
        self.up.set_mode("drop")
        self.assertEqual(self.post(k, "replay")[0], 502)
        self.up.set_mode("normal")
        outcome = {"status": 201, "body": '{"order":"verified"}',
                   "content_type": "application/json"}
        status, _, body = self.node.request(
            "POST", "/v1/keys/%s/complete?route=replay" % quote(k), outcome)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["state"], "completed")
        status, _, body = self.post(k, "replay")
        self.assertEqual((status, body), (201, b'{"order":"verified"}'))
        # Completing twice is refused.
        status, _, _ = self.node.request(
            "POST", "/v1/keys/%s/complete?route=replay" % quote(k), outcome)
        self.assertEqual(status, 409)
        self.assertEqual(self.up.executions(k), 1)

    def test_a_crash_while_forwarding_leaves_the_key_in_doubt(self):
        k = self.key()
        self.up.set_mode("slow", 30)
        sender = threading.Thread(target=lambda: self._swallow(k))
        sender.start()
        self.assertTrue(wait_for(lambda: self.up.executions(k) == 1, 10))
        self.node.kill()  # SIGKILL while the upstream holds the request
        self.up.set_mode("normal")
        sender.join(15)
        self.node.start()
        _, rec = self.record(k)
        self.assertEqual(rec["state"], "in_doubt")
        for _ in range(5):
            status, _, body = self.post(k)
            self.assertEqual(status, 409, body)
            self.assertEqual(json.loads(body)["type"],
                             "https://oncegate.dev/problems/in-doubt")
        self.assertEqual(self.up.executions(k), 1)

    def _swallow(self, k):
        try:
            self.post(k, timeout=20)
        except OSError:
            pass


if __name__ == "__main__":
    unittest.main()
